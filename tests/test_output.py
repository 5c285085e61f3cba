"""The one writer (torchmpi.output, torchmpi.parseback): header, parse-back, policy, folders.

Every verb that writes files -- render, container, reframe -- goes through it, so
each rule is shown once here on the writer and once through a verb that used to
have its own copy of it.  The interrupted write is a real one: the kernel's
file-size limit (``RLIMIT_FSIZE``, ``EFBIG`` once ``SIGXFSZ`` is ignored) makes
the Nth file fail midway, as a full disk would.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from torchmpi import output, paths
from torchmpi import site as sitemod
from torchmpi.cli import main
from torchmpi.errors import InternalError, UserError


def _copy_site(tmp_path: Path, name: str = "derecho") -> Path:
    """A shipped site file copied outside the checkout's sites/ (unchanged)."""
    dest = tmp_path / "elsewhere" / f"{name}.yaml"
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(paths.sites_dir() / f"{name}.yaml", dest)
    return dest


def _files(name: str = "derecho", **bodies: str) -> dict[str, str]:
    site = sitemod.load(name)
    return output.assemble("render", site, bodies or {"a.yaml": "a: 1\n", "b.sh": "true\n"})


# --- the header --------------------------------------------------------------------


def test_the_header_records_verb_site_and_body_and_a_shebang_stays_first() -> None:
    files = _files(**{"x.sh": "#!/bin/sh\necho hi\n", "y.yaml": "y: 2\n"})
    script = files["x.sh"]
    assert script.startswith("#!/bin/sh\n# Rendered by torchmpi ")
    assert output.written_by(script) == "render"
    assert output.rendered_from(script) == "sites/derecho.yaml"
    assert not output.hand_edited(script) and not output.hand_edited(files["y.yaml"])
    assert output.hand_edited(script.replace("echo hi", "echo ho"))
    assert output.hand_edited("y: 2\n")  # no header: not ours


def test_each_verb_keeps_its_wording() -> None:
    site = sitemod.load("derecho")
    for verb in output.WORDING:
        text = output.assemble(verb, site, {"f.yaml": "f: 1\n"})["f.yaml"]
        assert output.written_by(text) == verb, text
        assert output.rendered_from(text) in ("sites/derecho.yaml", "derecho.yaml"), text


# --- parse-back before the header (the checks themselves: tests/test_parseback.py) -------


def test_the_nth_body_failing_its_parse_back_writes_nothing(tmp_path: Path) -> None:
    out = tmp_path / "out"
    with pytest.raises(InternalError, match="c.sh"):
        output.write(out, _files(**{"a.yaml": "a: 1\n", "b.yaml": "b: 2\n",
                                    "c.sh": "if then\n"}))
    assert not out.exists()


# --- the write policy -------------------------------------------------------------------


def test_unchanged_files_are_left_alone_and_changed_ones_replaced(tmp_path: Path) -> None:
    assert output.write(tmp_path, _files()).written == ["a.yaml", "b.sh"]
    assert output.write(tmp_path, _files()).written == []
    new = _files(**{"a.yaml": "a: 2\n", "b.sh": "true\n"})
    assert output.write(tmp_path, new).written == ["a.yaml"]
    assert (tmp_path / "a.yaml").read_text() == new["a.yaml"]


@pytest.mark.parametrize(("old", "message"), [
    ("a: 1\n", "a.yaml edited by hand, or not written by torchmpi render"),
    (None, "a.yaml edited by hand since it was written"),
])
def test_a_file_not_ours_or_edited_is_kept_without_force(tmp_path: Path, old, message) -> None:
    first = _files()
    output.write(tmp_path, first)
    text = old if old is not None else first["a.yaml"] + "b: 2\n"
    (tmp_path / "a.yaml").write_text(text)
    with pytest.raises(UserError, match=message):
        output.write(tmp_path, _files(**{"a.yaml": "a: 3\n", "b.sh": "false\n"}))
    assert (tmp_path / "a.yaml").read_text() == text
    assert (tmp_path / "b.sh").read_text() == first["b.sh"]  # all or none
    output.write(tmp_path, _files(**{"a.yaml": "a: 3\n", "b.sh": "false\n"}), force=True)
    assert yaml.safe_load((tmp_path / "a.yaml").read_text()) == {"a": 3}


def test_a_file_of_another_verb_is_kept_without_force(tmp_path: Path, capsys) -> None:
    """`torchmpi container SITE -o environments/SITE` used to replace the native
    spack.yaml silently: same site file, same header shape, another verb."""
    env = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(env)]) == 0
    native = (env / "spack.yaml").read_text()
    assert main(["container", "derecho", "-o", str(env)]) == 2
    err = capsys.readouterr().err
    assert "written by `torchmpi render`, not `torchmpi container`" in err and "--force" in err
    assert (env / "spack.yaml").read_text() == native
    assert sorted(p.name for p in env.iterdir()) == sorted(
        ["spack.yaml", "packages.yaml", "modules.yaml", "runtime.sh"])


