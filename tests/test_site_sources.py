"""Every site value cites where the centre states it.

The shipped site files for centres (Perlmutter, Alps, Derecho) define their
sources in the header (``[key]: <repository@commit path>`` or Derecho's
``[key] is its <path>``) and cite one on each value's line (``# [key]``).
These checks read the committed files as text and YAML and need no solve;
they fail when a value loses its citation, cites a key the header does not
define, or when a file drifts back to values without a source.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import yaml
from torchmpi import paths, runtime
from torchmpi import site as sitemod

#: Top-level keys whose values come from the centre and must cite it.
CITED_SECTIONS = {"target", "os", "uenv", "compilers", "gpu", "mpi", "libfabric", "nccl",
                  "runtime", "externals"}
#: Keys that are the tool's own choice or prose, not a centre's fact.
UNCITED_KEYS = {"kind", "source"}
#: Sites whose every value in CITED_SECTIONS cites a source (Derecho: see
#: test_derecho_site.py, which checks its externals the same way).
FULLY_CITED = ("perlmutter", "alps-gh200")
DEFINITION = re.compile(r"\[([a-z0-9]+)\](?::| (?:is )?its\s)")
CITATION = re.compile(r"\[([a-z0-9]+)\]")


def _text(site: str) -> str:
    return (paths.sites_dir() / f"{site}.yaml").read_text()


def _header(text: str) -> str:
    return text[: text.index("\nname:")]


def defined_keys(text: str) -> set[str]:
    """Citation keys the header defines."""
    return set(DEFINITION.findall(_header(text)))


def value_lines(text: str) -> Iterator[tuple[int, str, str, str]]:
    """(line number, section, code, comment) of each value in CITED_SECTIONS."""
    start = text.index("\nname:") + 1
    first = text[:start].count("\n") + 1
    section, block_indent = None, None
    for no, line in enumerate(text[start:].splitlines(), first):
        code, _, comment = line.partition(" #")
        if not code.strip() or code.lstrip().startswith("#"):
            continue
        indent = len(code) - len(code.lstrip())
        if block_indent is not None and indent > block_indent:
            continue
        block_indent = None
        if indent == 0 and not code.startswith("- "):  # a list item keeps its section
            section = code.split(":", 1)[0]
        m = re.match(r"\s*(?:-\s+)?(?:([\w-]+):)?\s*(.*)$", code)
        key, value = m.group(1), m.group(2).strip()
        if value in (">-", ">", "|", "|-"):
            block_indent = indent
        if not value or value.startswith((">", "|")) or key in UNCITED_KEYS:
            continue
        if section in CITED_SECTIONS:
            yield no, section, code.strip(), comment


@pytest.mark.parametrize("site", FULLY_CITED)
def test_every_value_cites_a_defined_source(site: str) -> None:
    text = _text(site)
    keys = defined_keys(text)
    assert keys, f"{site}: the header defines no [key]: <source>"
    lines = list(value_lines(text))
    assert len(lines) >= 10, f"{site}: found only {len(lines)} value lines"
    bad = [f"{site}.yaml:{no}: {code!r} cites {sorted(CITATION.findall(comment))}"
           f" (defined: {sorted(keys)})"
           for no, _, code, comment in lines
           if not CITATION.findall(comment) or not set(CITATION.findall(comment)) <= keys]
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("site", FULLY_CITED)
def test_every_runtime_variable_is_cited(site: str) -> None:
    """The line scanner sees each runtime.env variable (it cannot skip one)."""
    env = yaml.safe_load(_text(site))["runtime"]["env"]
    seen = {code.split(":", 1)[0] for _, section, code, _ in value_lines(_text(site))
            if section == "runtime"}
    assert set(env) <= seen, sorted(set(env) - seen)


def test_uncited_value_is_reported() -> None:
    """The check fails on a value without a citation (a copy with one comment gone)."""
    text = _text("perlmutter").replace("version: 8.1.28                                 # [pkgs]",
                                       "version: 8.1.28")
    assert "version: 8.1.28\n" in text
    missing = [code for _, _, code, comment in value_lines(text)
               if not CITATION.findall(comment)]
    assert missing == ["version: 8.1.28"]


# --- Perlmutter: NERSC's own sources -----------------------------------------------

def test_perlmutter_header_cites_nersc_repositories_at_commits() -> None:
    header = _header(_text("perlmutter"))
    for repo in ("NERSC/spack-infrastructure@", "NERSC/podman-hpc@"):
        assert re.search(re.escape(repo) + r"[0-9a-f]{40}\b", header), repo
    assert "etc/modules.d/nccl.yaml" in header
    assert "settings/perlmutter/packages.yaml" in header
    assert "polyMPO" not in header, "the third-party README is no longer a source"


def test_perlmutter_stack_is_nerscs() -> None:
    data = yaml.safe_load(_text("perlmutter"))
    assert data["libfabric"]["spec"].startswith("libfabric@1.20.1 ")
    assert data["libfabric"]["prefix"] == "/opt/cray/libfabric/1.20.1"
    assert data["mpi"]["prefix"] == "/opt/cray/pe/mpich/8.1.28/ofi/gnu/12.3"
    assert data["gpu"]["cuda"]["prefix"] == "/opt/nvidia/hpc_sdk/Linux_x86_64/23.9/cuda/12.2"


def test_perlmutter_runtime_is_nerscs_module() -> None:
    """NERSC's NCCL module: its five variables, and no HPE alt_read/TX/RX tuning."""
    env = runtime.environment(sitemod.load("perlmutter").data)
    nersc = {"FI_CXI_DISABLE_HOST_REGISTER": "1", "FI_MR_CACHE_MONITOR": "userfaultfd",
             "NCCL_CROSS_NIC": "1", "NCCL_SOCKET_IFNAME": "hsn", "NCCL_NET_GDR_LEVEL": "PHB",
             "MPICH_GPU_SUPPORT_ENABLED": "1"}
    assert {k: env.get(k) for k in nersc} == nersc
    assert not [k for k in env if k.startswith("FI_CXI_RDZV")
                or k in ("FI_CXI_DEFAULT_TX_SIZE", "FI_CXI_RX_MATCH_MODE")]


