"""Gather the inputs once, run every check, and print the report.

:class:`Inputs` is everything the checks look at; :func:`gather` fills it from
this process and machine, a test builds it by hand.  :func:`run_checks` is pure
given its inputs (the plugin lookup's file test is one of them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

from torchmpi.doctor import container, core, gpu, mpi, nccl, network, origin, probe, rocm, site_env
from torchmpi.doctor.core import Check, CommandResult, Runner
from torchmpi.errors import UserError


@dataclass
class Inputs:
    """Everything the checks look at, gathered once (or built by a test)."""

    torch: gpu.TorchInfo
    env: Mapping[str, str]
    runner: Runner
    interfaces: list[str]
    torch_ldd: str = ""
    nccl_log: str | None = None
    site: site_env.SiteExpectation | None = None
    driver: gpu.DriverInfo | None = None
    probes: Mapping[str, CommandResult | None] | None = None  # None: probing off
    #: what a child mapped loading each plugin name (:func:`nccl.resolve_plugin`)
    plugin_maps: Mapping[str, nccl.Mapped] | None = None
    origins: Mapping[str, str | None] | None = None  # torch, mpi4py, libnccl files in use
    container: list[Check] | None = None  # doctor.container's checks, gathered (None: none)
    #: the MPI libraries the MPI probe child mapped after MPI_Init (:func:`probe.mapped_mpi`)
    mpi_libs: list[str] | None = None
    #: where the uenv's meta/env.json is read (None: /user-environment, where CSCS mounts it)
    uenv_root: Path | None = None
    #: what amd-smi / rocm-smi say, for a ROCm torch (:func:`rocm.probe_smi`)
    rocm_smi: rocm.SmiInfo | None = None


def torch_ldd(info: gpu.TorchInfo, runner: Runner) -> str:
    if not info.lib_dir:
        return ""
    result = runner(["ldd", str(Path(info.lib_dir) / "libtorch_cpu.so")])
    return result.stdout if result is not None else ""


def read_log(path: str) -> str:
    """The ``--nccl-log`` text; an unreadable file is the user's input, said in words."""
    try:
        return Path(path).read_text(errors="replace")
    except OSError as err:
        raise UserError(f"--nccl-log {path}: cannot read: {err.strerror or err}") from None


def gather(site: str | None = None, nccl_log: str | None = None, run_probes: bool = True,
           runner: Runner = core.run_command) -> Inputs:
    """Collect the inputs from this process and machine.

    Raises :class:`torchmpi.errors.UserError` for a bad ``--site`` or an unreadable
    ``--nccl-log`` (only that read: any other OSError is a bug, not the user's log).
    """
    expectation = site_env.load_expectation(site) if site else None
    log_text = read_log(nccl_log) if nccl_log is not None else None
    info = gpu.probe_torch()
    env = dict(os.environ)
    inputs = Inputs(torch=info, env=env, runner=runner, interfaces=network.local_interfaces(),
                    torch_ldd=torch_ldd(info, runner), nccl_log=log_text, site=expectation,
                    driver=gpu.probe_driver(runner),
                    rocm_smi=rocm.probe_smi(runner) if info.hip_build else None,
                    plugin_maps=((rocm.resolve_plugin if info.hip_build else nccl.resolve_plugin)
                                 (env, runner) if info.nccl else None))
    inputs.origins = origin.locate(info.loaded_libs)
    site_data = expectation.data if expectation else None
    inputs.container = container.container_checks(
        env, network.on_slingshot(site_data, inputs.interfaces),
        (site_data or {}).get("mpi", {}).get("kind") == "cray-mpich")
    if run_probes:
        kind = (mpi.classify_libraries(info.loaded_libs) or (None,))[0]
        if kind is None and (env.get("CRAY_MPICH_VERSION") or env.get("CRAY_MPICH_DIR")):
            kind = "cray-mpich"
        design = probe.cuda_over_mpi_off(env, expectation.data if expectation else None, kind)
        inputs.probes = probe.run_all(info, runner, env, design)
        inputs.mpi_libs = probe.mapped_mpi(inputs.probes.get("probe.mpi"))
        nccl_run = inputs.probes.get("probe.nccl")
        if inputs.nccl_log is None and nccl_run is not None:
            inputs.nccl_log = nccl_run.stdout
    return inputs


