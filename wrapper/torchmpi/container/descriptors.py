"""The run-time descriptor of each ``container.runtime``, one function per runtime.

:data:`DESCRIPTORS` maps a runtime to the function that writes its files, as Spack's
``container/writers.py`` registers one writer per format: a CE EDF (TOML), a
podman-hpc run line and module, a shifter job header, an apptainer bind-model
wrapper, or a plain podman line.  Every file is parsed back by the writer
(:mod:`torchmpi.output`: shell through ``bash -n``, YAML, TOML).
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from typing import Any

from torchmpi import __version__, parseback, runtime
from torchmpi.container.plan import (
    CE_HOOK_VARIANT,
    HOST_LD_PATH,
    PLUGIN_DIR,
    PODMAN_HPC_SYSTEM_BINDS,
    Plan,
)
from torchmpi.site import Site
from torchmpi.yamltext import Block, comment, document

# -- run-time descriptors --------------------------------------------------------------------

def image_name(site: Site) -> str:
    return f"torchmpi-{site.name}:{__version__}"


def edf(site: Site, p: Plan) -> dict[str, Any]:
    """CSCS Container Engine environment definition (eth-cscs/cscs-docs
    docs/software/container-engine/edf.md): image, mounts, hook annotations, [env]."""
    rt = site.runtime
    env = {MARKER: "ce", **p.env, **rt.set}
    for key, value in rt.prepend_path.items():
        env[key] = f"{value}:${{{key}:-}}"
    for key, value in rt.append_path.items():
        env[key] = f"${{{key}:-}}:{value}"
    box = site.data["container"]
    hooks: dict[str, Any] = {"aws_ofi_nccl": {"enabled": "true", "variant": CE_HOOK_VARIANT}}
    if p.netstack:
        # The artifact, not the host's libraries, and this one, not `latest`
        # (resource-hook.md, "Selecting the network stack source" and "... artifacts").
        hooks["netstack"] = {"source": "artifact", "version": p.netstack[0],
                             "name": p.netstack[1]}
    out: dict[str, Any] = {
        "image": f"${{SCRATCH}}/ce-images/torchmpi-{site.name}+{__version__}.sqsh",
        "mounts": list(box.get("mounts") or []),
        "workdir": "${PWD}",
        "annotations": {"com": {"hooks": hooks}},
    }
    if env:
        out["env"] = env
    return out


def _toml(data: dict[str, Any], name: str) -> str:
    import tomli_w

    text = tomli_w.dumps(data)
    parseback.toml_text(text, data, name)
    return text


#: Set by every descriptor: how ``torchmpi doctor`` knows it runs in a container
#: even where the runtime leaves no marker of its own (torchmpi.doctor.container).
MARKER = "TORCHMPI_CONTAINER"


def srun_line(site: Site, rest: str) -> str:
    """``srun --mpi=pmi2`` plus the flags the site's runtime values need, then ``rest``.

    PMI-2: MPICH in a container is wired up through Slurm's PMI-2 (eth-cscs/cscs-docs
    docs/software/communication/mpich.md, "Use PMI-2"); the flags: fabric data
    ``launcher_flags`` (``--network=disable_rdzv_get`` with ``alt_read``)."""
    env = site.environment
    words = ["srun", "--mpi=pmi2"]
    for rule in runtime.launcher_flags():
        if env.get(rule["variable"]) == rule["value"]:
            words.append(f"--network={rule['slurm_value']}")
    return " ".join([*words, rest])


def edf_text(site: Site, p: Plan) -> str:
    """The EDF with the line that launches it in its header."""
    name = f"{site.name}.toml"
    return comment(f"Launch: {srun_line(site, f'-n N --environment=$PWD/{name} python train.py')}",
                   "(PMI-2 for the image's MPICH: cscs-docs communication/mpich.md).") \
        + _toml(edf(site, p), name)


def _env_args(site: Site, flag: str, engine: str,
              extra: dict[str, str] | None = None,
              override: dict[str, str] | None = None) -> list[str]:
    env = {MARKER: engine, **(extra or {}), **site.environment, **(override or {})}
    return [f"{flag} {shlex.quote(f'{k}={v}')}" for k, v in env.items()]


def _in_container(site: Site) -> str:
    """Words put between the image and the user's command (``"$@"``) so that the site's
    ``runtime.prepend_path``/``append_path`` add to the *container's* lists.

    podman, podman-hpc and apptainer's ``-e``/``--env`` only replace a variable, and
    on the host ``$PATH`` is the host's list, not the image's; so a POSIX shell in
    the image runs the same ``export`` lines as runtime.sh, then ``exec``-s the
    command.  Empty where the site adds to no list (the command starts as before).
    """
    rt = site.runtime
    lines = runtime.shell_lines(runtime.Runtime(prepend_path=rt.prepend_path,
                                                append_path=rt.append_path))
    if not lines:
        return ""
    script = "; ".join([*lines, 'exec "$@"'])
    return f"/bin/sh -c {shlex.quote(script)} torchmpi-paths "


def _command(site: Site) -> str:
    """The end of every ``exec`` line: the image, then the user's command."""
    return f' "$image" {_in_container(site)}"$@"'