def test_alt_read_is_not_a_slingshot_default() -> None:
    """HPE's alt_read set reaches Cray MPICH too: a site opts in, the fabric does not."""
    _, defaults = runtime.fabric_defaults("slingshot")
    assert not [k for k, _ in defaults if k.startswith("FI_CXI_RDZV")]


# --- Alps: CSCS's PyTorch uenv -------------------------------------------------------

#: The runtime variables of CSCS's PyTorch uenv v2.9.1 (alps-uenv@0db6323,
#: recipes/pytorch/v2.9.1/gh200/environments.yaml, views.default env_vars)
#: that concern NCCL, libfabric and CUDA.
CSCS_PYTORCH_UENV_ENV = {
    "NCCL_NET": "AWS Libfabric", "NCCL_CROSS_NIC": "1", "NCCL_P2P_LEVEL": "NVL",
    "NCCL_NET_GDR_LEVEL": "PHB", "NCCL_NET_GDR_C2C": "1", "NCCL_NET_GDR_READ": "1",
    "NCCL_PROTO": "^LL128", "NCCL_NCHANNELS_PER_NET_PEER": "4", "FI_PROVIDER": "cxi",
    "FI_CXI_DEFAULT_CQ_SIZE": "131072", "FI_CXI_DEFAULT_TX_SIZE": "16384",
    "FI_CXI_DISABLE_HOST_REGISTER": "1", "FI_CXI_RDZV_PROTO": "alt_read",
    "FI_CXI_RDZV_EAGER_SIZE": "0", "FI_CXI_RDZV_GET_MIN": "0", "FI_CXI_RDZV_THRESHOLD": "0",
    "FI_CXI_RX_MATCH_MODE": "hybrid", "FI_MR_CACHE_MONITOR": "userfaultfd",
    "CUDA_CACHE_DISABLE": "1",
}


