"""Each site's native solve, done once per ``make test`` run and read by every test module.

A site environment's solve costs one to four minutes on the 2-core CI host.
Two modules need the same solve: tests/test_sites_concretize.py reads the DAG,
tests/test_modules.py fake-installs it and loads its modules with Lmod.  Each
used to solve on its own, and under ``pytest -n 2`` the two fixtures may sit
on different workers, so a session fixture alone could not share it.

This module keeps one scratch checkout per run, in the folder both xdist
workers share (the parent of each worker's base temp), and solves a site
there at most once: the first caller takes a per-site ``flock``, solves and
writes the outcome beside the environment; later callers, in either worker,
wait on the lock and read that outcome.  The environment's ``develop:``
source (``path: ../..``) is the scratch checkout's root, which enters the
solved spec (``dev_path``): consumers therefore copy the solved environment
*within* that checkout (:meth:`SiteSolves.copy`), where the lock stays valid.
"""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest
from torchmpi import output, paths
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.lock import Lock

from support.spack import Spack

#: What a consumer may copy: the rendered files and the lock (never .spack-env).
_ENV_FILES = ("spack.yaml", "packages.yaml", "modules.yaml", "runtime.sh", "spack.lock")


@dataclass
class Solved:
    """One site's solve: the exit status, Spack's output tails and the lock."""

    site: sitemod.Site
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    lock: Lock | None


def shared_root(factory: pytest.TempPathFactory) -> Path:
    """The folder every xdist worker of this run shares (the run's base temp)."""
    base = factory.getbasetemp()
    return base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base


@contextmanager
def _locked(path: Path, wait: bool = True) -> Iterator[bool]:
    """An exclusive ``flock`` on ``path``; without ``wait``, yields False when another
    process or thread holds it (nothing is locked then)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


class SiteSolves:
    """The run's scratch checkout of site environments, each solved at most once."""

    def __init__(self, spack: Spack, factory: pytest.TempPathFactory) -> None:
        self.spack = spack
        self.tree = shared_root(factory) / "shared-site-solves"
        with _locked(self.tree.parent / "shared-site-solves.lock"):
            # The committed relative repo path (../../spack_repo/torchmpi) must resolve.
            link = self.tree / "spack_repo"
            if not link.is_symlink():
                self.tree.mkdir(parents=True, exist_ok=True)
                link.symlink_to(paths.root() / "spack_repo")

    def env_dir(self, name: str) -> Path:
        return self.tree / "environments" / name

    def store(self, name: str) -> Path:
        """The install tree a solve of ``name`` opens: never the site's own."""
        return self.tree / "store" / name

    def get(self, name: str, wait: bool = True) -> Solved | None:
        """The site's solve, done here if no worker has done it yet in this run;
        without ``wait``, None while another worker or thread is solving it."""
        env_dir = self.env_dir(name)
        outcome = env_dir.parent / f"{name}.outcome.json"
        with _locked(env_dir.parent / f"{name}.lock", wait) as mine:
            if not mine:
                return None
            if not outcome.is_file():
                outcome.write_text(json.dumps(self._solve(name, env_dir)))
        data = json.loads(outcome.read_text())
        lock_path = env_dir / "spack.lock"
        lock = Lock(lock_path) if data["returncode"] == 0 and lock_path.is_file() else None
        return Solved(sitemod.load(name), data["returncode"], data["stdout"], data["stderr"],
                      data["seconds"], lock)

    def get_all(self, names: list[str] | tuple[str, ...], threads: int = 2) -> dict[str, Solved]:
        """Every site in ``names``, ``threads`` solves at a time.

        A thread first takes a site nobody is solving (the other worker may be
        on the same list), and waits for one only when all that remain are
        taken: a core waits only when there is nothing else to solve.
        """
        todo = list(names)
        done: dict[str, Solved] = {}
        busy: set[str] = set()
        errors: list[BaseException] = []
        guard = threading.Lock()

        def take(name: str, wait: bool) -> bool:
            with guard:
                if name in busy or name in done:
                    return False
                busy.add(name)
            try:
                got = self.get(name, wait=wait)
            finally:
                with guard:
                    busy.discard(name)
            if got is not None:
                with guard:
                    done[name] = got
            return got is not None

        def work() -> None:
            try:
                while True:
                    with guard:
                        left = [n for n in todo if n not in done and n not in busy]
                    if not left:
                        return  # the rest is being solved by the other thread
                    if not any(take(name, wait=False) for name in left):
                        take(left[0], wait=True)  # all taken by the other worker
            except BaseException as exc:  # noqa: BLE001 -- re-raised in the caller's thread
                errors.append(exc)

        pool = [threading.Thread(target=work) for _ in range(threads)]
        for thread in pool:
            thread.start()
        for thread in pool:
            thread.join()
        if errors:
            raise errors[0]
        return {name: done[name] for name in todo}

    def _solve(self, name: str, env_dir: Path) -> dict:
        site = sitemod.load(name)
        shutil.rmtree(env_dir, ignore_errors=True)  # a solve cut short earlier in this run
        if site.is_local:  # per host, never committed: rendered here
            output.write(env_dir, renderer.render(site, env_dir))
        else:  # byte for byte as committed
            shutil.copytree(paths.environments_dir() / name, env_dir,
                            ignore=shutil.ignore_patterns("spack.lock", ".spack-env"))
        start = time.monotonic()
        # The site install trees (/glade/..., /global/common/...) are not on this host.
        proc = self.spack.run("-c", f"config:install_tree:root:{self.store(name)}",
                              "-e", str(env_dir), "concretize", "-f", check=False,
                              timeout=1800)
        return {"returncode": proc.returncode, "stdout": proc.stdout[-4000:],
                "stderr": proc.stderr[-4000:], "seconds": round(time.monotonic() - start, 1)}

    def copy(self, name: str, dest: str) -> Path:
        """A copy of the solved environment beside it (same checkout, so the same
        ``dev_path``): a consumer may install, edit and refresh it freely."""
        solved = self.get(name)
        if solved.lock is None:
            pytest.fail(f"{name} did not concretize (exit {solved.returncode}):\n"
                        f"{solved.stdout}\n{solved.stderr}")
        target = self.env_dir(dest)
        target.mkdir(parents=True)
        for file in _ENV_FILES:
            if (self.env_dir(name) / file).is_file():
                shutil.copy2(self.env_dir(name) / file, target / file)
        return target
