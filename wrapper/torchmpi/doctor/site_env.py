"""The site's runtime variables and the launcher flags some of them need.

The expected variables come from the project's one site loader
(:func:`torchmpi.site.load`, which reports file, line and key) and the one
function every consumer reads (:func:`torchmpi.runtime.environment`), so the
doctor cannot drift from runtime.sh and the modules.  The site module needs
jsonschema, ruamel.yaml and archspec, which a compute node with only py-torch-mpi
may lack: it is imported only for ``--site``, and every one absent is reported
(not raised), whichever the loader happens to import first.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check


@dataclass
class SiteExpectation:
    """What ``--site`` gave: the site's name and data, and its runtime variables."""

    name: str
    data: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    unavailable: str = ""  # why the site could not be read here (missing module)


#: The site loader's third-party modules (import name: pip name); PyYAML is
#: py-torchmpi's own run dependency and so always at hand.
SITE_MODULES = {"jsonschema": "jsonschema", "ruamel.yaml": "ruamel.yaml",
                "archspec.cpu": "archspec"}


def missing_site_modules() -> list[str]:
    """The pip names of the site loader's modules this Python cannot import."""
    missing = []
    for module, pip_name in SITE_MODULES.items():
        try:
            importlib.import_module(module)
        except ImportError:
            missing.append(pip_name)
    return missing


def _unavailable(missing: list[str]) -> str:
    names = ", ".join(f"'{name}'" for name in missing)
    plural = "s" if len(missing) > 1 else ""
    return (f"reading site files needs the Python module{plural} {names}, not installed here "
            f"(pip install {' '.join(missing)}, or run the doctor where `torchmpi sites` works)")


def load_expectation(name_or_path: str) -> SiteExpectation:
    """Load a site with the project's loader; a missing dependency is a finding, bad input raises.

    Raises :class:`torchmpi.errors.UserError` (file, line, key) for a bad site file.
    """
    missing = missing_site_modules()
    if missing:
        return SiteExpectation(name_or_path, unavailable=_unavailable(missing))
    try:
        from torchmpi import site as site_files
    except ModuleNotFoundError as err:  # a module SITE_MODULES does not list yet
        return SiteExpectation(name_or_path, unavailable=_unavailable([err.name or "?"]))
    from torchmpi import paths

    # The rules about what Spack builds (vouched pairs, torch releases, CUDA ranges)
    # read the package repositories: applied where they are at hand (a checkout,
    # as render and concretize apply them), skipped by an installed tool, which
    # has none and needs only the site's runtime and layout to compare a job.
    repos = paths.torchmpi_repo().is_dir() and paths.builtin_repo().is_dir()
    loaded = site_files.load(name_or_path, build_rules=repos)
    return SiteExpectation(loaded.name, loaded.data, loaded.environment)


@dataclass
class EnvDiff:
    name: str
    expected: str
    actual: str | None  # None: not set


def compare_env(expected: Mapping[str, object], actual: Mapping[str, str]) -> list[EnvDiff]:
    """Variables that are missing or differ from what the site expects."""
    diffs = []
    for name, want in expected.items():
        want = str(want)
        have = actual.get(name)
        if have != want:
            diffs.append(EnvDiff(name, want, have))
    return diffs


def check_site_env(site: SiteExpectation | None, actual: Mapping[str, str],
                   nodes: int | None = None) -> Check:
    """The job's variables against the site's; NCCL_NET may be absent on one node (HPE)."""
    name = "site.env"
    if site is None:
        return Check(name, SKIP, "no site given (--site NAME or FILE)")
    if site.env is None:
        return Check(name, SKIP, f"site {site.name} not read: {site.unavailable}")
    expected = dict(site.env)
    note = ""
    if nodes == 1 and "NCCL_NET" in expected and "NCCL_NET" not in actual:
        del expected["NCCL_NET"]
        note = " (NCCL_NET left unset on a single-node job, as HPE advises)"
    diffs = compare_env(expected, actual)
    if not diffs:
        return Check(name, PASS,
                     f"all {len(expected)} runtime variables of {site.name} set{note}")
    parts = [f"{d.name} unset (want {d.expected})" if d.actual is None
             else f"{d.name}={d.actual} (want {d.expected})" for d in diffs]
    return Check(name, FAIL, f"{len(diffs)} of {len(expected)} differ: " + "; ".join(parts),
                 f"source the site's runtime.sh (torchmpi render {site.name}) or load its module")


# --- launcher-bound settings ---------------------------------------------------


@dataclass(frozen=True)
class LauncherRule:
    """A runtime value that works only if the job was launched with a flag."""

    variable: str
    value: str
    slurm_flag: str  # srun option; srun reads it from SLURM_NETWORK too
    slurm_value: str  # what SLURM_NETWORK must contain
    pbs_flag: str
    source: str


def launcher_rules() -> tuple[LauncherRule, ...]:
    """The launcher-bound settings, from the fabric data files (``launcher_flags``
    in ``torchmpi/data/fabrics/*.yaml``, with their sources); none when this
    node lacks PyYAML to read them."""
    try:
        from torchmpi import runtime
    except ModuleNotFoundError:
        return ()
    return tuple(LauncherRule(**rule) for rule in runtime.launcher_flags())