def test_alps_runtime_is_cscs_pytorch_uenv() -> None:
    env = runtime.environment(sitemod.load("alps-gh200").data)
    assert {k: env.get(k) for k in CSCS_PYTORCH_UENV_ENV} == CSCS_PYTORCH_UENV_ENV
    assert env["MPICH_GPU_SUPPORT_ENABLED"] == "0", "CSCS: GPU-aware MPI with NCCL can deadlock"


def test_alps_stack_is_the_pytorch_uenv() -> None:
    data = yaml.safe_load(_text("alps-gh200"))
    assert data["compilers"][0]["spec"] == "gcc@14.2.0"
    assert data["mpi"]["version"] == "9.0.0"
    assert data["gpu"]["cuda"]["spec"] == "cuda@12.9.1"
    assert data["gpu"]["cudnn"]["spec"] == "cudnn@9.8.0.87-12"
    assert data["libfabric"]["spec"] == "libfabric@2.4.0-dev fabrics=cxi"
    assert data["nccl"] == {"version": "2.29.2-1", "plugin": "1.18.0"}
    header = _header(_text("alps-gh200"))
    assert re.search(r"eth-cscs/alps-uenv@[0-9a-f]{40}\b", header)
    assert "recipes/pytorch/v2.9.1/gh200/environments.yaml" in header


def test_ll128_is_not_a_slingshot_default() -> None:
    """Only CSCS sets NCCL_PROTO=^LL128, for speed: LL128, on by default from NCCL
    2.27, "typically performs worse on Slingshot" (eth-cscs/cscs-docs@80abed1
    docs/software/communication/nccl_env_vars:13-15; the uenv recipe gives no
    reason).  So it is Alps' value, not the fabric's (docs/design.md, "Slingshot
    runtime defaults").  HPE's GH200 corruption workaround keeps LL128 and moves
    LL128-sized sends to rendezvous instead (FI_CXI_RDZV_*, the fabric's gh200 layer)."""
    _, defaults = runtime.fabric_defaults("slingshot")
    assert "NCCL_PROTO" not in dict(defaults)
    assert "Slingshot runtime defaults" in (paths.root() / "docs" / "design.md").read_text()


# --- Reuse: each Cray site's externals come from what its centre publishes -----------

#: Per site: the header keys of the centre's published files its externals
#: cite, the one prefix those sources give them, and the fewest externals the
#: from-source counts of docs/performance.md were measured with.
CENTRE_EXTERNALS = {
    # NERSC/spack-infrastructure: SLES packages at /usr in
    # settings/perlmutter/packages.yaml and hwloc at /usr in
    # spack-configs/base/spack.yaml (NERSC publishes no install paths of its
    # Spack stacks: docs/performance.md).
    "perlmutter": (("pkgs", "base"), "/usr", 15),
    # CSCS's PyTorch uenv v2.9.1 package tables (cscs-docs pytorch.md), all
    # linked into the uenv's `default` view.
    "alps-gh200": (("table",), "/user-environment/env/default", 80),
}


def _externals_lines(text: str) -> list[tuple[str, str]]:
    """(code, comment) of each `externals:` value line."""
    return [(code, comment) for _, section, code, comment in value_lines(text)
            if section == "externals"]


@pytest.mark.parametrize("site", sorted(CENTRE_EXTERNALS))
def test_centre_externals_cite_the_centres_stack(site: str) -> None:
    keys, prefix, least = CENTRE_EXTERNALS[site]
    text = _text(site)
    externals = yaml.safe_load(text).get("externals") or []
    assert len(externals) >= least, f"{site}: {len(externals)} externals, fewer than {least}"
    assert set(keys) <= defined_keys(text), f"{site}: the header does not define all of {keys}"
    lines = _externals_lines(text)
    assert len(lines) == 2 * len(externals), "one spec and one prefix line per external"
    specs = [c for c, _ in lines if c.startswith("- spec:")]
    assert len(specs) == len(externals)
    assert not [c for c, comment in lines if c.startswith("- spec:")
                and not set(keys) & set(CITATION.findall(comment))], \
        f"every spec cites one of {keys}"
    assert {e["prefix"] for e in externals} == {prefix}
    for ext in externals:
        name, _, version = ext["spec"].split()[0].partition("@")
        assert name and version, f"{site}: {ext['spec']!r} names no version"


