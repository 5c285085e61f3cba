"""A ReFrame configuration for a site, written from the site file, and the script that runs it.

Centres prove their stacks with ReFrame (CSCS: eth-cscs/cscs-reframe-tests,
one ``config/systems/<cluster>.py`` per cluster, checks selected by partition
and environment features).  ``torchmpi reframe <site>`` writes the same shape
from the site file, so the torchmpi checks (package data,
``data/reframe/torchmpi_checks.py``) run in the harness the admins already use:

* the scheduler and launcher from ``launcher`` (Slurm: ``srun``; PBS Pro: HPE
  PALS ``mpiexec --ppn``, a launcher ReFrame lacks and the library registers;
  ``mpiexec``: the local scheduler with the MPI's own ``mpirun``/``mpiexec``);
* the launcher flags the site's runtime values need (fabric data
  ``launcher_flags``, the same rules ``doctor --site`` checks);
* GPUs per node (``checks.gpus_per_node``) as a device and the scheduler's GPU
  request (ReFrame's ``_rfm_gpu`` resource);
* features the checks select on (``torchmpi``, the MPI, the fabric, ``nccl``,
  ``cuda-aware-mpi``), as alps-uenv's ``extra/reframe.yaml`` declares them for
  each uenv;
* the site's ``uenv`` as ``--uenv=IMAGE --view=VIEW`` in ``access``: CSCS's own
  configuration passes the same two options as scheduler resources per uenv
  environment (eth-cscs/cscs-reframe-tests ``config/cscs.py``, values from
  ``config/utilities/uenv.py``); here the one environment needs the one uenv;
* the environment: ``module use``/``module load`` (or the site's runtime.sh) as
  ``prepare_cmds`` with ``modules_system: nomod``, so ReFrame never runs
  ``module show`` (which fails off the site);
* performance references from ``checks.references``, each a bus bandwidth at
  one large size (the schema's default, 1G) with its source.

The configuration is a Python file (the PALS launcher must be registered before
ReFrame builds the partitions, which only a Python configuration can do); its
data is a literal.  This module builds the files; the writer
(:mod:`torchmpi.output`) parses each back (settings.py with
:func:`ast.literal_eval` against the data, the scripts with ``bash -n``), adds
the header and applies the write policy render's files have: a file not
written by ``torchmpi reframe``, edited by hand, or written from another site
file is replaced only with ``--force``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from pprint import pformat
from typing import Any

from torchmpi import output, runtime, runtimesh
from torchmpi.errors import UserError
from torchmpi.output import Body
from torchmpi.site import Site

CONFIG = "settings.py"
SCRIPT = "run-checks.sh"
RUNTIME = runtimesh.NAME

#: site ``launcher`` -> ReFrame scheduler.  ``pbspro`` (not ``pbs``): Derecho runs PBS Pro.
SCHEDULERS = {"slurm": "slurm", "pbs": "pbspro", "mpiexec": "local"}
#: The GPU request per scheduler; ReFrame fills ``{num_gpus_per_node}`` (resource ``_rfm_gpu``).
#: PBS options without a dash are appended to ``-l select`` (reframe/core/schedulers/pbs.py).
GPU_REQUEST = {"slurm": ["--gpus-per-node={num_gpus_per_node}"],
               "pbs": ["ngpus={num_gpus_per_node}"]}
#: What NCCL's log says when it uses the fabric's network (``Using network X``).
NCCL_NETWORK = {"slingshot": "AWS Libfabric", "ib": "IB", "tcp": "Socket"}
ENVIRONMENT = "torchmpi"


def library_dir() -> Path:
    """Where the check library and the PALS launcher are installed (package data)."""
    return Path(str(resources.files("torchmpi").joinpath("data", "reframe")))


def launcher(site: Site) -> str:
    """ReFrame's launcher name for the site."""
    kind = site.data["launcher"]
    if kind == "slurm":  # `launch: mpirun`: Slurm allocates, the MPI's mpirun launches
        return str(site.data["launch"])
    if kind == "pbs":
        return "pals"
    return "mpirun" if site.data["mpi"]["kind"].startswith("openmpi") else "mpiexec"


def launcher_options(site: Site) -> list[str]:
    """Launcher flags the site's runtime values need (fabric data ``launcher_flags``)."""
    env = site.environment
    out = []
    for rule in runtime.launcher_flags():
        if env.get(rule["variable"]) != rule["value"]:
            continue
        if site.data["launcher"] == "slurm":
            out.append(f"--network={rule['slurm_value']}")
        elif site.data["launcher"] == "pbs":
            out.append(rule["pbs_flag"])
    return out