def test_a_file_from_another_site_file_is_kept_without_force(tmp_path: Path) -> None:
    output.write(tmp_path, _files("derecho"))
    with pytest.raises(UserError, match="rendered from sites/derecho.yaml, not from"
                                        " sites/perlmutter.yaml"):
        output.write(tmp_path, _files("perlmutter", **{"a.yaml": "a: 9\n", "b.sh": "true\n"}))


_INTERRUPTED = """
import resource, signal, sys
from pathlib import Path
from torchmpi import output
from torchmpi.errors import UserError
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of a kill
resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
files = {name: "# body-sha256: x\\n" + text for name, text in
         (("a.yaml", "a: 2\\n"), ("b.yaml", "b: " + "x" * 10000 + "\\n"), ("c.yaml", "c: 2\\n"))}
try:
    output.replace_files(Path(sys.argv[1]), files)
except UserError as err:
    print(err)
    sys.exit(3)
"""


def test_an_interrupted_write_leaves_every_old_file_whole(tmp_path: Path) -> None:
    """The second of three files hits the file-size limit midway (as a full disk):
    none is replaced, the first one already written included, and no temp file stays."""
    old = {name: f"{name[0]}: 1\n" for name in ("a.yaml", "b.yaml", "c.yaml")}
    for name, text in old.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run([sys.executable, "-c", _INTERRUPTED, str(tmp_path)],
                          capture_output=True, text=True, check=False)
    assert proc.returncode == 3, proc.stderr
    assert "cannot write: File too large" in proc.stdout
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == old


def test_scripts_are_executable_and_data_is_not(tmp_path: Path) -> None:
    output.write(tmp_path, _files(**{"run.sh": "#!/bin/sh\ntrue\n", "env.sh": "X=1\n",
                                     "a.yaml": "a: 1\n"}))
    modes = {p.name: stat.S_IMODE(p.stat().st_mode) for p in tmp_path.iterdir()}
    assert modes == {"run.sh": 0o755, "env.sh": 0o644, "a.yaml": 0o644}


def test_the_container_wrapper_runs_by_name(tmp_path: Path) -> None:
    """docs/containers.md launches `./containers/perlmutter/run.sh python ...`: the
    wrapper must be executable (it was written 0644)."""
    assert main(["container", "perlmutter", "-o", str(tmp_path)]) == 0
    assert os.access(tmp_path / "run.sh", os.X_OK)
    assert not os.access(tmp_path / "spack.yaml", os.X_OK)


# --- default output folders -------------------------------------------------------------


def test_every_verb_has_its_folder_in_the_checkout() -> None:
    site = sitemod.load("derecho")
    assert {verb: output.outdir(verb, site, None) for verb in output.FOLDERS} == {
        "render": paths.root() / "environments" / "derecho",
        "container": paths.root() / "containers" / "derecho",
        "reframe": paths.root() / "reframe" / "derecho",
    }
    assert output.outdir("reframe", site, Path("x")) == Path("x")


@pytest.mark.parametrize("verb", ["render", "container", "reframe"])
def test_a_site_file_outside_sites_needs_o(tmp_path: Path, capsys, verb: str) -> None:
    """Without -o a copy of derecho.yaml elsewhere would write the shipped derecho's
    folder; render refused it, container and reframe wrote there."""
    before = sorted(p.name for p in paths.root().iterdir())
    assert main([verb, str(_copy_site(tmp_path)), "--force"]) == 2
    err = capsys.readouterr().err
    assert "not a file under" in err and f"{output.FOLDERS[verb]}/ holds only" in err
    assert "-o DIR" in err and "Traceback" not in err
    assert sorted(p.name for p in paths.root().iterdir()) == before


