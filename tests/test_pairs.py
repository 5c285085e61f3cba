"""NCCL/aws-ofi-nccl pairs: refused at site load, labelled by who vouches and how.

A pinned pair outside nccl-ss11's ``VOUCHED_PAIRS`` used to render and then
fail after a solve of minutes; now the loader refuses it, over a broken copy
of a shipped site, naming the pairs vouched for that NCCL or that plugin.
The table has one home (the package file); the wrapper reads it and
docs/design.md must show the same rows.  No Spack needed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
import yaml
from support.sites import edited_site
from torchmpi import gpuvendor, pairs, spackenv
from torchmpi import site as sitemod
from torchmpi.checks import network
from torchmpi.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def _pin(version: str, plugin: str | None = None):
    def edit(data: dict) -> None:
        data["nccl"] = {"version": version, **({"plugin": plugin} if plugin else {})}
    return edit


def _error(tmp_path: Path, edit) -> str:
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "derecho", edit)
    return str(err.value)


def test_unvouched_plugin_is_refused_at_load_with_the_vouched_pairs(tmp_path: Path) -> None:
    msg = _error(tmp_path, _pin("2.21.5-1", "1.19.0"))
    line = next(s for s in msg.splitlines() if ": nccl.plugin: " in s)
    assert re.search(r"derecho\.yaml:\d+:\d+: nccl\.plugin: aws-ofi-nccl 1\.19\.0 with NCCL"
                     r" 2\.21\.5-1 is not a vouched pair", line), line
    # What NCCL 2.21.5-1 allows, and who vouches for each, by what record.
    assert ("allowed with NCCL 2.21.5-1: 1.6.0 (built for Slingshot by NCAR's build script"
            " with libfabric 1.15.2.0)") in line
    # What plugin 1.19.0 is vouched with, Slingshot and EFA alike.
    assert "2.27.7-1 (built for Slingshot by HPE's build script with libfabric 1.22.0)" in line
    assert "2.29.7-1 (listed in AWS's release notes of the plugin)" in line


def test_nccl_in_no_pair_is_refused_at_load(tmp_path: Path) -> None:
    msg = _error(tmp_path, _pin("2.26.2-1", "1.6.0"))
    assert re.search(r": nccl\.version: NCCL 2\.26\.2-1 is in no vouched NCCL/aws-ofi-nccl"
                     r" pair.*allowed: 2\.29\.7-1, 2\.29\.2-1, ", msg), msg


def test_unvouched_pair_is_allowed_off_slingshot(tmp_path: Path) -> None:
    """Only nccl-ss11 (Slingshot) is bound to the table; NCCL alone may be any release."""
    site = edited_site(tmp_path, "generic-ib", _pin("2.26.2-1"))
    assert site.data["nccl"]["version"] == "2.26.2-1"


def test_every_vouched_pair_loads(tmp_path: Path) -> None:
    for pair in pairs.vouched():
        edited_site(tmp_path, "derecho", _pin(pair.nccl, pair.plugin))


def test_every_pair_is_labelled_by_who_vouches_for_it() -> None:
    by = {"slingshot": {"HPE", "CSCS", "NCAR"}, "efa": {"AWS"}}
    for pair in pairs.vouched():
        assert pair.by in by[pair.fabric], pair
        if pair.fabric == "efa":
            assert "RELEASENOTES" in pair.source, pair
        else:
            assert pair.by.split()[0] in pair.source, pair


def test_design_doc_shows_the_packages_table() -> None:
    """docs/design.md's table is the package's, row for row, with who vouches for each
    and by what kind of record."""
    text = (ROOT / "docs" / "design.md").read_text()
    section = text.split("### `nccl-ss11`", 1)[1]
    rows = [[c.strip() for c in line.strip().strip("|").split("|")]
            for line in section.splitlines() if line.startswith("| 2.")]
    assert rows, "no pair rows in docs/design.md"
    shown = {(r[0], r[1], r[2] if r[2] != "–" else "-", r[3], r[4]) for r in rows}
    where = {"slingshot": "Slingshot: {}", "efa": "EFA: {}"}
    table = {(p.nccl, p.plugin, p.libfabric, where[p.fabric].format(p.by), p.evidence)
             for p in pairs.vouched()}
    assert shown == table


def _pins(tmp_path: Path, name: str, edit=None) -> dict:
    site = edited_site(tmp_path, name, edit)
    _, data = spackenv.packages_yaml(site)
    return data["packages"]


def _slingshot_run() -> set[tuple[str, str]]:
    return {(p.nccl, p.plugin) for p in pairs.vouched() if p.fabric == "slingshot"}


def test_unpinned_slingshot_site_gets_a_slingshot_run_pair(tmp_path: Path) -> None:
    def unpin(data: dict) -> None:
        data.pop("nccl", None)
    pkgs = _pins(tmp_path, "derecho", unpin)
    pair = (pkgs["nccl"]["require"][0].lstrip("@"), pkgs["aws-ofi-nccl"]["require"][0].lstrip("@"))
    assert pair in _slingshot_run(), pair
    # The newest such pair, by release numbers (not by the table's own order).
    def number(version: str) -> tuple[int, ...]:
        return tuple(int(n) for n in re.findall(r"\d+", version))
    newest = max(_slingshot_run(), key=lambda p: (number(p[0]), number(p[1])))
    assert pair == newest


def test_nccl_pinned_alone_gets_its_slingshot_run_plugin(tmp_path: Path) -> None:
    pkgs = _pins(tmp_path, "derecho", _pin("2.27.7-1"))
    assert pkgs["aws-ofi-nccl"]["require"] == ["@1.19.0"]
    # NCCL 2.29.2-1: CSCS deploys it with 1.17.2, while 1.18.0 is vouched by AWS's
    # release notes only (CSCS's 1.18.0-dev is a patched master commit, no release).
    pkgs = _pins(tmp_path, "derecho", _pin("2.29.2-1"))
    assert pkgs["aws-ofi-nccl"]["require"] == ["@1.17.2"]
    # An NCCL vouched only by release notes: the solver picks among its plugins.
    pkgs = _pins(tmp_path, "derecho", _pin("2.28.7-1"))
    assert pkgs["nccl"]["require"] == ["@2.28.7-1"] and "aws-ofi-nccl" not in pkgs


def test_shipped_slingshot_sites_render_a_vouched_pair() -> None:
    """An NVIDIA site pins an NCCL/plugin pair of VOUCHED_PAIRS; an AMD site has no nccl
    (RCCL is its ROCm's release) and pins the plugin vouched with that ROCm."""
    vouched = {(p.nccl, p.plugin) for p in pairs.vouched()}
    rccl_vouched = {(p.rocm, p.plugin) for p in pairs.vouched_rccl()}
    amd_sites = 0
    for name in sitemod.available():
        site = sitemod.load(name)
        if site.data["fabric"] != "slingshot":
            continue
        text = (ROOT / "environments" / name / "packages.yaml").read_text()
        pkgs = yaml.safe_load(text)["packages"]
        if site.gpu_vendor == "amd":
            amd_sites += 1
            assert "nccl" not in pkgs, name
            pair = (site.rocm["version"], pkgs["aws-ofi-nccl"]["require"][0].lstrip("@"))
            assert pair in rccl_vouched, (name, pair)
            continue
        pair = (pkgs["nccl"]["require"][0].lstrip("@"),
                pkgs["aws-ofi-nccl"]["require"][0].lstrip("@"))
        assert pair in vouched, (name, pair)
        if not site.data.get("nccl"):
            assert pair in _slingshot_run(), (name, pair)
    assert amd_sites, "no AMD Slingshot site shipped: the RCCL branch above is untested"


def test_every_label_names_the_libfabric_the_pair_ran_with() -> None:
    """A pair vouched for Slingshot is labelled with its libfabric (CSCS deploys
    2.29.2-1 + 1.17.2 with 2.4.0, Perlmutter has 1.20.1); the release notes' pairs have
    none recorded and say nothing about one."""
    for pair in pairs.vouched():
        if pair.libfabric == "-":
            assert "libfabric" not in pair.label, pair
        else:
            assert pair.label.endswith(f" with libfabric {pair.libfabric}"), pair.label


def test_perlmutters_rendered_pin_names_the_pairs_libfabric() -> None:
    """The committed packages.yaml says which libfabric the chosen pair's source used; the
    note at render says the site's 1.20.1 is another major (checks.network.notes, not repeated)."""
    text = (ROOT / "environments" / "perlmutter" / "packages.yaml").read_text()
    assert "(deployed on Slingshot by CSCS with libfabric 2.4.0;" in text
    notes = network.notes(sitemod.load("perlmutter").data)
    assert len(notes) == 1 and "libfabric 1.20.1:" in notes[0], notes
    assert notes[0].count("with libfabric 2.4.0") == 1, notes[0]
    hpe = "(built for Slingshot by HPE's build script with libfabric 1.22.0)"
    assert hpe in notes[0], notes[0]


def test_an_amd_site_gets_no_nccl_pair_note() -> None:
    """The libfabric note is about the NVIDIA NCCL pair a site would be pinned to; an
    AMD site has no nccl (its RCCL is its ROCm's), so LUMI-G's libfabric 1.x stand-in
    must not be told about CSCS's NCCL pair."""
    data = sitemod.load("lumi").data
    assert data["libfabric"]["spec"].startswith("libfabric@1.")
    assert network.notes(data) == []


def test_the_libfabric_note_follows_the_pair_tables_vendor(monkeypatch) -> None:
    """The note is about the table's pairs, so it keys on the GPU vendor the table serves,
    not on a vendor named in the rule: were the table AMD's, LUMI-G would be told and
    Perlmutter not."""
    lumi, perlmutter = sitemod.load("lumi").data, sitemod.load("perlmutter").data
    assert network.notes(lumi) == [] and len(network.notes(perlmutter)) == 1
    monkeypatch.setattr(pairs, "VENDOR", "amd")
    assert network.notes(perlmutter) == []
    assert len(network.notes(lumi)) == 1, network.notes(lumi)


def test_the_pair_tables_vendor_is_the_packages() -> None:
    """nccl-ss11, the table's home, is NCCL for the GPUs of ``pairs.VENDOR``: a CUDA
    package that requires ``+cuda`` (the vendor whose architecture variant is cuda_arch)."""
    text = (ROOT / "spack_repo/torchmpi/packages/nccl_ss11/package.py").read_text()
    assert re.search(r"class NcclSs11\([^)]*\bCudaPackage\b", text)
    assert 'requires("+cuda"' in text
    assert gpuvendor.table()[pairs.VENDOR]["arch_variant"] == "cuda_arch"


def _package_file(tmp_path: Path, monkeypatch, text: str) -> None:
    """A checkout at ``tmp_path`` whose nccl-ss11 package file is ``text``."""
    pkg = tmp_path / "spack_repo" / "torchmpi" / "packages" / "nccl_ss11"
    pkg.mkdir(parents=True)
    (pkg / "package.py").write_text(text)
    (tmp_path / "sites").mkdir()
    monkeypatch.setenv("TORCHMPI_ROOT", str(tmp_path))


@pytest.fixture
def fresh_vouched():
    pairs.vouched.cache_clear()
    pairs.vouched_rccl.cache_clear()
    yield
    pairs.vouched.cache_clear()  # the next test reads the checkout's tables again
    pairs.vouched_rccl.cache_clear()


def test_vouched_pairs_are_read_from_their_own_table(tmp_path, monkeypatch, fresh_vouched):
    """Another table of the package file (the RCCL pairs, an earlier constant) is never
    taken for VOUCHED_PAIRS; the pairs come newest NCCL first."""
    row = ("2.0.0-1", "1.0.0", "-", "efa", "AWS", "notes", "release notes")
    _package_file(tmp_path, monkeypatch,
                  f"AN_EARLIER_TABLE = ({row!r},)\n"
                  "VOUCHED_PAIRS = (('2.18.3-1', '1.6.0', '1.15.2.0', 'slingshot', 'NCAR', 'x',"
                  " 'build script'), ('2.21.5-1', '1.14.0', '-', 'slingshot', 'HPE', 'y',"
                  " 'job log'))\n"
                  "ZED = ()\n")
    assert [(p.nccl, p.plugin) for p in pairs.vouched()] == [("2.21.5-1", "1.14.0"),
                                                             ("2.18.3-1", "1.6.0")]


def test_a_package_file_without_the_table_is_a_user_error(tmp_path, monkeypatch,
                                                          fresh_vouched):
    _package_file(tmp_path, monkeypatch, "AN_EARLIER_TABLE = ()\n")
    with pytest.raises(UserError, match="no VOUCHED_PAIRS table"):
        pairs.vouched()


@pytest.mark.parametrize("table, read", [("VOUCHED_PAIRS", lambda: pairs.vouched()),
                                         ("VOUCHED_RCCL_PAIRS", lambda: pairs.vouched_rccl())])
def test_a_malformed_table_is_a_user_error_at_its_row(tmp_path, monkeypatch, fresh_vouched,
                                                     table: str, read) -> None:
    """A row that is no literal (a name, a call) is refused at its line and column, not
    a traceback from ast; a table that is absent stays what each reader says of it."""
    _package_file(tmp_path, monkeypatch, f"{table} = (\n    ('7.0.3', plugin),\n)\n")
    with pytest.raises(UserError, match=rf"nccl_ss11/package\.py:2:5: {table}: the row is no"
                                        " literal; allowed: a tuple of rows of 7 literal"):
        read()


@pytest.mark.parametrize("row, named", [
    ("'2.21.5-1'", "'2.21.5-1'"),  # a literal, but no tuple: named as written
    ("('2.21.5-1', '1.14.0', '-', 'slingshot', 'HPE', 'y', 'job log', 'extra')",
     "NCCL 2.21.5-1 with 1.14.0"),  # eight columns, the seventh a known kind: still refused
])
def test_a_row_of_the_wrong_shape_is_refused_at_its_line(tmp_path, monkeypatch, fresh_vouched,
                                                         row: str, named: str) -> None:
    """Only a tuple of exactly 7 columns has an evidence kind; any other literal is
    refused at its line and column, named by its first two columns or as written."""
    _package_file(tmp_path, monkeypatch, f"VOUCHED_PAIRS = (\n    {row},\n)\n")
    with pytest.raises(UserError) as err:
        pairs.vouched()
    assert ":2:5: VOUCHED_PAIRS, the row of " in str(err.value), err.value
    assert f"the row of {named}: evidence None is no known kind" in str(err.value), err.value


def test_each_rccl_pair_says_what_kind_of_evidence_vouches_for_it() -> None:
    """VOUCHED_RCCL_PAIRS' evidence column is one of the kinds the wording knows, and the
    kind is the source's: LUMI's is an EasyBuild recipe (.eb), OLCF's the build steps of
    a user guide (.rst), HPE's a build script (.sh); none of them a record of a run."""
    rows = {pair.rocm: pair for pair in pairs.vouched_rccl()}
    kinds = {"build recipe": ".eb:", "build steps": ".rst:", "build script": ".sh:"}
    assert {r: pair.evidence for r, pair in rows.items()} == {
        "7.0.3": "build recipe", "7.1.1": "build steps", "6.4.0": "build script"}
    for pair in rows.values():
        assert pair.evidence in pairs.RCCL_EVIDENCE and kinds[pair.evidence] in pair.source, pair


def test_an_rccl_pair_carries_its_evidence() -> None:
    """The one reader of VOUCHED_RCCL_PAIRS keeps every column: the plugin a packages.yaml
    pins and the wording of who vouches for it come from the same row."""
    pair = pairs.rccl("7.0.3")
    assert pair is not None
    assert (pair.rocm, pair.plugin, pair.fabric, pair.by, pair.evidence) == (
        "7.0.3", "1.20.0", "slingshot", "LUMI", "build recipe")
    assert pair.vouching == "LUMI's build recipe pairs with"
    assert pairs.rccl("7.2.0") is None
    assert [p.rocm for p in pairs.vouched_rccl()] == ["7.0.3", "7.1.1", "6.4.0"]  # file order


#: The wrapper's modules, each of which may look a pair table up by its name.
WRAPPER = ROOT / "wrapper" / "torchmpi"


def test_each_pair_table_has_one_reader() -> None:
    """Only torchmpi.pairs looks the pair tables up by name: a second reader (one that
    drops the evidence column, or parses the package file again) could pin a pair from
    one row and word it from another, or refuse what the first accepts."""
    readers = set()
    for path in WRAPPER.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Constant) and node.value in (
                    "VOUCHED_PAIRS", "VOUCHED_RCCL_PAIRS"):
                readers.add(path.relative_to(WRAPPER).as_posix())
    assert readers == {"pairs.py"}