def access(site: Site) -> list[str]:
    """Scheduler options for every job: the site's ``checks.access``, then its uenv.

    Every prefix of a uenv site lies under the uenv's mount, empty unless the job
    mounts it (``srun``/``sbatch --uenv``, cscs-docs docs/software/uenv/using.md).
    """
    out = list(site.data["checks"]["access"])
    uenv = site.data.get("uenv")
    if uenv:
        out += [f"--uenv={uenv['image']}", f"--view={uenv['view']}"]
    return out


def features(site: Site) -> list[str]:
    """What the checks select on; only what the site file states."""
    out = ["torchmpi", "mpi", site.data["mpi"]["kind"], site.data["fabric"]]
    if site.gpu_vendor == "amd":  # ReFrame's AMD GPU feature; torch's nccl backend is RCCL
        out += ["gpu", "amdgpu", "rocm", "nccl"]
    elif site.gpu:
        out += ["gpu", "nvgpu", "cuda", "nccl"]
    if site.mpi_moves_device_buffers:
        out.append("cuda-aware-mpi")
    return out


def bootstrap_pattern(ifname: str | None) -> str | None:
    """NCCL_SOCKET_IFNAME as a regular expression for the ``Bootstrap : Using <if>`` line.

    NCCL takes a comma-separated list of prefixes, ``=`` for exact names and
    ``^`` to exclude (NCCL environment-variable documentation); an exclusion
    names no interface to look for.
    """
    if not ifname or ifname.startswith("^"):
        return None
    exact = ifname.startswith("=")
    names = [n for n in ifname.lstrip("=").split(",") if n]
    tail = "" if exact else r"[^:\s]*"
    return "|".join(re.escape(n) + tail for n in names) or None


def nccl_expectations(site: Site) -> dict[str, str]:
    """What the NCCL log of a multi-node job on this site must say."""
    if not site.gpu:
        return {}
    fabric = site.data["fabric"]
    out = {"network": NCCL_NETWORK[fabric]}
    if fabric == "slingshot":
        out["provider"] = "cxi"
        plugin = (site.data.get("nccl") or {}).get("plugin")
        if plugin:
            out["plugin"] = str(plugin)
    pattern = bootstrap_pattern(site.environment.get("NCCL_SOCKET_IFNAME"))
    if pattern:
        out["bootstrap"] = pattern
    return out


def shell_path(path: str) -> str:
    """A site path for a shell line: Spack's ``$user`` becomes ``$USER``, the rest is kept."""
    return re.sub(r"\$(\{user\}|user\b)", "$USER", path)


def prepare_cmds(site: Site, env_from: str, outdir: Path, extra: list[str]) -> list[str]:
    """The shell lines that give a job the site's torch and runtime values.

    ``module``: the modules ``torchmpi render`` configures (docs/users.md, "Load
    it"); ``runtime-sh``: ``extra`` (e.g. ``spack load py-torch-mpi``) and then the
    site's runtime.sh, last, so the site's values win (docs/users.md).
    """
    cmds = list(extra)
    if env_from == "module":
        install = site.data.get("install") or {}
        root = install.get("modules_root")
        if not root:
            raise UserError(f"{site.path}: install.modules_root: not set, so there are no "
                            "modules to load; use --env runtime-sh")
        root = shell_path(str(root))
        mpi = site.data["mpi"]
        # The centre's MPI by the centre's module names (JSC: OpenMPI/5.0.5), else the
        # tree's own MPI module, named kind/version.
        mpi_module = " ".join(mpi.get("modules") or [
            site.mpi_module])
        if install["module_system"] == "lmod":
            cmds += [f"module use {root}/linux-*/Core", f"module load {mpi_module} py-torch-mpi"]
        else:
            cmds += [f"module use {root}/linux-*", "module load py-torch-mpi"]
        return cmds
    return cmds + [f". {shlex.quote(str(outdir.absolute() / RUNTIME))}"]


def references(checks: dict[str, Any]) -> list[dict[str, Any]]:
    """The site's references with every default written out, so the check matches on
    exactly what settings.py shows: device by backend, the schema's size and tolerance."""
    out = []
    for ref in checks["references"]:
        device = "cuda" if ref["backend"] == "nccl" else "cpu"
        out.append({**ref, "device": ref.get("device", device),
                    "size": ref["size"], "tolerance": ref["tolerance"]})
    return out


