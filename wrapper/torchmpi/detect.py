"""Host detection for the ``local`` site and ``torchmpi detect``.

The CPU target comes from archspec (the library Spack itself uses, so the name
matches what Spack would pick), GPUs from ``nvidia-smi`` when it is on PATH.
No GPU found means a CPU-only build: detection never guesses a CUDA arch.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import archspec.cpu
import yaml

from torchmpi.autokeys import auto_keys
from torchmpi.errors import UserError


def _run(*cmd: str) -> str | None:
    """stdout of a short probe command, or None if it is missing or fails."""
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout if proc.returncode == 0 else None


def host() -> archspec.cpu.Microarchitecture:
    """This host's microarchitecture as archspec (and so Spack) names it: the one
    home of the host-CPU fact (``target: auto``, and :attr:`Site.cross_family`)."""
    return archspec.cpu.host()


def target() -> str:
    return host().name


def gpus() -> list[dict[str, str]]:
    """One entry per GPU: name and cuda_arch (compute capability, no dot)."""
    if not shutil.which("nvidia-smi"):
        return []
    out = _run("nvidia-smi", "--query-gpu=name,compute_cap", "--format=csv,noheader")
    found = []
    for line in (out or "").splitlines():
        if "," not in line:
            continue
        name, cap = (part.strip() for part in line.rsplit(",", 1))
        if cap.replace(".", "").isdigit():
            found.append({"name": name, "cuda_arch": cap.replace(".", "")})
    return found


def cuda_toolkit() -> dict[str, str] | None:
    """The CUDA toolkit an external ``cuda`` would point at (nvcc on PATH or CUDA_HOME)."""
    nvcc = shutil.which("nvcc")
    if not nvcc:
        for var in ("CUDA_HOME", "CUDA_PATH"):
            cand = Path(os.environ.get(var, "")) / "bin" / "nvcc"
            if os.environ.get(var) and cand.is_file():
                nvcc = str(cand)
                break
    if not nvcc:
        return None
    out = _run(nvcc, "--version") or ""
    for token in out.replace(",", " ").split():
        if token.startswith("V") and token[1:2].isdigit():
            return {"version": token[1:], "prefix": str(Path(nvcc).resolve().parents[1])}
    return None


def cray_pe() -> str | None:
    """The Cray PE version if this is a Cray login/compute node."""
    if os.environ.get("CRAYPE_VERSION") or os.environ.get("PE_ENV"):
        return os.environ.get("CRAYPE_VERSION") or os.environ.get("PE_ENV")
    return "present (/opt/cray/pe)" if Path("/opt/cray/pe").is_dir() else None


def mpi_on_path() -> dict[str, str] | None:
    """The first MPI launcher on PATH and its version banner."""
    for exe in ("mpirun", "mpiexec", "srun"):
        path = shutil.which(exe)
        if path:
            banner = (_run(path, "--version") or "").strip().splitlines()
            return {"launcher": path, "version": banner[0] if banner else "unknown"}
    return None


class HostLacks(UserError):
    """A valid site file whose ``auto`` values this host cannot fill in (a tool is missing).

    Not an invalid file: ``torchmpi sites`` lists such a site as unavailable here
    (exit 0) where an invalid one makes it exit 1; every other verb refuses it
    like any bad input, before any slow step.
    """


#: The GNU compilers ``compilers: auto`` needs, by language, and the package that
#: installs each (Debian/Ubuntu, RHEL/Rocky/Alma, SLES).  Fortran too: concretizing
#: py-torch's stack needs a Fortran compiler (README.md, System packages), and every
#: site's compiler entry names one (schema: languages c, cxx, fortran).
GNU_COMPILERS = (("c", "gcc", ("gcc", "gcc", "gcc")),
                 ("cxx", "g++", ("g++", "gcc-c++", "gcc-c++")),
                 ("fortran", "gfortran", ("gfortran", "gcc-gfortran", "gcc-fortran")))


def missing_compilers() -> list[str]:
    """The programs of :data:`GNU_COMPILERS` not on this host's ``PATH``."""
    return [exe for _, exe, _ in GNU_COMPILERS if not shutil.which(exe)]


def install_hint(missing: list[str]) -> str:
    """How to install the missing compilers on the usual distributions."""
    packages = [pkgs for _, exe, pkgs in GNU_COMPILERS if exe in missing]
    return "; ".join(f"{distro}: {tool} install {' '.join(p[i] for p in packages)}"
                     for i, (distro, tool) in enumerate((("Debian/Ubuntu", "apt-get"),
                                                         ("RHEL/Rocky", "dnf"),
                                                         ("SLES", "zypper"))))


def gcc() -> dict[str, Any] | None:
    """The host gcc as a Spack compiler external (spec, prefix, language paths)."""
    paths = {lang: shutil.which(exe) for lang, exe, _ in GNU_COMPILERS}
    if not all(paths.values()):
        return None
    version = (_run(paths["c"], "-dumpfullversion") or "").strip()
    if not version:
        return None
    prefix = str(Path(paths["c"]).parent.parent)
    return {"spec": f"gcc@{version}", "prefix": prefix, "languages": paths}


#: Packages `spack external find` reports that the local site does not reuse.
EXCLUDED_EXTERNALS = {
    # py-torch and its py-* dependencies install into Spack's own python; a
    # distribution python (no pip/venv module on Debian, its own site-packages)
    # is a fragile base for extensions.
    "python": "Spack builds python for the py-* stack",
    # Spack's docs warn against an external binutils next to Spack-built
    # compilers and linkers; nothing here needs it.
    "binutils": "an external binutils can shadow the compiler's linker",
}