def test_pairs_parses_no_package_file_itself() -> None:
    """pairs reads both tables through paths.package_rows, the one parser of a package
    file's literals: a loop of its own over the file's ``ast`` would be a second reader
    with rules of its own (which assignment counts, what a missing table is)."""
    tree = ast.parse((WRAPPER / "pairs.py").read_text())
    parses = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.Attribute)
              and node.attr in ("parse", "literal_eval", "walk")]
    assert parses == []


@pytest.mark.parametrize("site, says", [
    ("lumi", "LUMI's build recipe pairs with RCCL 7.0.3"),
    ("frontier", "OLCF's documented build steps pair with RCCL 7.1.1"),
])
def test_the_rendered_rccl_pin_words_its_evidence(site: str, says: str) -> None:
    """The committed packages.yaml says how the pair's source vouches for it: a recipe or
    build steps are not a run, so no AMD site's comment says "ran"."""
    text = (ROOT / "environments" / site / "packages.yaml").read_text()
    comment = text.split("  aws-ofi-nccl:", 1)[0].rsplit("\n  # The aws-ofi-nccl", 1)[1]
    assert says in " ".join(line.strip("# ") for line in comment.splitlines()), comment
    assert " ran " not in comment, comment
    pair = pairs.rccl(sitemod.load(site).rocm["version"])
    assert pair is not None and pair.vouching in says


