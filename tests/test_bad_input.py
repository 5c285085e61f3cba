"""Bad input never reaches a rendered file, and never prints a traceback.

A corpus of broken site files (``tests/bad_inputs/sites``, one file per case,
each saying in its first lines what it breaks and what the error must say),
bad command-line flags and unwritable output paths.  Every site file runs
through every verb that reads one -- ``sites``, ``render``, ``render
--check``, ``concretize`` -- in a scratch checkout (``TORCHMPI_ROOT``) whose
``sites/`` holds the bad file, so the verbs find it by name as an admin's
typo would reach them.  Each case asserts the exit status, a message naming
the file with line:column and the key path, and that no ``environments/``
tree changed (the scratch one and the repository's, hashed before and after).

``concretize`` runs with a stand-in Spack that records being started: a bad
site must be refused before any solve (a real one takes minutes).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.privileges import without_root_capabilities
from torchmpi import site as sitemod
from torchmpi.cli import main

ROOT = Path(__file__).resolve().parents[1]
CORPUS = Path(__file__).parent / "bad_inputs" / "sites"


@dataclass(frozen=True)
class Case:
    """One bad site file and what its error must say."""

    path: Path
    what: str
    key: str | None  # the key path the message names; None for file-level errors
    expect: str

    @property
    def name(self) -> str:
        return self.path.stem


def _case(path: Path) -> Case:
    head = dict(
        line[2:].split(": ", 1)
        for line in path.read_bytes().decode("ascii", "replace").splitlines()[:3]
    )
    key = head["expect-key"]
    return Case(path, head["bad input"], None if key == "-" else key, head["expect"])


CASES = [_case(p) for p in sorted(CORPUS.glob("*.yaml"))]


def tree_hash(path: Path) -> str:
    """One hash over every file name and content under ``path``."""
    digest = hashlib.sha256()
    for item in sorted(path.rglob("*")):
        digest.update(str(item.relative_to(path)).encode())
        if item.is_file():
            digest.update(item.read_bytes())
    return digest.hexdigest()


@pytest.fixture
def scratch(tmp_path: Path, monkeypatch) -> Path:
    """A checkout to break: the repository's files, its own sites/ and environments/.

    The Spack on TORCHMPI_SPACK_ROOT only records that it was started.
    """
    root = tmp_path / "root"
    root.mkdir()
    for item in ROOT.iterdir():
        if item.name not in ("sites", "environments", ".git", ".venv"):
            (root / item.name).symlink_to(item)
    (root / "sites").mkdir()
    envs = root / "environments"
    for env in (ROOT / "environments").iterdir():
        (envs / env.name).mkdir(parents=True)
        for f in env.iterdir():
            if f.is_file():  # not .spack-env/, which a concretized environment has
                (envs / env.name / f.name).write_bytes(f.read_bytes())
    spack = tmp_path / "spack" / "bin" / "spack"
    spack.parent.mkdir(parents=True)
    spack.write_text(f"#!/bin/sh\ntouch {tmp_path}/SPACK-STARTED\nexit 1\n")
    spack.chmod(0o755)
    monkeypatch.setenv("TORCHMPI_ROOT", str(root))
    monkeypatch.setenv("TORCHMPI_SPACK_ROOT", str(tmp_path / "spack"))
    return root


class Unchanged:
    """Hashes of the scratch and the repository's environments/ trees."""

    def __init__(self, scratch: Path) -> None:
        self.trees = [scratch / "environments", ROOT / "environments"]
        self.before = [tree_hash(t) for t in self.trees]
        self.scratch = scratch

    def check(self) -> None:
        assert [tree_hash(t) for t in self.trees] == self.before, "environments/ changed"
        assert not (self.scratch.parent / "SPACK-STARTED").exists(), "Spack was started"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    """``torchmpi ARGV`` in this process; an uncaught exception fails the test."""
    rc = main(list(argv))
    out, err = capsys.readouterr()
    assert "Traceback" not in out + err
    return rc, out, err