def _ld_path(dirs: list[str]) -> str:
    """``LD_LIBRARY_PATH=...`` as one shell word; :data:`HOST_LD_PATH` stays unquoted
    so that the host's value at launch (the centre's modules) is expanded there."""
    if HOST_LD_PATH not in dirs:
        return shlex.quote("LD_LIBRARY_PATH=" + ":".join(dirs))
    at = dirs.index(HOST_LD_PATH)
    head, tail = ":".join(dirs[:at]), ":".join(dirs[at + 1:])
    return (shlex.quote(f"LD_LIBRARY_PATH={head}:") + f'"{HOST_LD_PATH}"'
            + (shlex.quote(f":{tail}") if tail else ""))


def _inject_block(p: Plan, bind_flag: str, env_flag: str) -> list[str]:
    """Shell lines that fill the ``inject`` array: binds, LD_LIBRARY_PATH, LD_PRELOAD."""
    if not (p.binds or p.lib_path or p.preload):
        return ["inject=()  # nothing is injected on this site"]
    lines = ['inject=()', 'if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then']
    for host, inside in p.binds:
        lines.append(f"  inject+=({bind_flag} {shlex.quote(f'{host}:{inside}:ro')})")
    if p.lib_path:
        lines.append(f"  inject+=({env_flag} {_ld_path(p.lib_path)})")
    if p.preload:
        lines.append(f"  inject+=({env_flag} {shlex.quote('LD_PRELOAD=' + ':'.join(p.preload))})")
    if p.binds_plugin:
        lines += ['  if [ -n "${TORCHMPI_PLUGIN_LIB:-}" ]; then',
                  f'    inject+=({bind_flag} "$TORCHMPI_PLUGIN_LIB:{PLUGIN_DIR}:ro")',
                  '  fi']
    lines.append("fi")
    return lines


def _script(site: Site, what: list[str], body: list[str], image: str | None = None) -> str:
    head = ["#!/usr/bin/env bash", *comment(*what).splitlines(), "set -euo pipefail",
            f"image=${{TORCHMPI_IMAGE:-{image or image_name(site)}}}"]
    return "\n".join(head + body) + "\n"