def test_an_unknown_evidence_kind_is_a_user_error(tmp_path, monkeypatch,
                                                 fresh_vouched) -> None:
    """A row whose evidence is no known kind is refused naming the file, the row and the
    kinds allowed (the wording of every rendered comment depends on it)."""
    row = ("7.0.3", "1.20.0", "-", "slingshot", "LUMI", "x.eb:1", "hearsay")
    _package_file(tmp_path, monkeypatch, f"VOUCHED_RCCL_PAIRS = ({row!r},)\n")
    with pytest.raises(UserError) as err:
        pairs.rccl("7.0.3")
    text = str(err.value)
    assert "nccl_ss11/package.py" in text and "7.0.3" in text and "'hearsay'" in text
    assert "allowed: " + ", ".join(pairs.RCCL_EVIDENCE) in text, text


#: The kind of record each NVIDIA pair's source is: CSCS's an environment it deploys on
#: Alps (prgenv-gnu 26.3's docs page listing the versions), HPE's and NCAR's build
#: scripts, AWS's release notes (1.18.0's too: CSCS deploys a patched 1.18.0-dev); none
#: a job log.
NVIDIA_EVIDENCE = {
    ("2.29.7-1", "1.19.0"): "release notes", ("2.29.2-1", "1.18.0"): "release notes",
    ("2.29.2-1", "1.17.2"): "deployed environment", ("2.28.7-1", "1.19.0"): "release notes",
    ("2.28.7-1", "1.17.3"): "release notes", ("2.28.7-1", "1.17.2"): "release notes",
    ("2.27.7-1", "1.19.0"): "build script", ("2.27.3-1", "1.19.0"): "release notes",
    ("2.21.5-1", "1.6.0"): "build script",
}


