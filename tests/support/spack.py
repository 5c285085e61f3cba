"""The pinned Spack CLI, isolated from ``~/.spack``, as the ``spack`` fixture returns it.

Here and not in ``conftest.py`` so that a test can name the type
(``from support.spack import Spack``) without importing a pytest plugin.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from torchmpi.lock import Lock

from support import ROOT


class Spack:
    """The pinned Spack CLI, isolated from ``~/.spack``."""

    def __init__(self, root: Path, builtin: Path, config_dir: Path, cache_dir: Path):
        self.root = root
        self.builtin = builtin
        self.config_dir = config_dir
        self.cache_dir = cache_dir
        self.exe = root / "bin" / "spack"

    @property
    def env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("SPACK_")}
        env.update(
            SPACK_ROOT=str(self.root),
            SPACK_PYTHON=sys.executable,
            SPACK_USER_CONFIG_PATH=str(self.config_dir),
            SPACK_USER_CACHE_PATH=str(self.cache_dir),
            TORCHMPI_ROOT=str(ROOT),
            TORCHMPI_BUILTIN_REPO=str(self.builtin),
        )
        env.pop("SPACK_ENV", None)
        # The venv's bin (ruff, torchmpi) first, as after `. ./setup-env.sh`.
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        return env

    def run(
        self, *args: str, check: bool = True, cwd: Path | None = None, timeout: int = 1200
    ) -> subprocess.CompletedProcess:
        """Run ``spack ARGS``; on an unexpected exit status fail with Spack's output."""
        proc = subprocess.run(
            [str(self.exe), *args],
            check=False,
            env=self.env,
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if check and proc.returncode != 0:
            pytest.fail(
                f"spack {' '.join(args)} exited {proc.returncode}\n"
                f"--- stdout ---\n{proc.stdout[-6000:]}\n--- stderr ---\n{proc.stderr[-6000:]}"
            )
        return proc

    def spec_json(self, *args: str) -> dict:
        """Concretize ``spack spec --json ARGS`` and return the parsed spec."""
        return json.loads(self.run("spec", "--json", *args).stdout)

    def python(
        self, code: str, *args: str, check: bool = True, env_dir: Path | None = None
    ) -> subprocess.CompletedProcess:
        """Run a Python script inside ``spack python`` (Spack's API, real repos),
        in the environment ``env_dir`` when given (its config scopes apply).

        Written to a file: ``spack python -c`` compiles a single statement only.
        """
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
            script.write(code)
        try:
            prefix = ("-e", str(env_dir)) if env_dir else ()
            return self.run(*prefix, "python", script.name, *args, check=check)
        finally:
            os.unlink(script.name)


#: The head of a :meth:`Spack.python` script that reads torchmpi's package classes
#: (``cls(name)``: the class the repositories resolve, torchmpi's before builtin),
#: their conditions checked by Spack's own ``satisfies``, with no solve.
PACKAGE_CLASSES = """\
import json
import spack.repo
import spack.spec

def cls(name):
    return spack.repo.PATH.get_pkg_class(name)
"""


#: Concretizer settings for a test solve whose claim is a package's own condition
#: (a refusal and its message, a requirement against a preference, the provider a
#: variant brings), never a target, a second build-tool node or a reused install:
#: generic targets (the four x86_64 levels instead of every microarchitecture the
#: host runs; etc/spack/defaults/base/concretizer.yaml at spack v1.1.0: "the time
#: needed to reach a solution increases noticeably with the number of targets"),
#: one node per package, nothing reused.  Measured on the refusals' four solves:
#: every group reports the same errors, 372 CPU-s became 321.  Not
#: ``static_analysis``: with it the first refusal group ends in "Spack concretizer
#: internal error ... is unsatisfiable" instead of the packages' messages.
CHEAP_SOLVE = {
    "targets": {"granularity": "generic"},
    "duplicates": {"strategy": "none"},
    "reuse": False,
}

#: The head of a :meth:`Spack.python` script whose every solve runs under
#: :data:`CHEAP_SOLVE` (a scope above the user's, below any ``override``).
CHEAP_SOLVE_CODE = f"""\
import spack.config
spack.config.CONFIG.push_scope(spack.config.InternalConfigScope(
    "cheap-solve", {{"concretizer": {CHEAP_SOLVE!r}}}))
"""


#: The lock the stand-in ``spack`` writes: a Cray MPICH external, NCCL and the plugin.
LOCK = {
    "_meta": {"lockfile-version": 6},
    "roots": [{"hash": "r", "spec": "py-torch-mpi"}],
    "concrete_specs": {
        "r": {"name": "py-torch-mpi", "version": "0.1.0", "namespace": "torchmpi",
              "arch": {"target": "zen3"},
              "dependencies": [{"name": "py-torch", "hash": "t", "parameters": {}},
                               {"name": "cray-mpich", "hash": "m",
                                "parameters": {"virtuals": ["mpi"]}}]},
        "t": {"name": "py-torch", "version": "2.11.0", "namespace": "torchmpi",
              "arch": {"target": {"name": "zen3"}},
              "parameters": {"cuda_arch": ["80"], "mpi": True},
              "dependencies": [{"name": "nccl", "hash": "n", "parameters": {}},
                               {"name": "cray-mpich", "hash": "m",
                                "parameters": {"virtuals": ["mpi"]}}]},
        "n": {"name": "nccl", "version": "2.29.2-1", "arch": {"target": "zen3"}},
        "p": {"name": "aws-ofi-nccl", "version": "1.19.0", "arch": {"target": "zen3"}},
        "m": {"name": "cray-mpich", "version": "8.1.27", "arch": {"target": "zen3"},
              "external": {"path": "/opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"}},
    },
}


def stand_in_spack(tmp_path: Path) -> Path:
    """A `spack` under ``tmp_path/spack`` that logs its argv to ``tmp_path/argv`` and
    copies ``tmp_path/lock.json`` (:data:`LOCK` at first) to the environment's spack.lock,
    or fails as a solve fails when ``FAIL`` is set.  Returns the Spack root."""
    root = tmp_path / "spack"
    (root / "bin").mkdir(parents=True)
    (tmp_path / "lock.json").write_text(json.dumps(LOCK))
    exe = root / "bin" / "spack"
    exe.write_text(f"""#!/bin/sh
echo "$@" >> {tmp_path}/argv
if [ -n "$FAIL" ]; then
  echo "==> Error: failed to concretize py-torch-mpi for the following reasons:"
  echo "     1. cannot satisfy a requirement for package 'cray-mpich'."
  exit 1
fi
while [ "$1" != "-e" ]; do shift; done
echo "==> Concretized 1 spec"
cp {tmp_path}/lock.json "$2/spack.lock"
""")
    exe.chmod(0o755)
    return root


def compiled_lock(tmp: Path, *, runtimes: bool) -> Lock:
    """Derecho's off-site DAG in small: torch compiled by the site's external
    gcc@12.2.0 (Spack 1.1 keeps that node even when it cannot run the
    compiler), with or without the runtime nodes Spack adds for a compiler it
    can run (gcc-runtime, compiler-wrapper, the libc)."""
    gcc_edge = {"name": "gcc", "hash": "g", "parameters": {"virtuals": ["c", "cxx"]}}
    specs = {
        "t": {"name": "py-torch", "version": "2.11.0", "arch": {"platform_os": "sles15"},
              "dependencies": [gcc_edge]},
        "g": {"name": "gcc", "version": "12.2.0", "arch": {"platform_os": "sles15"},
              "external": {"path": "/opt/cray/pe/gcc/12.2.0/snos"}},
    }
    if runtimes:
        specs["t"]["dependencies"] += [
            {"name": "gcc-runtime", "hash": "gr", "parameters": {}},
            {"name": "compiler-wrapper", "hash": "w", "parameters": {}},
            {"name": "glibc", "hash": "l", "parameters": {"virtuals": ["libc"]}},
        ]
        specs["gr"] = {"name": "gcc-runtime", "version": "12.2.0",
                       "arch": {"platform_os": "sles15"}}
        specs["w"] = {"name": "compiler-wrapper", "version": "1.0",
                      "arch": {"platform_os": "sles15"}}
        specs["l"] = {"name": "glibc", "version": "2.31", "arch": {"platform_os": "sles15"},
                      "external": {"path": "/usr"}}
    path = tmp / ("with.lock" if runtimes else "without.lock")
    path.write_text(json.dumps({"roots": [{"hash": "t", "spec": "py-torch"}],
                                "concrete_specs": specs}))
    return Lock(path)