def _assert_names_file_and_key(case: Case, path: Path, err: str) -> None:
    """The message names the file (with line:column) and key path, and says what is allowed.

    The line:column is checked against the file itself: for a key error the
    named key (or list item) is really there.
    """
    assert case.expect in err, err
    assert str(path) in err, err
    if case.key is None:
        assert re.search(rf"{re.escape(str(path))}(:\d+:\d+)?: ", err), err
        return
    line_of_err = next((s for s in err.splitlines() if f": {case.key}: " in s
                        and case.expect in s), None)
    assert line_of_err, f"no line naming {case.key} in\n{err}"
    found = re.search(rf"{re.escape(str(path))}:(\d+):(\d+): ", line_of_err)
    assert found, f"no {path}:LINE:COLUMN in\n{line_of_err}"
    line, column = int(found.group(1)), int(found.group(2))
    text = path.read_bytes().decode().splitlines()[line - 1]
    last = case.key.split(".")[-1]
    if "required when" in line_of_err:  # at the key that makes it required (fabric: slingshot)
        assert text[column - 1:].startswith("fabric:"), (line, column, text)
        return
    if "missing required key" in line_of_err:  # at the mapping that lacks it
        _assert_at_parent(case.key, line, column, text, line_of_err)
        return
    if not last.endswith("]"):  # a key: it starts at that column (a quoted one after its quote)
        assert text[column - 1:].lstrip("\"'").startswith(last), (line, column, text)


def _assert_at_parent(key: str, line: int, column: int, text: str, message: str) -> None:
    """A missing key is reported where it belongs: a nested one at its parent
    key's line (``mpi:`` for ``mpi.version``), a list item's at the item, a
    top-level one at the file's start and said to be top level -- not at the
    first key (``name:``), which says nothing about what is missing."""
    parent = re.split(r"[.\[]", key)[:-1]
    if not parent:
        assert (line, column) == (1, 1), (line, column, message)
        assert "at the top level" in message, message
    elif key.rsplit(".", 1)[0].endswith("]"):  # a list item's key: at the item
        assert text.lstrip().startswith("- ") and column > text.index("-") + 1, (line, text)
    else:
        assert text[column - 1:].startswith(parent[-1] + ":"), (line, column, text)