def check_launcher_flags(env: Mapping[str, str]) -> Check:
    """Settings in this job that need a launcher flag (HPE alt_read) were launched with it."""
    name = "launcher.flags"
    active = [r for r in launcher_rules() if env.get(r.variable) == r.value]
    if not active:
        return Check(name, PASS, "no setting here needs a launcher flag")
    in_slurm = bool(env.get("SLURM_STEP_ID") or env.get("SLURM_JOB_ID"))
    in_pbs = bool(env.get("PBS_JOBID"))
    if not (in_slurm or in_pbs):
        rules = ", ".join(f"{r.variable}={r.value}" for r in active)
        return Check(name, SKIP, f"{rules} needs a launcher flag; not inside a Slurm or PBS job")
    for rule in active:
        setting = f"{rule.variable}={rule.value}"
        if in_slurm:
            network = env.get("SLURM_NETWORK")
            if network is not None and rule.slurm_value not in network.split(","):
                return Check(name, FAIL,
                             f"{setting} needs {rule.slurm_flag} ({rule.source}), but this "
                             f"step runs with SLURM_NETWORK={network}",
                             f"launch with {rule.slurm_flag} (or export "
                             f"SLURM_NETWORK={rule.slurm_value} before srun)")
            if network is None:
                return Check(name, WARN,
                             f"{setting} needs {rule.slurm_flag} ({rule.source}); "
                             "SLURM_NETWORK is unset (srun sets it from --network from Slurm "
                             "24.05.1), so the doctor cannot see that it was given",
                             f"export SLURM_NETWORK={rule.slurm_value} before srun (srun reads "
                             "it as --network, and the job can then be checked)")
        else:
            return Check(name, WARN,
                         f"{setting} needs the PBS job launched with {rule.pbs_flag} "
                         f"({rule.source}); a PBS job does not show whether it was",
                         f"submit with {rule.pbs_flag}, or unset {rule.variable}")
    return Check(name, PASS, "launched with " + ", ".join(r.slurm_flag for r in active))


# --- the site's uenv -----------------------------------------------------------------

#: Where CSCS mounts a uenv (cscs-docs docs/software/uenv/using.md); checks.uenv.UENV_MOUNT.
UENV_MOUNT = "/user-environment"


def _pairs(value: str, parts: int) -> list[list[str]]:
    """Comma-separated entries of ``a:b[:c]``, as the uenv tool writes them."""
    out = []
    for entry in value.split(","):
        fields = entry.rsplit(":", parts - 1) if entry else []
        if len(fields) == parts:
            out.append(fields)
    return out


def check_uenv(site: SiteExpectation | None, env: Mapping[str, str],
               root: Path = Path(UENV_MOUNT)) -> Check:
    """The uenv mounted at /user-environment is the site's, with its view loaded.

    What the uenv tool leaves (eth-cscs/uenv2): ``UENV_MOUNT_LIST`` as
    ``<squashfs>:<mount>,...`` (src/slurm/plugin.cpp, src/squashfs-mount/
    squashfs-mount.cpp), ``UENV_VIEW`` as ``<mount>:<name>:<view>,...``
    (src/uenv/env.cpp) and ``<mount>/meta/env.json`` with the uenv's name and
    views (src/uenv/meta.cpp).  None of them names the version (a pulled image
    is ``images/<sha256>/store.squashfs``), so the name and view are compared.
    ``root`` is where the mount is read (a test's stand-in tree).
    """
    name = "uenv"
    if site is None:
        return Check(name, SKIP, "no site given (--site NAME or FILE)")
    uenv = (site.data or {}).get("uenv")
    if not uenv:
        return Check(name, SKIP, f"site {site.name} runs without a uenv")
    want = uenv["image"].split("/", 1)[0]
    hint = (f"uenv start {uenv['image']} --view={uenv['view']}, or in the job "
            f"#SBATCH --uenv={uenv['image']} and #SBATCH --view={uenv['view']}")
    mounts = env.get("UENV_MOUNT_LIST")
    if not mounts or not env.get("UENV_VIEW"):
        return Check(name, FAIL, f"no uenv is mounted (UENV_MOUNT_LIST, UENV_VIEW unset), and "
                     f"{site.name}'s software lies under {UENV_MOUNT}", hint)
    if not any(mount == UENV_MOUNT for _, mount in _pairs(mounts, 2)):
        return Check(name, FAIL, f"nothing is mounted at {UENV_MOUNT} "
                     f"(UENV_MOUNT_LIST={mounts})", hint)
    meta_file = root / "meta" / "env.json"
    try:
        meta = json.loads(meta_file.read_text())
    except (OSError, ValueError) as err:
        return Check(name, FAIL, f"the uenv at {UENV_MOUNT} has no readable meta/env.json "
                     f"({err.__class__.__name__}), so it is not {uenv['image']}", hint)
    have = meta.get("name", "unnamed")
    if have != want:
        return Check(name, FAIL, f"{have} is mounted at {UENV_MOUNT}; "
                     f"{site.name} needs {uenv['image']}", hint)
    if uenv["view"] not in (meta.get("views") or {}):
        return Check(name, FAIL, f"the mounted {have} has no view {uenv['view']} "
                     f"(views: {', '.join(meta.get('views') or {}) or 'none'})", hint)
    loaded = [(n, v) for m, n, v in _pairs(env["UENV_VIEW"], 3) if m == UENV_MOUNT]
    if (have, uenv["view"]) not in loaded:
        return Check(name, FAIL, f"{have} is mounted but its view {uenv['view']} is not loaded "
                     f"(UENV_VIEW={env['UENV_VIEW']})", hint)
    return Check(name, PASS, f"{have} mounted at {UENV_MOUNT} with view {uenv['view']} "
                 f"(the version, {uenv['image']}, is not in what uenv records here)")