def test_each_nccl_pair_says_what_kind_of_evidence_vouches_for_it() -> None:
    """VOUCHED_PAIRS' evidence column is a kind the wording knows and the source's own:
    release notes cite RELEASENOTES, a build script a .sh, a deployed environment
    CSCS's docs (cscs-docs)."""
    assert {(p.nccl, p.plugin): p.evidence for p in pairs.vouched()} == NVIDIA_EVIDENCE
    cites = {"release notes": "RELEASENOTES.md:", "build script": ".sh",
             "deployed environment": "eth-cscs/cscs-docs@"}
    for pair in pairs.vouched():
        assert pair.evidence in pairs.EVIDENCE and cites[pair.evidence] in pair.source, pair


def test_cscs_vouches_for_no_plugin_release_it_does_not_deploy() -> None:
    """CSCS's PyTorch uenv v2.9.1 asks aws-ofi-nccl@1.18.0-dev, which its recipe's own
    package defines as master commit eb9877e9 with HPE's endpoint_mr.eb9877e.patch
    (eth-cscs/alps-uenv@0db6323 recipes/pytorch/v2.9.1/gh200/repo/packages/aws_ofi_nccl/
    package.py:22,69-72; the plain 1.18.0 line is commented out): not the release 1.18.0
    that builtin builds.  That release is vouched by its release notes (AWS), whose row
    says what CSCS deploys instead; no CSCS row names it."""
    row = next(p for p in pairs.vouched() if (p.nccl, p.plugin) == ("2.29.2-1", "1.18.0"))
    assert (row.by, row.fabric, row.evidence, row.libfabric) == (
        "AWS", "efa", "release notes", "-"), row
    assert "v1.18.0 RELEASENOTES.md:12" in row.source and "1.18.0-dev" in row.source, row
    assert "eb9877e9" in row.source and "endpoint_mr" in row.source, row
    assert not [p for p in pairs.vouched() if p.by == "CSCS" and p.plugin == "1.18.0"]