def in_container(checks: list[Check] | None) -> str | None:
    """The runtime the gathered ``container`` check found this process in (None: not in one)."""
    return next((c.detail.removeprefix("in a container: ") for c in checks or []
                 if c.name == "container" and c.status == core.PASS), None)


def run_checks(inputs: Inputs) -> list[Check]:
    info, env = inputs.torch, inputs.env
    site_data = inputs.site.data if inputs.site else None
    nodes = core.job_nodes(env)
    slingshot = network.on_slingshot(site_data, inputs.interfaces)
    found = mpi.identify_mpi(inputs.runner, env, inputs.torch_ldd,
                             [*(inputs.mpi_libs or []), *info.loaded_libs])
    no_backend = ("torch does not import" if info.import_error else
                  None if info.mpi else "this torch has no MPI backend (see backend.mpi)")
    where = in_container(inputs.container)
    plugin = nccl.plugin_from_maps(inputs.plugin_maps or {}, inputs.nccl_log)
    gpu_site = isinstance((site_data or {}).get("gpu"), dict)
    design = probe.cuda_over_mpi_off(env, site_data, found.kind)
    return [
        gpu.check_torch(info),
        gpu.check_backend_mpi(info),
        gpu.check_backend_nccl(info),
        gpu.check_backend_gloo(info),
        (rocm.check_gpu(info.gpu_count, info.hip_build, inputs.rocm_smi or rocm.SmiInfo(),
                        gpu_site) if info.hip_build else
         gpu.check_gpu(info, inputs.driver or gpu.DriverInfo(), gpu_site)),
        mpi.check_mpi_implementation(found, no_backend, site_data, where),
        mpi.check_openmpi_cuda_aware(found, info.gpu_count, design, no_backend),
        mpi.check_cray_gpu_support(found, env, inputs.torch_ldd, info.loaded_libs,
                                   no_backend,
                                   rocm.GTL if info.hip_build else mpi.GTL_LIBRARIES[0]),
        *probe.probe_checks(info, inputs.probes, design),
        (rocm.check_rccl_plugin(env, plugin, slingshot, nodes, info.nccl, info.nccl_version)
         if info.hip_build
         else nccl.check_nccl_plugin(env, plugin, slingshot, nodes, info.nccl,
                                     info.nccl_version)),
        network.check_socket_ifname(env, inputs.interfaces),
        (rocm.check_rccl_network(inputs.nccl_log, slingshot, nodes) if info.hip_build
         else network.check_nccl_network(inputs.nccl_log, slingshot, nodes,
                                         env.get("NCCL_NET"))),
        network.check_nccl_interfaces(inputs.nccl_log, nodes),
        site_env.check_site_env(inputs.site, env, nodes),
        site_env.check_launcher_flags(env),
        site_env.check_uenv(inputs.site, env, inputs.uenv_root or Path(site_env.UENV_MOUNT)),
        origin.check_site_prefix(inputs.origins or {}, site_data, env,
                                 origin.recorded_tree()),
        *(inputs.container or []),
    ]


def format_table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<5} {c.name:<{width}}  {c.detail}")
        if c.fix and c.status in (core.FAIL, core.WARN):
            lines.append(f"{'':<5} {'':<{width}}  fix: {c.fix}")
    counts = {s: sum(c.status == s for c in checks)
              for s in (core.PASS, core.WARN, core.FAIL, core.SKIP)}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


def to_json(checks: list[Check]) -> str:
    return json.dumps({"ok": exit_status(checks) == 0,
                       "checks": [asdict(c) for c in checks]}, indent=2)


def exit_status(checks: list[Check]) -> int:
    return 1 if any(c.status == core.FAIL for c in checks) else 0