def test_alps_python_packages_name_the_uenvs_python() -> None:
    externals = yaml.safe_load(_text("alps-gh200"))["externals"]
    pythons = [e["spec"] for e in externals if e["spec"].startswith("python@")]
    assert len(pythons) == 1
    python = pythons[0].split()[0]
    extensions = [e["spec"] for e in externals if e["spec"].startswith("py-")]
    assert extensions and all(f"^{python}" in s.split() for s in extensions), extensions


def test_built_pair_is_not_taken_from_a_centre() -> None:
    """torchmpi builds NCCL, its plugin and torch itself; a centre's copy (the
    uenv's is built for cuda_arch=90a) is never an external."""
    for site in CENTRE_EXTERNALS:
        names = {e["spec"].split("@")[0]
                 for e in yaml.safe_load(_text(site)).get("externals") or []}
        assert not names & {"nccl", "aws-ofi-nccl", "py-torch", "py-mpi4py", "magma"}, site


def test_uncited_external_is_reported() -> None:
    """The scanner sees externals lines: dropping a citation is caught."""
    text = _text("perlmutter").replace("- spec: git@2.35.3                  # [pkgs]",
                                       "- spec: git@2.35.3")
    assert [code for code, comment in _externals_lines(text)
            if not CITATION.findall(comment)] == ["- spec: git@2.35.3"]


# --- Derecho: cuDNN as NCAR's PyTorch build loads it ---------------------------------

def test_derecho_cudnn_is_the_one_ncars_build_loads() -> None:
    """NCAR's profile.d/modules.sh (quoted in the header as [build]) loads
    cudnn/8.8.1.3-12; the 9.2 lines of its config_env.sh are commented out."""
    text = _text("derecho")
    header = " ".join(line.lstrip("# ") for line in _header(text).splitlines())
    loaded = re.search(r"\[build\] is its profile\.d/modules\.sh.*?`module load ([^`]*)`", header)
    assert loaded, "the header quotes the module line of NCAR's build"
    modules = loaded[1].split()
    cudnn = yaml.safe_load(text)["gpu"]["cudnn"]
    assert cudnn["modules"] == [m for m in modules if m.startswith("cudnn/")]
    assert cudnn["spec"] == "cudnn@" + cudnn["modules"][0].split("/", 1)[1]
    assert cudnn["prefix"].endswith("/cudnn/" + cudnn["spec"].split("@")[1])
    keys = defined_keys(text)
    lines = [(code, comment) for _, section, code, comment in value_lines(text)
             if section == "gpu" and "cudnn" in code]
    assert len(lines) == 3, lines
    for code, comment in lines:
        assert CITATION.findall(comment) and set(CITATION.findall(comment)) <= keys, code


# --- package comments say what the release notes say ---------------------------------

#: The verb each aws-ofi-nccl release note uses for its NCCL versions
#: (RELEASENOTES.md at the tag, line 10 or 12): v1.19.0 "has been tested with";
#: v1.18.0, v1.17.3 and v1.17.2 "supports".
RELEASE_NOTE_VERB = {"1.19.0": "tested with", "1.18.0": "supports",
                     "1.17.3": "supports", "1.17.2": "supports"}