@pytest.mark.parametrize("nccl, plugin, label", [
    ("2.21.5-1", "1.6.0", "built for Slingshot by NCAR's build script with libfabric 1.15.2.0"),
    ("2.29.2-1", "1.17.2", "deployed on Slingshot by CSCS with libfabric 2.4.0"),
    ("2.29.2-1", "1.18.0", "listed in AWS's release notes of the plugin"),
    ("2.29.7-1", "1.19.0", "listed in AWS's release notes of the plugin"),
])
def test_a_pairs_label_words_its_evidence(nccl: str, plugin: str, label: str) -> None:
    """Messages and pins label a pair as its record is: a build script built it, CSCS
    deployed it, AWS's release notes list it; only a job log would say it ran.  The
    release notes list NCCL releases the plugin was tested with or supports, for no
    fabric ("efa" is the table's column: AWS runs the plugin on EC2), so their label
    names none."""
    pair = next(p for p in pairs.vouched() if (p.nccl, p.plugin) == (nccl, plugin))
    assert pair.label == label
    for pair in pairs.vouched():
        assert ("run " in pair.label) == (pair.evidence == "job log"), pair.label
        if pair.evidence == "release notes":
            assert "EFA" not in pair.label and "Slingshot" not in pair.label, pair.label


def test_the_rendered_nccl_pin_words_its_evidence() -> None:
    """Perlmutter's committed packages.yaml says CSCS deployed the pair it is pinned to
    (a uenv recipe and its docs page), not that CSCS ran it."""
    text = (ROOT / "environments" / "perlmutter" / "packages.yaml").read_text()
    comment = text.split("  nccl:", 1)[0].rsplit("\n  # The newest", 1)[1]
    said = " ".join(line.strip("# ") for line in comment.splitlines())
    assert "(deployed on Slingshot by CSCS with libfabric 2.4.0;" in said, said
    assert " run " not in said and " ran " not in said, said