def podman_sh(site: Site, p: Plan, devices: bool = False) -> str:
    """Plain podman: the same injection as the site's runtime, for a test node or a check.

    ``devices``: pass the GPUs (CDI names of the NVIDIA Container Toolkit) and the
    InfiniBand devices, for a site whose runtime *is* podman."""
    what = [f"Plain podman run of the '{site.name}' image with the site's injection",
            "(host MPI/libfabric/GTL mounted read-only, first on LD_LIBRARY_PATH).",
            "TORCHMPI_CONTAINER_INJECT=0: run on the image's own libraries (negative",
            "control: the doctor must then FAIL on a Slingshot site)."]
    body = _inject_block(p, "-v", "-e")
    flags = ["--rm", "--network=host"]
    if devices and site.gpu:
        flags.append("--device nvidia.com/gpu=all")
    if devices and site.data["fabric"] == "ib":
        flags.append("--device /dev/infiniband")
    body.append(f'exec podman run {" ".join(flags)} "${{inject[@]}}" '
                + " ".join(_env_args(site, "-e", "podman", p.env)) + _command(site))
    return _script(site, what, body)


def _centre_mpi_what(site: Site, p: Plan) -> list[str]:
    """The wrapper's header where it binds a centre's own Open MPI (plan.APPTAINER_HOST_MPI)."""
    mpi = site.data["mpi"]
    modules = ", ".join(mpi.get("modules") or [mpi["prefix"]])
    plugin = p.nccl.get("plugin")
    return [
        f"Apptainer wrapper for '{site.name}' (bind model): the centre's {mpi['kind']}"
        + f" {mpi.get('version', '')}",
        f"({modules}; load it before launching) replaces the image's of the same release;",
        "its trees are bound at their own paths, the job's LD_LIBRARY_PATH follows.",
        *([f"TORCHMPI_PLUGIN_LIB: lib dir of the site's aws-ofi-nccl {plugin}."]
          if plugin else []),
        f"Launch: {p.launch}",
        f"TORCHMPI_IMAGE: the .sif (default {site.name}.sif)."]


def _module_check(modules: list[str]) -> list[str]:
    """Shell lines that stop the wrapper unless each module is loaded (Lmod's and
    Environment Modules' ``LOADEDMODULES``: ``name`` or ``name/version``): without the
    centre's binding modules the image's own MPICH and libfabric would run, silently."""
    names = " ".join(shlex.quote(m) for m in modules)
    return [f"  for m in {names}; do",
            '    case ":${LOADEDMODULES:-}:" in',
            '      *":$m:"* | *":$m/"*) ;;',
            ('      *) echo "run.sh: module $m is not loaded; load it in the job script before'
             ' srun (TORCHMPI_CONTAINER_INJECT=0: run on the image stack alone)" >&2'),
            "         exit 2 ;;",
            "    esac",
            "  done"]


#: Per runtime run with the centre's binding modules: the command, the prefix by which
#: the host passes a variable into the container, and the GPU flags the centre passes.
#: apptainer (OLCF): ``--rocm`` (olcf/olcf_containers_examples@032b962
#: frontier/containers_on_frontier_docs/gpu_aware_mpi_example/submit642.sbatch:63-64);
#: singularity (LUMI): none, the image's own ROCm with the node's /dev
#: (Lumi-supercomputer/LUMI-AI-Guide@a7e3387 05-multi-gpu-and-node/run_ddp_srun.sh:38).
MODULE_RUNTIME_WORDS = {"apptainer": ("apptainer", "APPTAINERENV_", "--rocm "),
                        "singularity": ("singularity", "SINGULARITYENV_", "")}