def test_vouched_pair_sources_use_the_release_notes_verb() -> None:
    import ast

    path = paths.root() / "spack_repo" / "torchmpi" / "packages" / "nccl_ss11" / "package.py"
    pairs = next(ast.literal_eval(node.value) for node in ast.parse(path.read_text()).body
                 if isinstance(node, ast.Assign)
                 and getattr(node.targets[0], "id", "") == "VOUCHED_PAIRS")
    quoted = 0
    for row in pairs:
        nccl, plugin, source = row[0], row[1], row[5]
        m = re.search(r"aws/aws-ofi-nccl v(\S+) RELEASENOTES\.md:\d+ \((.+) NCCL (\S+)\)", source)
        if not m:
            continue
        quoted += 1
        assert m[1] == plugin and m[3] == nccl, source
        verb = RELEASE_NOTE_VERB[plugin]
        assert m[2] == verb, f"{source}: the release notes say {verb!r}"
    assert quoted >= 4


# --- install trees and scheduler access --------------------------------------------

#: Centre sites, the install.root and checks.access lines each must cite, and what the
#: centre's documents make them: a shared tree that is never purged, and the options
#: every job of that machine's GPU partition needs.
CENTRE_LAYOUT = {
    "perlmutter": {"root": "/global/common/software/", "access": ["-C gpu"]},
    "derecho": {"root": "/glade/work/", "access": ["-q main"]},
}
#: Purged or per-job file systems: NERSC's $PSCRATCH/$SCRATCH (8 weeks), NCAR's Derecho
#: scratch (180 days), a node's $TMPDIR.
PURGED = re.compile(r"\$\{?(PSCRATCH|SCRATCH|TMPDIR)\b|/pscratch/|/glade/derecho/scratch/")


def _cited_line(text: str, needle: str) -> str:
    lines = [line for line in text.splitlines() if line.split(" #")[0].strip() == needle]
    assert len(lines) == 1, (needle, lines)
    return lines[0]


@pytest.mark.parametrize("site", sorted(CENTRE_LAYOUT))
def test_install_root_is_shared_unpurged_and_cited(site: str) -> None:
    text = _text(site)
    root = yaml.safe_load(text)["install"]["root"]
    assert not PURGED.search(root), f"{site}: install.root {root} is on a purged file system"
    assert root.startswith(CENTRE_LAYOUT[site]["root"]), root
    cites = set(CITATION.findall(_cited_line(text, f"root: {root}").partition(" #")[2]))
    assert cites and cites <= defined_keys(text), (site, cites)


@pytest.mark.parametrize("site", sorted(CENTRE_LAYOUT))
def test_scheduler_access_is_the_centres_and_reaches_reframe(site: str) -> None:
    from torchmpi import reframe as rfmconf
    from torchmpi import site as sitemod

    text = _text(site)
    access = yaml.safe_load(text)["checks"]["access"]
    assert access == CENTRE_LAYOUT[site]["access"]
    for entry in access:
        cites = set(CITATION.findall(_cited_line(text, f"- {entry}").partition(" #")[2]))
        assert cites and cites <= defined_keys(text), (site, entry, cites)
    config = rfmconf.configuration(sitemod.load(site), env_from="runtime-sh",
                                   outdir=paths.sites_dir(), extra_prepare=[])
    assert config["systems"][0]["partitions"][0]["access"] == access


@pytest.mark.parametrize(("site", "option", "lines"), [
    ("perlmutter", "account=m0000", ["#SBATCH -C gpu", "#SBATCH --account=m0000"]),
    ("derecho", "A=P00000000", ["#PBS -q main", "#PBS -A P00000000"]),
])
def test_real_reframe_job_scripts_carry_access_and_the_admins_account(
        site: str, option: str, lines: list[str], tmp_path) -> None:
    """docs/admins.md: the site's access in every job, the account given as `-J`."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from support.mpi_launch import job_env
    from torchmpi import reframe as rfmconf
    from torchmpi.cli import main

    assert main(["reframe", site, "-o", str(tmp_path / "cfg")]) == 0
    env = job_env(TMPDIR=str(tmp_path), HOME=str(tmp_path))
    env.pop("RFM_CONFIG_FILES", None)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    proc = subprocess.run([str(tmp_path / "cfg" / rfmconf.SCRIPT), "--dry-run", "-J", option,
                           "-n", "torchmpi_allreduce%variant=gloo_cpu",
                           "--prefix", str(tmp_path / "rfm")], env=env, capture_output=True,
                          text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    scripts = sorted((tmp_path / "rfm" / "stage").glob("*/*/*/*/rfm_job.sh"))
    assert scripts, proc.stdout
    text = scripts[0].read_text()
    for line in lines:
        assert line in text.splitlines(), (line, text)


def _prose(path) -> str:
    """A file's text with comment markers and line breaks folded, to read its sentences."""
    return " ".join(re.sub(r"^\s*#", " ", line) for line in path.read_text().splitlines()).join(
        ["", ""]).replace("  ", " ")