@functools.lru_cache(maxsize=1)
def build_tools() -> tuple[dict[str, Any], ...]:
    """The host's build tools and core libraries as site ``externals`` entries.

    Detection is Spack's own (``spack external find``, its default build-tools
    and core-packages tags), run with a throw-away user scope so that nothing
    is written to the project's or the user's configuration.
    """
    from torchmpi import spackrun

    with tempfile.TemporaryDirectory(prefix="torchmpi-external-find-") as tmp:
        (Path(tmp) / "repos.yaml").write_text(
            "repos:\n  builtin: ${TORCHMPI_BUILTIN_REPO}\n")
        env = dict(spackrun.environ(), SPACK_USER_CONFIG_PATH=tmp)
        argv = [str(spackrun.executable()), "external", "find", "--scope", "user",
                *(f"--exclude={name}" for name in EXCLUDED_EXTERNALS)]
        proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False,
                              timeout=600)
        found = Path(tmp) / "packages.yaml"
        if proc.returncode != 0:
            raise UserError("externals: auto: `spack external find` failed:\n"
                            + (proc.stderr or proc.stdout)[-2000:])
        packages = (yaml.safe_load(found.read_text()) or {}).get("packages", {}) \
            if found.is_file() else {}
    out = []
    for name in sorted(packages):
        if name in EXCLUDED_EXTERNALS:
            continue
        for entry in packages[name].get("externals") or []:
            out.append({"spec": entry["spec"], "prefix": entry["prefix"]})
    return tuple(out)


def report(externals: bool = False) -> dict[str, Any]:
    """Everything ``torchmpi detect`` prints."""
    found = gpus()
    return {
        "target": target(),
        "gpus": found,
        "cuda_arch": found[0]["cuda_arch"] if found else None,
        "cuda": cuda_toolkit() if found else None,
        "cray_pe": cray_pe(),
        "mpi": mpi_on_path(),
        "gcc": gcc(),
        **({"externals": list(build_tools())} if externals else {}),
    }


def _local_mpi(gpu: bool, found: dict[str, str] | None) -> dict[str, Any]:
    """openmpi-cuda (built) with a GPU; without, reuse a system Open MPI if there is one."""
    if gpu:
        return {"kind": "openmpi-cuda"}
    banner = (found or {}).get("version", "")
    if "Open MPI" in banner and banner.split()[-1][:1].isdigit():
        prefix = str(Path(found["launcher"]).resolve().parents[1])
        return {"kind": "openmpi", "version": banner.split()[-1], "prefix": prefix}
    return {"kind": "openmpi"}


def _fill_target(site: Any, data: dict[str, Any], facts: dict[str, Any]) -> None:
    data["target"] = facts["target"]


def _key_line(site: Any, key: str) -> int:
    """The line of a top-level ``key:`` in the site file (1 if not found)."""
    text = site.raw.decode(errors="replace") if getattr(site, "raw", None) else ""
    return next((i for i, line in enumerate(text.splitlines(), 1)
                 if line.startswith(f"{key}:")), 1)


def _fill_compilers(site: Any, data: dict[str, Any], facts: dict[str, Any]) -> None:
    if not facts["gcc"]:
        missing = missing_compilers()
        where = f"{site.path}:{_key_line(site, 'compilers')}: compilers: auto"
        if not missing:
            raise HostLacks(f"{where}: `gcc -dumpfullversion` printed no version")
        raise HostLacks(
            f"{where} needs gcc, g++ and gfortran on PATH (Spack needs a Fortran compiler "
            f"to concretize py-torch's stack); this host lacks {' and '.join(missing)}: "
            f"install it ({install_hint(missing)}) or load a compiler module that has it, "
            "or list the compilers by hand in a copy of the site file (docs/sites.md)")
    data["compilers"] = [facts["gcc"]]


def _fill_gpu(site: Any, data: dict[str, Any], facts: dict[str, Any]) -> None:
    if not facts["cuda_arch"]:
        data.pop("gpu")  # no GPU found: a CPU-only build, never a guessed arch
        return
    gpu: dict[str, Any] = {"model": facts["gpus"][0]["name"], "cuda_arch": facts["cuda_arch"]}
    if facts["cuda"]:
        gpu["cuda"] = {"spec": f"cuda@{facts['cuda']['version']}",
                       "prefix": facts["cuda"]["prefix"]}
    data["gpu"] = gpu


def _fill_mpi_kind(site: Any, data: dict[str, Any], facts: dict[str, Any]) -> None:
    data["mpi"] = dict(data["mpi"], **_local_mpi(bool(data.get("gpu")), facts["mpi"]))


def _fill_externals(site: Any, data: dict[str, Any], facts: dict[str, Any]) -> None:
    """Left as ``auto`` here: :func:`build_tools` runs Spack (seconds), so the
    externals are found when an environment is rendered, not whenever the local
    site is loaded (``torchmpi sites``, doctor)."""


#: How each key of :data:`torchmpi.autokeys.AUTO_KEYS` is filled in; a test checks
#: that the two name the same keys, so a new auto-able key cannot be forgotten here.
FILLERS = {
    "target": _fill_target,
    "compilers": _fill_compilers,
    "gpu": _fill_gpu,
    "mpi.kind": _fill_mpi_kind,
    "externals": _fill_externals,
}


def fill_in(site: Any) -> None:
    """Replace the ``auto`` values of a (local) site with what this host has.

    Keys are filled in :data:`torchmpi.autokeys.AUTO_KEYS` order: the MPI choice
    depends on whether a GPU was found.
    """
    data = dict(site.data)
    facts = report()
    for key in auto_keys(data):
        FILLERS[key](site, data, facts)
    site.detected = {k: facts[k] for k in ("target", "cuda_arch")}
    site.data = data