@pytest.mark.parametrize("verb", ["render", "container", "reframe", "concretize"])
def test_an_unwritable_output_folder_is_named_before_any_work(
        tmp_path: Path, monkeypatch, capsys, verb: str) -> None:
    """Each verb checks its directory before it renders (output.writable_outdir;
    concretize before it renders and solves, into render's folder): the error calls a
    directory given with -o by the flag, else by the verb's folder name.  The checkout is
    a copy whose folder for the verb is a plain file."""
    kind = "render" if verb == "concretize" else verb
    root = tmp_path / "root"
    root.mkdir()
    for item in paths.root().iterdir():
        if item.name not in (".git", ".venv", "sites", *output.FOLDERS.values()):
            (root / item.name).symlink_to(item)
    (root / "sites").mkdir()
    shutil.copyfile(paths.sites_dir() / "derecho.yaml", root / "sites" / "derecho.yaml")
    blocker = root / output.FOLDERS[kind]
    blocker.write_text("not a directory\n")
    monkeypatch.setenv("TORCHMPI_ROOT", str(root))
    folder_name = {"render": "environment directory", "container": "container directory",
                   "reframe": "output directory"}[kind]
    for argv, named in (([], f"{folder_name} {blocker / 'derecho'}"),
                        (["-o", str(blocker / "x")], f"-o/--output {blocker / 'x'}")):
        assert main([verb, "derecho", *argv]) == 2
        err = capsys.readouterr().err
        assert f"{named}: cannot create it: {blocker} is not a directory" in err, err
    assert blocker.read_text() == "not a directory\n"
    assert sorted(p.name for p in root.iterdir() if not p.is_symlink()) == sorted(
        ["sites", output.FOLDERS[kind]])


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs procfs at /proc")
def test_an_output_folder_the_kernel_will_not_create_is_named_before_any_work(
        monkeypatch, capsys) -> None:
    """procfs creates no directory, not even for root, whom access(2) lets write there:
    the check asks the kernel (a directory made and removed again) and names the flag
    and the path before anything renders, not a bare path at write time."""
    from torchmpi import container as containermod

    def no_render(site):
        raise AssertionError("rendered before the output folder was checked")

    monkeypatch.setattr(containermod, "render", no_render)
    assert main(["container", "derecho", "-o", "/proc/nonexistent/x"]) == 2
    err = capsys.readouterr().err
    assert ("-o/--output /proc/nonexistent/x: cannot create it: /proc refuses a new"
            " directory") in err, err
    assert "Traceback" not in err and not Path("/proc/nonexistent").exists()


# --- through the verbs that had their own copies -------------------------------------------


def test_reframe_refuses_a_hand_edited_runtime_sh(tmp_path: Path, capsys) -> None:
    """reframe's runtime.sh carried only a first line, no body hash, so an edit to it
    was overwritten without --force; now it has the header every written file has."""
    argv = ["reframe", "derecho", "--env", "runtime-sh", "--prepare", "true",
            "-o", str(tmp_path)]
    assert main(argv) == 0
    script = tmp_path / "runtime.sh"
    assert output.written_by(script.read_text()) == "reframe"
    edited = script.read_text() + "export NCCL_DEBUG=INFO\n"
    script.write_text(edited)
    capsys.readouterr()
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "runtime.sh edited by hand" in err and "--force" in err
    assert script.read_text() == edited
    assert main([*argv, "--force"]) == 0
    assert script.read_text() != edited


def test_reframe_refuses_another_sites_files(tmp_path: Path, capsys) -> None:
    """reframe checked only that a file was its own, not from which site file."""
    assert main(["reframe", "derecho", "-o", str(tmp_path)]) == 0
    before = (tmp_path / "settings.py").read_text()
    assert main(["reframe", "perlmutter", "-o", str(tmp_path)]) == 2
    assert "rendered from derecho.yaml, not from perlmutter.yaml" in capsys.readouterr().err
    assert (tmp_path / "settings.py").read_text() == before


@pytest.mark.skipif(os.geteuid() != 0, reason="as another user the permission tests of "
                    "tests/test_sites.py run; here root's real id is swapped")
def test_a_folder_the_real_user_may_not_write_is_refused_by_its_write_bit() -> None:
    """access(2) answers for the real user: with the real uid set to nobody, a folder it
    may read and search but not write is refused for -o, by W_OK and X_OK together
    (root passes every mask, so the suite's root runs could not tell the mask apart).

    The swap happens in a child Python, so the test worker's own ids never change."""
    top = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's own tmp is root's alone (0700)
    try:
        top.chmod(0o755)
        ro = top / "ro"
        ro.mkdir(mode=0o555)
        child = (
            "import os, sys\n"
            "from torchmpi import writable\n"
            "from torchmpi.errors import UserError\n"
            "os.setreuid(65534, -1)\n"
            "try:\n"
            "    writable.check_dir(__import__('pathlib').Path(sys.argv[1]), '-o')\n"
            "except UserError as err:\n"
            "    print(err)\n"
            "    sys.exit(3)\n"
        )
        done = subprocess.run([sys.executable, "-c", child, str(ro / "out")],
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 3, (done.returncode, done.stdout, done.stderr)
        assert "-o " in done.stdout and "/ro/out: cannot create it: " in done.stdout, done.stdout
        assert "is not writable" in done.stdout, done.stdout
    finally:
        shutil.rmtree(top)