def test_missing_top_level_key_in_a_shipped_site(scratch: Path, capsys) -> None:
    """Derecho's file without ``launcher:`` (a key no other key implies): the
    error is at the file's start, says the key is missing at the top level and
    lists the top-level keys every site file needs -- not at ``name:`` (after
    the header comments), where it read as a problem with the name."""
    text = (ROOT / "sites" / "derecho.yaml").read_text()
    assert "\nlauncher: pbs\n" in text and not text.startswith("name:")
    path = scratch / "sites" / "derecho.yaml"
    path.write_text(text.replace("\nlauncher: pbs\n", "\n"))
    unchanged = Unchanged(scratch)
    for argv in (["render", "derecho"], ["concretize", "derecho"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2, err
        assert (f"{path}:1:1: launcher: missing required key 'launcher' at the top level"
                " of the site file; the top level needs: name, description, target, compilers,"
                " mpi, fabric, launcher") in err, err
    unchanged.check()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_site_file_every_verb(case: Case, scratch: Path, capsys) -> None:
    path = scratch / "sites" / case.path.name
    path.write_bytes(case.path.read_bytes())
    unchanged = Unchanged(scratch)

    rc, out, _ = run(capsys, "sites")
    assert rc == 1
    line = next(s for s in out.splitlines() if s.startswith(case.name + " "))
    assert "INVALID:" in line and str(path) in line

    for argv in (["render", case.name], ["render", "--check", case.name],
                 ["concretize", case.name], ["render", str(path), "-o", str(scratch / "o")],
                 ["reframe", case.name, "-o", str(scratch / "o")]):
        rc, out, err = run(capsys, *argv)
        assert rc == 2, (argv, out, err)
        assert err.startswith(f"torchmpi {argv[0]}: error: "), err
        _assert_names_file_and_key(case, path, err)
    assert not (scratch / "o").exists()
    unchanged.check()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_bad_site_file_doctor(case: Case, scratch: Path, capsys) -> None:
    """doctor --site refuses the same files with the same messages, no traceback."""
    path = scratch / "sites" / case.path.name
    path.write_bytes(case.path.read_bytes())
    unchanged = Unchanged(scratch)
    rc, out, err = run(capsys, "doctor", "--site", case.name, "--no-probe")
    assert rc == 2, (out, err)
    _assert_names_file_and_key(case, path, err)
    unchanged.check()


def test_corpus_is_large_enough() -> None:
    assert len(CASES) >= 60


def test_oversized_site_file_is_refused_unparsed(scratch: Path, capsys) -> None:
    """50 MB of valid YAML: refused by size, so never parsed (the message is not a schema one)."""
    path = scratch / "sites" / "huge.yaml"
    with open(path, "w") as fh:
        fh.write("name: huge\n")
        fh.write("# padding\n" * (5 * 1024 * 1024))
    unchanged = Unchanged(scratch)
    for argv in (["render", "huge"], ["concretize", "huge"], ["render", "--check", "huge"]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2
        assert f"{path}: larger than {sitemod.MAX_BYTES // 1024} KiB" in err
        assert "missing required key" not in err
    unchanged.check()


@pytest.mark.parametrize("kind", ["dev-zero", "fifo", "directory"])
def test_site_that_is_not_a_regular_file(kind: str, scratch: Path, capsys) -> None:
    """A symlink to /dev/zero or a FIFO in sites/ would never finish reading (or block)."""
    path = scratch / "sites" / "odd.yaml"
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "fifo":
        os.mkfifo(path)
    else:
        path.mkdir()
    unchanged = Unchanged(scratch)
    for argv in (["render", "odd"], ["concretize", "odd"], ["render", str(path)]):
        rc, _, err = run(capsys, *argv)
        assert rc == 2 and f"{path}: is not a regular file" in err, err
    rc, out, _ = run(capsys, "sites")
    assert rc == 1 and "odd" in out and "is not a regular file" in out
    unchanged.check()


def test_reads_at_most_the_limit(tmp_path: Path, monkeypatch) -> None:
    """The size check reads MAX_BYTES + 1 bytes, not the whole file."""
    path = tmp_path / "x.yaml"
    with open(path, "wb") as fh:
        fh.truncate(50 * 1024 * 1024)  # sparse: 50 MB of zero bytes
    asked: list[int] = []
    real_open = open

    class Spy:
        def __init__(self, fh) -> None:
            self.fh = fh

        def __enter__(self):
            return self

        def __exit__(self, *exc) -> None:
            self.fh.close()

        def read(self, n: int = -1) -> bytes:
            asked.append(n)
            return self.fh.read(n)

    monkeypatch.setattr("builtins.open", lambda p, mode="r": Spy(real_open(p, mode)))
    with pytest.raises(sitemod.UserError, match="larger than"):
        sitemod.parse(path)
    assert asked == [sitemod.MAX_BYTES + 1]


# --- command-line flags and output paths ------------------------------------

FLAG_CASES = [
    # (argv, text the message must contain)
    (["sites", "--bogus"], "unrecognized arguments: --bogus"),
    (["render", "derecho", "--frce"], "unrecognized arguments: --frce"),
    (["render"], "the following arguments are required: site"),
    (["render", "derecko"], "unknown site 'derecko'; did you mean derecho?"),
    (["render", "derecho\n"], "unknown site 'derecho\\n'"),
    (["render", "does/not/exist.yaml"], "does/not/exist.yaml: no such site file"),
    (["render", "sites/"], "sites/: is not a regular file"),
    (["concretize", "derecho", "--fresh=yes"],
     "argument -f/--fresh: ignored explicit argument 'yes'"),
    (["concretize", "--jsn", "derecho"], "unrecognized arguments: --jsn"),
    (["concretize"], "the following arguments are required: site"),
    (["detect", "--jason"], "unrecognized arguments: --jason"),
    (["detect", "extra"], "unrecognized arguments: extra"),
    (["doctor", "--sitee", "derecho"], "unrecognized arguments: --sitee derecho"),
    (["doctor", "--site"], "argument --site: expected one argument"),
    (["allreduce", "--backend", "mpii"], "argument --backend: invalid choice: 'mpii'"),
    (["allreduce", "--factor", "two"], "argument --factor/-f: invalid int value: 'two'"),
    (["allreduce", "--dtype", "float16"], "argument --dtype: invalid choice: 'float16'"),
    (["allreduce", "--iters", "1.5"], "argument --iters/-n: invalid int value: '1.5'"),
]


@pytest.mark.parametrize("argv,expect", FLAG_CASES, ids=lambda v: str(v))
def test_bad_flag(argv: list[str], expect: str, scratch: Path, capsys, monkeypatch) -> None:
    """Exit 2, the verb's own usage line for argparse errors, the flag or value named."""
    for site in ("derecho", "generic-ib"):
        (scratch / "sites" / f"{site}.yaml").write_bytes((ROOT / "sites" / f"{site}.yaml")
                                                          .read_bytes())
    unchanged = Unchanged(scratch)
    monkeypatch.chdir(ROOT)  # "sites/" is a directory relative to the checkout
    with pytest.raises(SystemExit) if _argparse_error(expect) else _no_raise() as info:
        rc, _, err = run(capsys, *argv)
    if info is not None:
        rc = info.value.code
        err = capsys.readouterr().err
        assert f"usage: torchmpi {argv[0]}" in err, err
    assert rc == 2
    assert expect in err, err
    assert "Traceback" not in err
    unchanged.check()


def _argparse_error(expect: str) -> bool:
    return expect.startswith(("unrecognized", "the following", "argument "))


class _no_raise:
    value = None

    def __enter__(self):
        return None

    def __exit__(self, *exc) -> bool:
        return False


def _blocker(tmp_path: Path) -> Path:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory\n")
    return blocker


OUTPUT_CASES = [
    # (argv after the verb's site, text the message must contain)
    (["render", "derecho", "-o", "{blocker}/env"],
     "cannot create it: {blocker} is not a directory"),
    (["render", "derecho", "-o", "{blocker}"], "exists and is not a directory"),
    (["render", "derecho", "-o", "/dev/null/env"],
     "cannot create it: /dev/null is not a directory"),
    (["concretize", "derecho", "-o", "{blocker}/env"], "cannot create it: {blocker}"),
    (["concretize", "derecho", "-o", "{blocker}"], "exists and is not a directory"),
]


@pytest.mark.parametrize("argv,expect", OUTPUT_CASES, ids=lambda v: str(v))
def test_unwritable_output_is_refused_before_work(
    argv: list[str], expect: str, scratch: Path, tmp_path: Path, capsys
) -> None:
    """Checked before rendering or solving: nothing written, Spack never started."""
    (scratch / "sites" / "derecho.yaml").write_bytes((ROOT / "sites" / "derecho.yaml")
                                                    .read_bytes())
    blocker = _blocker(tmp_path)
    argv = [a.replace("{blocker}", str(blocker)) for a in argv]
    unchanged = Unchanged(scratch)
    rc, _, err = run(capsys, *argv)
    assert rc == 2
    assert "-o/--output" in err and expect.replace("{blocker}", str(blocker)) in err, err
    assert blocker.read_text() == "not a directory\n"
    unchanged.check()


# --- the same through `python -m torchmpi`, as a user runs it ---------------

SUBPROCESS_SAMPLE = ["syntax-unclosed-flow", "duplicate-nested-key", "non-utf8-latin1",
                     "target-unknown", "compiler-major-only", "description-newline"]


@pytest.mark.parametrize("name", SUBPROCESS_SAMPLE)
def test_no_traceback_from_the_command(name: str, scratch: Path) -> None:
    case = next(c for c in CASES if c.name == name)
    path = scratch / "sites" / case.path.name
    path.write_bytes(case.path.read_bytes())
    unchanged = Unchanged(scratch)
    env = dict(os.environ)
    for argv in (["sites"], ["render", name], ["concretize", name]):
        proc = subprocess.run([sys.executable, "-m", "torchmpi", *argv], capture_output=True,
                              text=True, env=env, timeout=120, check=False)
        assert "Traceback" not in proc.stdout + proc.stderr, proc.stderr
        assert proc.returncode == (1 if argv == ["sites"] else 2), proc.stderr
        assert str(path) in proc.stdout + proc.stderr
    unchanged.check()


def test_writable_output_paths_pass_the_checks(tmp_path: Path) -> None:
    """The checks refuse what cannot be written and let through what can: an existing
    directory, one to create under a directory, a new file in an existing directory."""
    from torchmpi import writable
    from torchmpi.errors import UserError

    writable.check_dir(tmp_path, "-o")
    writable.check_dir(tmp_path / "new" / "deeper", "-o")
    writable.check_file(tmp_path / "report.json", "--json-out")
    (tmp_path / "old.json").write_text("{}")
    writable.check_file(tmp_path / "old.json", "--json-out")
    with pytest.raises(UserError, match="directory .*/nope does not exist"):
        writable.check_file(tmp_path / "nope" / "report.json", "--json-out")


def test_an_output_directory_one_may_write_but_not_search_is_refused(tmp_path: Path) -> None:
    """Mode 0600: writing a file in it needs the search (x) bit too.  Root passes every
    access check by its capabilities, so as root the verb runs without them
    (setpriv's empty bounding set: uid 0 then is an owner like any other)."""
    out = tmp_path / "no-search"
    out.mkdir(mode=0o600)
    prefix = without_root_capabilities()
    proc = subprocess.run([*prefix, sys.executable, "-m", "torchmpi", "render", "derecho",
                           "-o", str(out)], capture_output=True, text=True, timeout=120,
                          check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert f"-o/--output {out}: directory is not writable" in proc.stderr, proc.stderr
    assert not list(out.iterdir()), "nothing written"