def configuration(site: Site, *, env_from: str, outdir: Path,
                  extra_prepare: list[str]) -> dict[str, Any]:
    """The ReFrame configuration as data (``site_configuration``)."""
    data = site.data
    checks = data["checks"]
    kind = data["launcher"]
    partition: dict[str, Any] = {
        "name": "gpu" if site.gpu else "cpu",
        "descr": data["description"],
        "scheduler": SCHEDULERS[kind],
        "launcher": launcher(site),
        "access": access(site),
        "environs": [ENVIRONMENT],
        "features": features(site),
        "extras": {"torchmpi": {
            "site": site.name,
            "site_file": str(site.path.absolute()),
            "launcher_options": launcher_options(site),
            "expected_fail": list(checks["expected_fail"]),
            "references": references(checks),
            "nccl": nccl_expectations(site),
            "ranks_per_node": int(checks["ranks_per_node"]),
            # no default (the schema's minimum is 1): absent where the site does not state it
            **({"cpus_per_node": int(checks["cpus_per_node"])} if "cpus_per_node" in checks
               else {}),
        }},
    }
    if site.gpu:
        # A GPU site that does not state checks.gpus_per_node gets one rank per node.
        partition["devices"] = [{"type": "gpu", "arch": site.sm_arch,
                                 "num_devices": int(checks["gpus_per_node"])}]
        if kind in GPU_REQUEST:
            partition["resources"] = [{"name": "_rfm_gpu", "options": GPU_REQUEST[kind]}]
    if kind == "mpiexec":
        partition["max_jobs"] = 1  # one job at a time on a workstation
    return {
        "systems": [{
            "name": site.name,
            "descr": data["description"],
            "hostnames": list(checks["hostnames"]),
            "modules_system": "nomod",
            "partitions": [partition],
        }],
        "environments": [{
            "name": ENVIRONMENT,
            "features": ["torchmpi"],
            "target_systems": [site.name],
            "prepare_cmds": prepare_cmds(site, env_from, outdir, extra_prepare),
        }],
    }


def config_body(config: dict[str, Any]) -> Body:
    """settings.py: the PALS launcher import where needed, then the data as a literal."""
    body = []
    if config["systems"][0]["partitions"][0]["launcher"] == "pals":
        body += ["import sys", "",
                 f"sys.path.insert(0, {str(library_dir())!r})",
                 "import torchmpi_launchers  # noqa: E402,F401  (registers 'pals')", ""]
    body.append(f"site_configuration = {pformat(config, width=99, sort_dicts=False)}")
    return Body("\n".join(body) + "\n", {"site_configuration": config})


def script_body() -> str:
    """run-checks.sh: ReFrame's own command line with this configuration and the library."""
    checks = library_dir() / "torchmpi_checks.py"
    return "\n".join([
        "#!/bin/bash",
        "# ReFrame's own command line: this directory's settings.py, torchmpi's checks,",
        "# and your arguments (default -r: run).  e.g. ./run-checks.sh -l, or",
        "# ./run-checks.sh -r -n torchmpi_allreduce -S num_nodes=2",
        "set -euo pipefail",
        'here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)',
        'if [ "$#" -eq 0 ]; then set -- -r; fi',
        f'exec "${{REFRAME:-reframe}}" -C "$here/{CONFIG}" -c {shlex.quote(str(checks))} "$@"',
    ]) + "\n"


@dataclass
class Output:
    outdir: Path
    files: dict[str, str]


def build(site: Site, outdir: Path, *, env_from: str | None = None,
          extra_prepare: list[str] | None = None) -> Output:
    """Every file's text, each parsed back and headed, before anything is written."""
    has_modules = bool((site.data.get("install") or {}).get("modules_root"))
    env_from = env_from or ("module" if has_modules else "runtime-sh")
    config = configuration(site, env_from=env_from, outdir=outdir,
                           extra_prepare=list(extra_prepare or []))
    bodies: dict[str, str | Body] = {CONFIG: config_body(config), SCRIPT: script_body()}
    if env_from == "runtime-sh":
        bodies[RUNTIME] = runtimesh.body(site)  # the lines `torchmpi render` writes
    return Output(outdir, output.assemble("reframe", site, bodies))


def write(out: Output, force: bool = False) -> list[str]:
    """Write through the writer's policy; returns every file of the set (written or
    already up to date)."""
    output.write(out.outdir, out.files, force=force)
    return list(out.files)