@pytest.mark.parametrize("row, found", [
    (("2.21.5-1", "1.6.0", "1.15.2.0", "slingshot", "NCAR", "x.sh:1", "hearsay"), "'hearsay'"),
    (("2.21.5-1", "1.6.0", "1.15.2.0", "slingshot", "NCAR", "x.sh:1"), "None"),
])
def test_an_unknown_nccl_evidence_kind_is_a_user_error(tmp_path, monkeypatch, fresh_vouched,
                                                       row: tuple, found: str) -> None:
    """A VOUCHED_PAIRS row whose evidence is no known kind (or missing) is refused naming
    the file, the row and the kinds allowed, as the RCCL table's is."""
    _package_file(tmp_path, monkeypatch, f"VOUCHED_PAIRS = ({row!r},)\n")
    with pytest.raises(UserError) as err:
        pairs.vouched()
    text = str(err.value)
    assert "nccl_ss11/package.py" in text and "2.21.5-1" in text and found in text, text
    assert "allowed: " + ", ".join(pairs.EVIDENCE) in text, text


@pytest.mark.parametrize("table, read, which", [
    ("VOUCHED_PAIRS", lambda: pairs.vouched(), "NCCL 2.21.5-1 with 1.6.0"),
    ("VOUCHED_RCCL_PAIRS", lambda: pairs.vouched_rccl(), "ROCm 2.21.5-1"),
])
def test_an_unknown_evidence_kind_is_refused_at_its_row(tmp_path, monkeypatch, fresh_vouched,
                                                        table: str, read, which: str) -> None:
    """The refusal of a row's evidence says file:line:col of that row (the project's rule
    for every refusal), here the second row, on line 4 at column 7."""
    good = ("2.27.7-1", "1.19.0", "1.22.0", "slingshot", "HPE", "x.sh:1", "build script")
    bad = ("2.21.5-1", "1.6.0", "1.15.2.0", "slingshot", "NCAR", "x.sh:1", "hearsay")
    _package_file(tmp_path, monkeypatch,
                  f"# the pairs\n{table} = (\n    {good!r},\n      {bad!r},\n)\n")
    with pytest.raises(UserError) as err:
        read()
    path = tmp_path / "spack_repo" / "torchmpi" / "packages" / "nccl_ss11" / "package.py"
    assert str(err.value).startswith(
        f"{path}:4:7: {table}, the row of {which}: evidence 'hearsay' is no known kind"), err