def apptainer_modules_sh(site: Site, p: Plan) -> str:
    """Apptainer (or singularity) with the host's stack bound by the centre's modules (AMD
    sites): the wrapper checks they are loaded, adds (on Slingshot) the site's native
    aws-ofi-nccl in front of the library path the modules set
    (``APPTAINERENV_LD_LIBRARY_PATH``, as OLCF's PyTorch example does:
    olcf/olcf_containers_examples@032b962
    frontier/sample_apps/pytorch/olcfbaseimage/submit.sbatch:19) and passes the centre's
    GPU flags (:data:`MODULE_RUNTIME_WORDS`)."""
    command, prefix, gpu = MODULE_RUNTIME_WORDS[p.runtime]
    ld = f"{prefix}LD_LIBRARY_PATH"
    mods = " ".join(p.modules)
    plugin = p.binds_plugin  # Slingshot's: none off it (plan._amd)
    what = [(f"{command.capitalize()} wrapper for '{site.name}' (the centre's binding"
             " modules): the host's"),
            "Cray MPICH, libfabric and GPU libraries replace the image's. In the job script,",
            "before srun: " + (f"module use {p.modulepath}; " if p.modulepath else "")
            + f"module load {mods}",
            "(only to run, not to build: OLCF's break `apptainer build`, its container docs).",
            *([(f"TORCHMPI_PLUGIN_LIB: lib dir of the site's aws-ofi-nccl {p.nccl['plugin']}"
                f" (RCCL {p.nccl.get('rccl')}).")] if plugin else []),
            "MPICH_GPU_SUPPORT_ENABLED=0: the image's torch passes host tensors to MPI,",
            "device tensors go through RCCL (docs/containers.md).",
            f"Launch: {p.launch}",
            f"TORCHMPI_IMAGE: the .sif (default {site.name}.sif).",
            "TORCHMPI_CONTAINER_INJECT=0 (and the modules not loaded): the image's own stack."]
    body = ['inject=()', 'if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then',
            *_module_check(p.modules),
            *(['  if [ -n "${TORCHMPI_PLUGIN_LIB:-}" ]; then',
               f'    inject+=(--bind "$TORCHMPI_PLUGIN_LIB:{PLUGIN_DIR}:ro")',
               f'    export {ld}="{PLUGIN_DIR}${{{ld}:+:${ld}}}"',
               '  fi'] if plugin else []),
            'fi']
    body.append(f'exec {command} exec {gpu}"${{inject[@]}}" '
                + " ".join(_env_args(site, "--env", command, p.env, p.override))
                + _command(site))
    return _script(site, what, body, image=f"{site.name}.sif")


def apptainer_sh(site: Site, p: Plan) -> str:
    """NCAR's bind model (NCAR/hpc-demos containers/tutorial/apptainer/FastEddy/
    run_fasteddy_container.pbs): /run for Cray MPICH's launch, the host libraries first."""
    what = [f"Apptainer wrapper for '{site.name}' (NCAR's bind model): the host's Cray MPICH",
            ("lib-abi-mpich, libfabric" + (" and GTL (preloaded: CUDA-aware site)"
                                           if p.preload else "") + " replace the image's."),
            f"TORCHMPI_PLUGIN_LIB: lib dir of the site's aws-ofi-nccl {p.nccl.get('plugin')}",
            "(the torchmpi install's; without it the image's own plugin of the same pair).",
            "Launch: mpiexec -n N --ppn 4 --no-transfer ./run.sh python train.py",
            f"TORCHMPI_IMAGE: the .sif (default {site.name}.sif)."]
    if p.launch:
        what = _centre_mpi_what(site, p)
    body = _inject_block(p, "--bind", "--env")
    body.append('exec apptainer exec --nv --bind /run "${inject[@]}" '
                + " ".join(_env_args(site, "--env", "apptainer", p.env)) + _command(site))
    return _script(site, what, body, image=f"{site.name}.sif")


def podman_hpc_module(site: Site, p: Plan) -> dict[str, Any]:
    """A podman-hpc module (NERSC/podman-hpc etc/modules.d format) binding the host stack."""
    args = [f"-e LD_LIBRARY_PATH={':'.join(p.lib_path)}"]
    if p.preload:
        args.append(f"-e LD_PRELOAD={':'.join(p.preload)}")
    args += ["-e SLURM_*", "-e PALS_*", "-e PMI_*", "--ipc=host", "--network=host",
             "--pid=host", "--privileged"]
    return {"name": "torchmpi", "cli_arg": "torchmpi",
            "help": f"torchmpi: host Cray MPICH and libfabric for {site.name}",
            "env": "ENABLE_TORCHMPI", "shared_run": True,
            "conflicts": ["mpich", "cuda-mpi", "nccl"],
            "additional_args": args,
            "bind": [*(f"{host}:{inside}" for host, inside in p.binds),
                     *PODMAN_HPC_SYSTEM_BINDS]}


