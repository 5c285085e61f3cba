"""Rendering as data: free text stays in its comment, files parse back, output provenance.

The rendered files are read back the way their consumers read them: YAML
with a YAML loader, runtime.sh by bash.  No Spack needed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from support.disk import limit_file_size
from support.shell import sourced
from support.sites import edited_site, write_site
from torchmpi import output, paths, runtime, spackenv, yamltext
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.cli import main
from torchmpi.errors import InternalError

#: Characters a YAML parser or a shell could take as the end of a line.
LINE_ENDS = ["\n", "\r", "\r\n", "\x85", "\u2028", "\u2029", "\x0b", "\x0c"]


def committed() -> list[str]:
    """Every site file under sites/ except the host-detected ones: their environment is in git."""
    return [n for n in sitemod.available() if not sitemod.load(n).is_local]


def _tree_hash(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


# --- every committed site ---------------------------------------------------


@pytest.mark.parametrize("name", committed())
def test_committed_environment_matches_a_fresh_render(name: str, capsys) -> None:
    """`torchmpi render --check` for every site file that is not host-detected."""
    assert main(["render", "--check", name]) == 0, capsys.readouterr()


@pytest.mark.parametrize("name", committed())
def test_committed_files_parse(name: str, tmp_path: Path) -> None:
    env = paths.environments_dir() / name
    for fname in ("spack.yaml", "packages.yaml", "modules.yaml"):
        assert isinstance(yaml.safe_load((env / fname).read_text()), dict)
    subprocess.run(["bash", "-n", str(env / "runtime.sh")], check=True)
    site = sitemod.load(name)
    assert sourced((env / "runtime.sh").read_text(), tmp_path) == runtime.environment(site.data)


@pytest.mark.parametrize("name", committed())
def test_each_package_has_one_key(name: str) -> None:
    """Spack reads `'pkg:'` as `pkg` (with `::`), so a package keyed both ways
    (a requirement and a site external) is a duplicate key: Spack refuses the
    file ("found duplicate key") before it solves."""
    packages = yaml.safe_load((paths.environments_dir() / name / "packages.yaml").read_text())
    keys = [k.rstrip(":") for k in packages["packages"]]
    assert len(keys) == len(set(keys)), sorted(k for k in keys if keys.count(k) > 1)


def test_external_with_a_requirement_keeps_both(tmp_path: Path) -> None:
    """A site external for a package torchmpi also requires something of
    (py-networkx ~default) renders as one entry carrying both."""
    path = write_site(tmp_path, "perlmutter", lambda d: d.setdefault("externals", []).append(
        {"spec": "py-networkx@3.5 ~default", "prefix": "/usr"}))
    _, data = spackenv.packages_yaml(sitemod.load(str(path)))
    entries = {k: v for k, v in data["packages"].items() if k.rstrip(":") == "py-networkx"}
    assert list(entries.values()) == [{"buildable": True, "require": ["~default"], "externals": [
        {"spec": "py-networkx@3.5 ~default", "prefix": "/usr"}]}]


def test_an_external_stated_unbuildable_stays_unbuildable(tmp_path: Path) -> None:
    """`buildable` under `externals:` (docs/sites.md: default true) reaches
    packages.yaml: a site that must use its own cmake says `buildable: false`,
    and Spack may then not build another; an entry without it stays buildable."""
    def edit(d):
        d.setdefault("externals", []).extend([
            {"spec": "cmake@3.26.3", "prefix": "/usr", "buildable": False},
            {"spec": "ninja@1.11.1", "prefix": "/usr"}])

    _, data = spackenv.packages_yaml(sitemod.load(str(write_site(tmp_path, "perlmutter", edit))))
    assert data["packages"]["cmake:"]["buildable"] is False
    assert data["packages"]["ninja:"]["buildable"] is True


def test_sites_is_the_only_list_of_sites() -> None:
    """A committed environment exists exactly for the non-detected site files
    (environments/local, rendered per host by `make demo`, is git-ignored)."""
    detected = {n for n in sitemod.available() if sitemod.load(n).is_local}
    on_disk = sorted(p.name for p in paths.environments_dir().iterdir()
                     if p.is_dir() and p.name not in detected)
    assert on_disk == committed()


# --- free text cannot leave its comment line ---------------------------------


@pytest.mark.parametrize("end", LINE_ENDS)
def test_newline_in_runtime_source_is_not_a_command(end: str, tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    path = write_site(tmp_path, "derecho",
                 lambda d: d["runtime"].update(source=f"HPE guide{end}touch {marker}"))
    site = sitemod.load(str(path))
    text = renderer.render(site, tmp_path / "env")["runtime.sh"]
    env = sourced(text, tmp_path)
    assert not marker.exists()
    assert env == runtime.environment(site.data)
    source_lines = [line for line in text.splitlines() if "HPE guide" in line]
    assert len(source_lines) == 1 and source_lines[0].startswith("# ")
    assert f"touch {marker}" in source_lines[0]  # kept, visibly escaped, in the comment


@pytest.mark.parametrize("end", LINE_ENDS)
def test_newline_in_description_adds_no_key(end: str, tmp_path: Path) -> None:
    """Before data-built rendering, "\\ninjected: key" became a top-level key of spack.yaml.

    The loader refuses such a description (tests/test_bad_input.py); here the
    renderer is given one anyway, as defence in depth."""
    clean = renderer.bodies(sitemod.load("derecho"), tmp_path / "env")
    site = sitemod.load("derecho")
    site.data = dict(site.data, description=f"Derecho{end}injected: key")
    files = renderer.bodies(site, tmp_path / "env")
    for name in ("spack.yaml", "packages.yaml", "modules.yaml"):
        assert yaml.safe_load(files[name]) == yaml.safe_load(clean[name]), name


def test_comment_escapes_every_line_end() -> None:
    for end in LINE_ENDS:
        text = yamltext.comment(f"a{end}b")
        assert text.count("\n") == 1 and text.startswith("# a\\")
        assert yaml.safe_load(text + "k: 1\n") == {"k": 1}
    assert yamltext.comment("Zürich\tok") == "# Zürich\tok\n"


def test_values_with_yaml_syntax_stay_values(tmp_path: Path) -> None:
    """A spec or path with YAML/shell metacharacters reaches Spack as the same string."""
    odd = "/opt/my site/#1: {x}, [y] & 'q' \"dq\""
    path = write_site(tmp_path, "derecho", lambda d: d["libfabric"].update(prefix=odd))
    site = sitemod.load(str(path))
    pkgs = yaml.safe_load(renderer.bodies(site, tmp_path / "env")["packages.yaml"])
    assert pkgs["packages"]["libfabric:"]["externals"][0]["prefix"] == odd


# --- every file is parsed back before it is written ---------------------------


def test_yaml_that_does_not_load_back_is_never_written(tmp_path: Path, monkeypatch,
                                                         capsys) -> None:
    out = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(out)]) == 0
    before = _tree_hash(out)

    def broken(site, outdir):
        parts, expected = spackenv.roots(site), {"spack": {}}
        return ["spack:\n  specs: [\n", *(f"  - {p}\n" for p in parts)], expected

    monkeypatch.setattr(spackenv, "spack_yaml", broken)
    capsys.readouterr()
    # A torchmpi bug, not the user's input: its own exit status (EX_SOFTWARE) and a
    # request for a report, still without a traceback.
    assert main(["render", "derecho", "-o", str(out)]) == 70
    err = capsys.readouterr().err
    assert "spack.yaml: the rendered text is not valid YAML" in err and "Traceback" not in err
    assert "torchmpi render: internal error (a torchmpi bug" in err
    assert _tree_hash(out) == before


def test_yaml_that_loads_to_other_data_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InternalError, match="does not load back"):
        yamltext.document(["a: 1\n"], {"a": "1"}, "x.yaml")


def test_runtime_sh_that_does_not_parse_is_never_written(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(runtime, "shell_lines", lambda rt: ["export X='unterminated"])
    with pytest.raises(InternalError, match="runtime.sh: the rendered text does not parse"):
        renderer.render(sitemod.load("derecho"), tmp_path / "env")


# --- provenance --------------------------------------------------------------


def test_header_names_the_site_file_relative_to_the_checkout() -> None:
    text = renderer.render(sitemod.load("perlmutter"),
                           paths.environments_dir() / "perlmutter")["spack.yaml"]
    assert text.startswith("# Rendered by torchmpi ")
    assert output.rendered_from(text) == "sites/perlmutter.yaml"
    assert str(paths.root()) not in text  # no path of the rendering machine


@pytest.fixture
def checkout(tmp_path: Path, monkeypatch) -> Path:
    """A throwaway checkout (sites/, environments/, pins) that paths.root() resolves to."""
    root = tmp_path / "checkout"
    (root / "sites").mkdir(parents=True)
    (root / "environments").mkdir()
    (root / "scripts").mkdir()
    shutil.copy(paths.root() / "scripts" / "pins.sh", root / "scripts" / "pins.sh")
    (root / "spack_repo").symlink_to(paths.root() / "spack_repo")
    for name in ("derecho", "perlmutter"):
        shutil.copy(paths.sites_dir() / f"{name}.yaml", root / "sites")
    monkeypatch.setenv("TORCHMPI_ROOT", str(root))
    return root


def test_site_file_outside_sites_needs_an_output_directory(checkout: Path, tmp_path: Path,
                                                           capsys) -> None:
    outside = tmp_path / "elsewhere" / "derecho.yaml"
    outside.parent.mkdir()
    shutil.copy(checkout / "sites" / "derecho.yaml", outside)
    before = _tree_hash(checkout / "environments")
    assert main(["render", str(outside)]) == 2
    err = capsys.readouterr().err
    assert str(outside) in err and "-o DIR" in err and "Traceback" not in err
    assert _tree_hash(checkout / "environments") == before
    out = tmp_path / "out"
    assert main(["render", str(outside), "-o", str(out)]) == 0
    assert output.rendered_from((out / "spack.yaml").read_text()) == "derecho.yaml"


def test_symlink_in_sites_pointing_outside_is_refused(checkout: Path, tmp_path: Path,
                                                      capsys) -> None:
    target = tmp_path / "outside.yaml"
    target.write_text((checkout / "sites" / "derecho.yaml").read_text()
                      .replace("name: derecho", "name: linked"))
    (checkout / "sites" / "linked.yaml").symlink_to(target)
    assert main(["render", "linked"]) == 2
    err = capsys.readouterr().err
    assert "not a file under" in err and f"a link to {target}" in err
    assert not (checkout / "environments" / "linked").exists()


def test_environment_of_another_site_needs_force(checkout: Path, capsys) -> None:
    derecho = checkout / "environments" / "derecho"
    assert main(["render", "derecho"]) == 0
    before = _tree_hash(derecho)
    capsys.readouterr()
    assert main(["render", "perlmutter", "-o", str(derecho)]) == 2
    err = capsys.readouterr().err
    assert "rendered from sites/derecho.yaml, not from sites/perlmutter.yaml" in err
    assert "--force" in err
    assert _tree_hash(derecho) == before
    assert main(["render", "perlmutter", "-o", str(derecho), "--force"]) == 0
    assert output.rendered_from((derecho / "spack.yaml").read_text()) == "sites/perlmutter.yaml"


# --- the installed tool works outside the checkout ---------------------------


def test_wheel_ships_schema_and_fabric_data(tmp_path: Path) -> None:
    """Build the wheel from a copy of the sources and use it with no checkout around.
    Its metadata names the licence as an SPDX expression (``License-Expression``, core
    metadata 2.4, PEP 639) and the wheel carries the licence files, not the ``License``
    text field setuptools 77 deprecates (a warning on every ``pip install .``)."""
    import zipfile

    src = tmp_path / "src"
    shutil.copytree(paths.root() / "wrapper", src / "wrapper",
                    ignore=shutil.ignore_patterns("*.egg-info", "__pycache__"))
    shutil.copy(paths.root() / "pyproject.toml", src)
    for name in ("LICENSE", "LICENSE-APACHE", "LICENSE-MIT"):
        shutil.copy(paths.root() / name, src)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-build-isolation",
                    "--no-deps", "-w", str(wheels), str(src)], check=True,
                   capture_output=True)
    (wheel,) = wheels.glob("*.whl")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(f"{info}/METADATA").decode().split("\n\n")[0].splitlines()
    assert "License-Expression: Apache-2.0 OR MIT" in metadata, metadata
    assert not any(line.startswith("License:") for line in metadata), metadata
    assert {f"{info}/licenses/{n}" for n in ("LICENSE", "LICENSE-APACHE", "LICENSE-MIT")
            } <= set(names), names
    target = tmp_path / "site-packages"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(target), *map(str, wheels.glob("*.whl"))], check=True,
                   capture_output=True)
    code = ("import sys, torchmpi, torchmpi.runtime as r, torchmpi.checks.schema as s\n"
            "assert torchmpi.__file__.startswith(sys.argv[1]), torchmpi.__file__\n"
            "print(dict(r.fabric_defaults('slingshot')[1])['NCCL_NET'])\n"
            "print('compilers' in s.site_schema()['properties'])\n"
            "import torchmpi.reframe as f\n"
            "print((f.library_dir() / 'torchmpi_checks.py').is_file())\n"
            "import torchmpi.gpuvendor as g\n"
            "print(g.gtl('amd'))\n")
    env = {k: v for k, v in os.environ.items() if k not in ("TORCHMPI_ROOT", "PYTHONPATH")}
    env["PYTHONPATH"] = str(target)
    proc = subprocess.run([sys.executable, "-c", code, str(target)], cwd=tmp_path, env=env,
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split("\n")[:4] == ["AWS Libfabric", "True", "True", "libmpi_gtl_hsa"]


def test_render_tells_the_notes_on_stderr(tmp_path: Path, capsys) -> None:
    """Perlmutter has both kinds: an unverified torch fixture and a libfabric major
    its NCCL pair was not run with; each is one line on stderr, the files still written."""
    from torchmpi import torches
    from torchmpi.checks import network

    data = sitemod.load("perlmutter").data
    notes = [*torches.notes(data), *network.notes(data)]
    assert len(notes) == 2
    assert main(["render", "perlmutter", "-o", str(tmp_path / "env")]) == 0
    err = capsys.readouterr().err
    assert err.splitlines() == [f"torchmpi render: note: {n}" for n in notes]
    assert (tmp_path / "env" / "spack.yaml").is_file()


def test_check_on_a_drifted_environment_exits_1(tmp_path: Path, capsys) -> None:
    """Exit 1 means "differs" (2 is bad input): a CI job tells them apart."""
    out = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(out)]) == 0
    with (out / "runtime.sh").open("a") as f:
        f.write("# edited\n")
    capsys.readouterr()
    assert main(["render", "--check", "derecho", "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert "+# edited" in captured.out or "-# edited" in captured.out
    assert f"{out} differs from a fresh render of derecho" in captured.err


def test_check_on_a_drifted_environment_with_json_prints_the_diff_as_json(
        tmp_path: Path, capsys) -> None:
    import json

    out = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(out)]) == 0
    with (out / "runtime.sh").open("a") as f:
        f.write("# edited\n")
    capsys.readouterr()
    assert main(["render", "--check", "derecho", "-o", str(out), "--json"]) == 1
    record = json.loads(capsys.readouterr().out)
    assert (record["status"], record["site"], record["output"]) == ("differs", "derecho", str(out))
    assert "# edited" in record["diff"]


def test_check_on_a_never_rendered_environment_says_so(tmp_path: Path, capsys) -> None:
    assert main(["render", "--check", "derecho", "-o", str(tmp_path / "nope")]) == 1
    captured = capsys.readouterr()
    assert "was never rendered" in captured.err and captured.out == ""
    assert not (tmp_path / "nope").exists()


def test_environment_develops_the_tool_from_this_checkout(tmp_path: Path) -> None:
    """py-torchmpi is built from the checkout (``spack develop``), named by a
    path relative to the environment, so no path of the rendering machine."""
    from torchmpi import __version__

    outdir = paths.environments_dir() / "derecho"
    spack = yaml.safe_load(renderer.bodies(sitemod.load("derecho"), outdir)["spack.yaml"])
    entry = spack["spack"]["develop"]["py-torchmpi"]
    assert entry["spec"] == f"py-torchmpi@={__version__}"
    assert not Path(entry["path"]).is_absolute()
    assert (outdir / entry["path"]).resolve() == paths.root().resolve()


def test_site_mirrors_are_rendered(tmp_path: Path) -> None:
    site = sitemod.load("derecho")
    assert "mirrors" not in yaml.safe_load(
        renderer.bodies(site, tmp_path / "env")["spack.yaml"])["spack"]
    path = write_site(tmp_path, "derecho", lambda d: d["install"].update(
        mirrors={"ncar-cache": "file:///glade/campaign/torchmpi/cache"}))
    spack = yaml.safe_load(renderer.bodies(sitemod.load(str(path)), tmp_path / "env")
                           ["spack.yaml"])["spack"]
    assert spack["mirrors"] == {"ncar-cache": "file:///glade/campaign/torchmpi/cache"}


# --- an interrupted render leaves the old files whole -----------------------------


def test_render_interrupted_by_a_full_disk_leaves_old_files_whole(tmp_path: Path) -> None:
    """The render verb in a process whose writes fail past a size (RLIMIT_FSIZE):
    the largest file cannot be written; every file keeps its old bytes, no
    temporary file is left, and the error is a one-line refusal."""
    out = tmp_path / "env"
    old_site = edited_site(tmp_path, "derecho")
    output.write(out, renderer.render(old_site, out))
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new_site = edited_site(new_dir, "derecho",
                           lambda d: d.update(description=d["description"] + " (changed)"))
    new = renderer.render(new_site, out)
    assert all(new[name].encode() != old[name] for name in new), "every file must change"
    sizes = sorted(len(text.encode()) for text in new.values())
    limit = sizes[-2] + 1  # every file but the largest fits
    proc = subprocess.run(
        [sys.executable, "-m", "torchmpi", "render", str(new_site.path), "-o", str(out)],
        preexec_fn=limit_file_size(limit), capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "cannot write" in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
