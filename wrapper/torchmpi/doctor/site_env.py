"""The site's runtime variables and the launcher flags some of them need.

The expected variables come from the project's one site loader
(:func:`torchmpi.site.load`, which reports file, line and key) and the one
function every consumer reads (:func:`torchmpi.runtime.environment`), so the
doctor cannot drift from runtime.sh and the modules.  The site module needs
jsonschema and PyYAML, which a compute node with only py-torch-mpi may lack:
it is imported only for ``--site``, and its absence is reported, not raised.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check


@dataclass
class SiteExpectation:
    """What ``--site`` gave: the site's name and data, and its runtime variables."""

    name: str
    data: dict[str, Any] | None = None
    env: dict[str, str] | None = None
    unavailable: str = ""  # why the site could not be read here (missing module)


def load_expectation(name_or_path: str) -> SiteExpectation:
    """Load a site with the project's loader; a missing dependency is a finding, bad input raises.

    Raises :class:`torchmpi.errors.UserError` (file, line, key) for a bad site file.
    """
    try:
        from torchmpi import site as site_files
    except ModuleNotFoundError as err:
        missing = (err.name or "?").split(".")[0]
        return SiteExpectation(name_or_path, unavailable=(
            f"reading site files needs the Python module '{missing}', not installed here "
            f"(pip install {missing}, or run the doctor where `torchmpi sites` works)"))
    from torchmpi import paths, runtime

    # The rules about what Spack builds (vouched pairs, torch releases, CUDA ranges)
    # read the package repositories: applied where they are at hand (a checkout,
    # as render and concretize apply them), skipped by an installed tool, which
    # has none and needs only the site's runtime and layout to compare a job.
    repos = paths.torchmpi_repo().is_dir() and paths.builtin_repo().is_dir()
    loaded = site_files.load(name_or_path, build_rules=repos)
    return SiteExpectation(loaded.name, loaded.data, runtime.environment(loaded.data))


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
                             "SLURM_NETWORK is unset, so the doctor cannot see that it was given",
                             f"export SLURM_NETWORK={rule.slurm_value} before srun (srun reads "
                             "it as --network, and the job can then be checked)")
        else:
            return Check(name, WARN,
                         f"{setting} needs the PBS job launched with {rule.pbs_flag} "
                         f"({rule.source}); a PBS job does not show whether it was",
                         f"submit with {rule.pbs_flag}, or unset {rule.variable}")
    return Check(name, PASS, "launched with " + ", ".join(r.slurm_flag for r in active))