def test_plugin_name_claims_are_the_plugins_source() -> None:
    """From v1.13.0 aws-ofi-nccl registers as "Libfabric" and renames itself to "AWS
    Libfabric" or "OFI" only when NCCL_NET asks (the fixture, read at the tags); it never
    registers as "OFI". HPE's ccl_env.sh and the Slingshot defaults use "AWS Libfabric",
    the one name every release answers to."""
    import json

    root = paths.root()
    ranges = json.loads((root / "tests/fixtures/aws_ofi_nccl_net_names.json").read_text())
    accepted = [set(r["accepted"]) for r in ranges["ranges"]]
    newest = max(ranges["ranges"], key=lambda r: [int(n) for n in r["from"].split(".")])
    assert newest["accepted"][0] == "Libfabric"  # the name in the ncclNet struct
    fabric = root / "wrapper" / "torchmpi" / "data" / "fabrics" / "slingshot.yaml"
    for path in (fabric,
                 paths.torchmpi_repo() / "packages" / "aws_ofi_nccl" / "package.py"):
        text = " ".join(_prose(path).split())
        assert 'registers as "OFI"' not in text, path
        assert 'uses "OFI"' not in text, path  # HPE's ccl_env.sh: NCCL_NET="AWS Libfabric"
        assert 'registers as "Libfabric"' in text, path
    value = yaml.safe_load(fabric.read_text())
    assert all(value["env"]["NCCL_NET"] in names for names in accepted)


def test_gpu_support_beside_nccl_is_decided_per_site_in_design_doc() -> None:
    """CSCS warns MPICH_GPU_SUPPORT_ENABLED=1 "can lead to deadlocks"
    beside NCCL; docs/design.md decides it per Cray site from that centre's sources. Its
    table must be the site files' values, and each value must agree with mpi.cuda_aware
    (GPU support on is what a CUDA-aware MPI backend needs; off is CSCS's design)."""
    from torchmpi import site as sitemod

    text = (paths.root() / "docs" / "design.md").read_text()
    section = text.split("### `MPICH_GPU_SUPPORT_ENABLED` beside NCCL", 1)[1].split("\n## ")[0]
    rows = {cells[0].strip("` "): cells[1].strip("` ")
            for line in section.splitlines() if line.startswith("| `")
            for cells in [[c.strip() for c in line.strip().strip("|").split("|")]]}
    cray = [n for n in sitemod.available()
            if (sitemod.load(n).data.get("mpi") or {}).get("kind") == "cray-mpich"]
    assert sorted(rows) == sorted(cray), rows
    for name in cray:
        data = sitemod.load(name).data
        value = str(runtime.environment(data).get("MPICH_GPU_SUPPORT_ENABLED"))
        assert rows[name] == value, (name, rows[name], value)
        assert data["mpi"].get("cuda_aware", True) == (value == "1"), name


def test_an_unknown_site_is_offered_only_names_close_to_it() -> None:
    from torchmpi.errors import UserError

    with pytest.raises(UserError) as typo:
        sitemod.load("derehco")
    assert "did you mean derecho?" in str(typo.value)
    with pytest.raises(UserError) as far:
        sitemod.load("qqqqqqqq")
    assert "did you mean" not in str(far.value) and "known sites: " in str(far.value)