def podman_hpc_sh(site: Site, p: Plan) -> str:
    what = [f"podman-hpc run of the '{site.name}' image: --gpu (NERSC's module) and",
            "--torchmpi (torchmpi-podman-hpc.yaml beside this file, in podman-hpc's",
            "modules_dir): the host's Cray MPICH, libfabric, GTL; the plugin is the image's",
            "(its vouched pair). Launch: srun -n N ./run.sh python train.py",
            "TORCHMPI_CONTAINER_INJECT=0 drops --torchmpi (negative control)."]
    body = ['inject=()', 'if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then',
            '  inject+=(--torchmpi)', 'fi']
    gpu = ["--gpu"] if site.gpu else []
    body.append("exec podman-hpc run --rm " + " ".join(gpu) + ' "${inject[@]}" '
                + " ".join(_env_args(site, "-e", "podman-hpc")) + _command(site))
    return _script(site, what, body)


def shifter_sh(site: Site, p: Plan) -> str:
    modules = ["gpu", "nccl-plugin"]
    if site.torch_cuda_aware:
        modules.append("cuda-mpich")
    what = [f"shifter job header for '{site.name}': NERSC's gpu, nccl-plugin"
            + (", cuda-mpich" if "cuda-mpich" in modules else "") + " modules inject",
            f"the host's stack; the image's NCCL {p.nccl.get('version')} pairs with the",
            f"plugin {p.nccl.get('plugin')} they mount. Source it, then: srun shifter python ..."]
    body = [f"#SBATCH --image={image_name(site)}", f"#SBATCH --module={','.join(modules)}",
            f"export {MARKER}=shifter",
            *[f"export {k}={shlex.quote(v)}" for k, v in site.environment.items()]]
    return "\n".join(["#!/usr/bin/env bash", *comment(*what).splitlines(), *body]) + "\n"


def _ce_files(site: Site, p: Plan) -> dict[str, str]:
    return {f"{site.name}.toml": edf_text(site, p)}


def _podman_hpc_files(site: Site, p: Plan) -> dict[str, str]:
    module = podman_hpc_module(site, p)
    return {"torchmpi-podman-hpc.yaml": document([Block(module)], module,
                                                 "torchmpi-podman-hpc.yaml"),
            "run.sh": podman_hpc_sh(site, p), "run-podman.sh": podman_sh(site, p)}


def _shifter_files(site: Site, p: Plan) -> dict[str, str]:
    return {"shifter.sh": shifter_sh(site, p)}


def _apptainer_files(site: Site, p: Plan) -> dict[str, str]:
    if p.modules:  # the centre's modules bind the stack; no podman equivalent of them
        return {"run.sh": apptainer_modules_sh(site, p)}
    return {"run.sh": apptainer_sh(site, p), "run-podman.sh": podman_sh(site, p)}


def _podman_files(site: Site, p: Plan) -> dict[str, str]:
    return {"run.sh": podman_sh(site, p, devices=True)}


#: One writer per ``container.runtime``, file name -> text in the order they are written.
DESCRIPTORS: dict[str, Callable[[Site, Plan], dict[str, str]]] = {
    "ce": _ce_files,
    "podman-hpc": _podman_hpc_files,
    "shifter": _shifter_files,
    "apptainer": _apptainer_files,
    "singularity": _apptainer_files,
    "podman": _podman_files,
}


def descriptors(site: Site, p: Plan) -> dict[str, str]:
    """The runtime's files (the writer parses each back by its format)."""
    return DESCRIPTORS[p.runtime](site, p)
