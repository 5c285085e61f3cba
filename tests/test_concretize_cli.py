"""``torchmpi concretize`` without a real solve: a stand-in ``spack`` on TORCHMPI_SPACK_ROOT.

The real solves are in test_sites_concretize.py; here the command's own logic
is checked: the Spack invocation, -f when the lock is stale, the off-site
install tree, the summary from spack.lock, and Spack's reason on failure.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from support.spack import LOCK
from torchmpi import paths
from torchmpi.cli import main


def _argv(tmp: Path) -> list[str]:
    return (tmp / "argv").read_text().splitlines()


def test_summary_and_fresh_then_incremental(fake_spack: Path, capsys, monkeypatch) -> None:
    out = fake_spack / "env"
    # An install root that cannot exist here (whatever another run created).
    site = fake_spack / "derecho.yaml"
    site.write_text((paths.sites_dir() / "derecho.yaml").read_text()
                    .replace("/glade/work/$user", "$TORCHMPI_TEST_UNSET"))
    monkeypatch.delenv("TORCHMPI_TEST_UNSET", raising=False)
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    text = capsys.readouterr().out
    assert "cray-mpich@8.1.27 (external)" in text
    assert "nccl@2.29.2-1" in text and "aws-ofi-nccl@1.19.0" in text
    assert "5 total, 4 to build from source, 1 external" in text
    first = _argv(fake_spack)[-1]
    assert first.endswith("concretize -f")  # no lock yet: full solve
    assert "config:install_tree:root:" in first  # the site's tree is not on this host
    # Unchanged environment, lock newer than every file: Spack decides (no -f).
    future = time.time() + 5
    os.utime(out / "spack.lock", (future, future))
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert _argv(fake_spack)[-1].endswith("concretize")


def test_failure_shows_spacks_reason(fake_spack: Path, capsys, monkeypatch) -> None:
    monkeypatch.setenv("FAIL", "1")
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "Spack could not concretize derecho" in err
    assert "cannot satisfy a requirement for package 'cray-mpich'" in err


def test_failure_reason_is_forty_lines_from_the_first_error_or_the_last_forty() -> None:
    """Spack's reason starts at its first error line; with none, its last 40 lines
    (the end of a crash) are the reason, not its first 40 (its progress)."""
    from torchmpi.commands.concretize import _failure_reason

    progress = [f"==> step {i}" for i in range(60)]
    assert _failure_reason(progress) == "\n".join(progress[20:])
    failed = [*progress[:5], "==> Error: no solution", *progress[5:]]
    assert _failure_reason(failed) == "\n".join(failed[5:45])


def test_json_summary(fake_spack: Path, capsys) -> None:
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["mpi"] == "cray-mpich@8.1.27 (external)" and data["targets"] == ["zen3"]


def test_json_seconds_are_to_a_tenth(fake_spack: Path, capsys) -> None:
    """As the text summary shows them ("time 1.2 s"); a finer figure is noise.  Three
    solves: a hundredths figure ends in 0 one time in ten, all three one in a thousand."""
    for _ in range(3):
        assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "--json",
                     "-f"]) == 0
        seconds = json.loads(capsys.readouterr().out)["seconds"]
        assert seconds == round(seconds, 1), seconds


def test_offsite_lock_is_labelled_a_preview(fake_spack: Path, capsys) -> None:
    """Derecho solved here: the summary says it is a preview and lists what differs."""
    lock = json.loads(json.dumps(LOCK))
    for spec in lock["concrete_specs"].values():
        spec["arch"]["platform_os"] = "debian12"
    lock["concrete_specs"]["g"] = {"name": "glibc", "version": "2.36",
                                   "arch": {"target": "x86_64", "platform_os": "debian12"},
                                   "external": {"path": "/usr"}}
    (fake_spack / "lock.json").write_text(json.dumps(lock))
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q"]) == 0
    out = capsys.readouterr().out
    assert "(OFF-SITE PREVIEW)" in out.splitlines()[0]
    assert "os: the lock says debian12" in out
    assert "libc: the lock has glibc@2.36" in out
    assert "compiler: the site's gcc@12.2.0 cannot run here" in out
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["offsite_preview"] is True and data["offsite_differences"]


def test_runtime_only_change_keeps_the_lock(fake_spack: Path, capsys, monkeypatch) -> None:
    """Changing only runtime.env re-renders the files but does not force a
    re-solve; a change the solver reads (packages) does."""
    out = fake_spack / "env"
    site = fake_spack / "sites" / "derecho.yaml"
    site.parent.mkdir()
    text = (paths.sites_dir() / "derecho.yaml").read_text()
    site.write_text(text)
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert _argv(fake_spack)[-1].endswith("concretize -f")
    runtime_change = text.replace("\n  env:\n", "\n  env:\n    NCCL_DEBUG_SUBSYS: INIT\n", 1)
    assert runtime_change != text
    site.write_text(runtime_change)
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert "NCCL_DEBUG_SUBSYS=INIT" in (out / "runtime.sh").read_text(), "re-rendered"
    assert _argv(fake_spack)[-1].endswith("concretize"), "no -f for a runtime-only change"
    site.write_text(runtime_change.replace("version: 2.21.5-1", "version: 2.27.7-1")
                    .replace("plugin: 1.6.0", "plugin: 1.19.0"))
    assert main(["concretize", str(site), "-o", str(out), "-q"]) == 0
    assert _argv(fake_spack)[-1].endswith("concretize -f"), "packages changed: full re-solve"
    capsys.readouterr()


def test_roots_paired_with_another_roots_hash_are_refused(fake_spack: Path, capsys) -> None:
    """A lock whose root points at another package's spec (seen with Spack 1.1's
    concretization cache on a two-root site) is an error, not a summary."""
    swapped = json.loads(json.dumps(LOCK))
    swapped["roots"] = [{"hash": "t", "spec": "py-torch-mpi +cuda"},
                        {"hash": "r", "spec": "torchmpi.py-torch"}]
    (fake_spack / "lock.json").write_text(json.dumps(swapped))
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "root 'py-torch-mpi +cuda' points at py-torch@2.11.0 (hash t)" in err
    assert "root 'torchmpi.py-torch' points at py-torch-mpi@0.1.0 (hash r)" in err
    # The same lock with the roots the right way round is accepted.
    swapped["roots"] = [{"hash": "r", "spec": "py-torch-mpi +cuda"},
                        {"hash": "t", "spec": "torchmpi.py-torch"}]
    (fake_spack / "lock.json").write_text(json.dumps(swapped))
    assert main(["concretize", "derecho", "-o", str(fake_spack / "env"), "-q", "-f"]) == 0


def test_a_silent_spack_gets_a_heartbeat_with_the_seconds_so_far(tmp_path: Path,
                                                               monkeypatch) -> None:
    """While Spack prints nothing, a line says it still runs and for how long."""
    from torchmpi import spackrun

    exe = tmp_path / "spack" / "bin" / "spack"
    exe.parent.mkdir(parents=True)
    exe.write_text("#!/bin/sh\necho solving\nsleep 1.2\necho done\n")
    exe.chmod(0o755)
    monkeypatch.setenv("TORCHMPI_SPACK_ROOT", str(tmp_path / "spack"))
    lines: list[str] = []
    rc, out, seconds = spackrun.run_streaming(["concretize"], lines.append, heartbeat_s=0.3)
    beats = [line for line in lines if "still running" in line]
    assert rc == 0 and out == ["solving", "done"] and seconds >= 1.0
    assert beats and all(re.fullmatch(r"   \.\.\. still running, [01] s", b) for b in beats), beats


def test_solve_inputs_without_a_spack_yaml_is_still_a_digest(tmp_path: Path) -> None:
    """A rendered folder whose spack.yaml was removed by hand: the digest of what is
    there (the lock is then stale), not a crash; env_vars never count."""
    from torchmpi.commands.concretize import solve_inputs

    (tmp_path / "packages.yaml").write_text("packages: {}\n")
    alone = solve_inputs(tmp_path)
    (tmp_path / "spack.yaml").write_text("spack:\n  specs: [x]\n  env_vars: {set: {A: '1'}}\n")
    with_vars = solve_inputs(tmp_path)
    (tmp_path / "spack.yaml").write_text("spack:\n  specs: [x]\n")
    assert solve_inputs(tmp_path) == with_vars != alone