def test_both_tables_know_the_same_kinds_of_evidence() -> None:
    """One notion of evidence for NVIDIA and AMD pairs: the RCCL comment's wording and
    the label's cover the same kinds, and only a job log's says the pair ran."""
    assert list(pairs.RCCL_EVIDENCE) == list(pairs.EVIDENCE)
    for kind in pairs.EVIDENCE:
        ran = kind == "job log"
        assert ("ran " in pairs.RCCL_EVIDENCE[kind]) == ran, kind
        assert pairs.EVIDENCE[kind].startswith("run ") == ran, kind


def test_a_bad_rccl_row_is_only_a_slingshot_amd_sites_refusal(tmp_path, monkeypatch,
                                                               fresh_vouched) -> None:
    """The RCCL table is read for a Slingshot site with ROCm only: a bad row there does
    not stop every other site (an NVIDIA site, an AMD site on InfiniBand) from loading."""
    from torchmpi import gpuvendor

    bad = ("6.2.4", "1.6.0", "-", "slingshot", "OLCF", "x.sh:1", "hearsay")
    _package_file(tmp_path, monkeypatch, f"VOUCHED_RCCL_PAIRS = ({bad!r},)\n")
    assert gpuvendor._rocm_vouched({"fabric": "slingshot"}, None) == []
    assert gpuvendor._rocm_vouched({"fabric": "ib"}, "6.2.4") == []
    with pytest.raises(UserError, match="evidence 'hearsay' is no known kind"):
        gpuvendor._rocm_vouched({"fabric": "slingshot"}, "6.2.4")
