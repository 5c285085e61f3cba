"""``container``: what the site's container runtime cannot serve, in two kinds.

* :func:`problems`, at load: a runtime the site's MPI or fabric cannot serve.
  Every verb refuses the file alike (docs/sites.md: a file one verb accepts no
  other rejects).
* :func:`for_container_verb`, asked by ``torchmpi container`` alone: what only an
  image or its run-time descriptor needs (a ``container`` key at all, a generic
  target, the NCCL pair the runtime's plugin was vouched with, a CE netstack
  artifact, Cray MPICH's /opt/cray root and GTL directory for a bind model).
  The native environment needs none of it, so a site that fails one still
  renders, concretizes and loads for the doctor.

Both return ``(key path, message)`` pairs, reported as ``file:line:column: key:``
with what is allowed (:func:`torchmpi.checks.refusals`).  The runtime data the
rules read (which runtimes inject what, the CE netstack artifacts) lives here, and
:mod:`torchmpi.container.plan` reads it from here.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from torchmpi import cudaaware, gpuvendor, pairs, runtime
from torchmpi.checks.common import Problem

#: ``container.runtime`` values (site.schema.json lists the same).
RUNTIMES = ("ce", "podman-hpc", "shifter", "apptainer", "singularity", "podman")
#: Container runtimes whose descriptor binds the host's Cray MPICH (lib-abi-mpich)
#: and libfabric into the image (NCAR's apptainer bind model, NERSC's podman-hpc
#: ``--mpi`` and shifter's MPICH module).
INJECTS_CRAY = ("podman-hpc", "shifter", "apptainer")
#: ``mpi.kind`` values apptainer also binds from the host: a centre's own Open MPI
#: (``mpi.prefix``), bound over an image Open MPI of the same release, the bind
#: model of Apptainer's user guide ("Apptainer and MPI applications": the host's
#: MPI mounted into the container, which must be compatible with it), launched by
#: the centre's srun or mpirun as its MPI docs say.
APPTAINER_HOST_MPI = ("openmpi",)
#: Runtimes that inject an aws-ofi-nccl plugin of their own: the image's NCCL
#: must be the release that plugin was vouched with, so the site pins the pair.
INJECTS_PLUGIN = {
    "ce": "the CE aws_ofi_nccl hook mounts CSCS's plugin",
    "shifter": "shifter's nccl-plugin module mounts NERSC's plugin",
    "apptainer": "the wrapper binds the site's native aws-ofi-nccl",
}
#: CE network stack artifacts as CSCS lists them (eth-cscs/cscs-docs
#: docs/software/container-engine/resource-hook.md, "Selecting network stack
#: artifacts", 26.05.1 on GH200): version -> named variants, the vCluster's
#: ``default`` first.  Without ``com.hooks.netstack.version``/``name`` the hook takes
#: ``latest`` and ``default``, which move when CSCS publishes a new artifact: the EDF
#: pins the artifact that carries the image's aws-ofi-nccl.
NETSTACK_ARTIFACTS: dict[str, tuple[str, ...]] = {
    "26.05.1": ("gpu:cuda13,cxi:12.0.1,ofi:2.5.1,aws:1.18.0+dl",
                "gpu:cuda13,cxi:13.1.0,ofi:2.5.1,aws:1.18.0+dl",
                "gpu:cuda13,cxi:14.0.0,ofi:2.5.1,aws:1.18.0+dl"),
}

@cache
def base_images() -> dict[str, Any]:
    """``data/containers/base_images.yaml``: each OS's compiler and CPU image, and the
    GPU vendors' images by OS, as data (the file says where each value is from)."""
    ref = resources.files("torchmpi").joinpath("data", "containers", "base_images.yaml")
    return yaml.safe_load(ref.read_text(encoding="utf-8"))


#: GPU vendor -> {prefix, build: {os: image}, final: {os: image}} (base_images.yaml).
GPU_IMAGES: dict[str, dict[str, Any]] = base_images()["gpu"]
#: What an AMD image runs under: apptainer, with the host's Cray MPICH, libfabric and
#: ROCm bound by the centre's own modules (OLCF: olcf/olcf-user-docs@f0571fe
#: software/containers_on_frontier.rst:289-291, ``olcf-container-tools`` then
#: ``apptainer-enable-mpi``/``apptainer-enable-gpu``; LUMI: Lumi-supercomputer/
#: LUMI-AI-Guide@a7e3387 02-setting-up-environment/README.md:84-92,
#: ``lumi-aif-singularity-bindings``).  CE's hook, podman-hpc and shifter serve the
#: NVIDIA sites torchmpi knows; none of them is what an AMD centre documents.
AMD_RUNTIMES = ("apptainer", "singularity")
#: Runtimes whose wrapper relies on the centre's binding modules (``container.modules``):
#: ``singularity`` only that way (LUMI's ``singularity`` command with its bindings module).
MODULE_RUNTIMES = ("apptainer", "singularity")


def _container(data: dict[str, Any]) -> list[Problem]:
    """A ``container.runtime`` the site's MPI or fabric cannot serve.

    Found at load, so every verb refuses the file alike (docs/sites.md: a file
    one verb accepts no other rejects); `torchmpi container` alone had refused it.
    """
    box = data.get("container")
    if not isinstance(box, dict):
        return []
    where = ("container", "runtime")
    rt, kind, fabric = box.get("runtime"), (data.get("mpi") or {}).get("kind"), data.get("fabric")
    if rt == "ce" and fabric != "slingshot":
        return [(where, (
            f"ce injects CSCS's Slingshot network stack and fabric is {fabric}; allowed:"
            " podman (nothing injected; the image's own MPI and NCCL)"))]
    host_mpi = rt == "apptainer" and kind in APPTAINER_HOST_MPI
    if rt in INJECTS_CRAY and kind != "cray-mpich" and not host_mpi:
        also = (" (apptainer also binds a centre's own Open MPI: mpi.kind openmpi with"
                " mpi.prefix)" if rt == "apptainer" else "")
        return [(where, (
            f"{rt} injects the host's Cray MPICH (lib-abi-mpich) and libfabric, and mpi.kind"
            f" is {kind}: the hybrid model with this MPI is not supported here{also};"
            " allowed: podman (the image's own MPI; off Slingshot), or ce on Slingshot"
            " (docs/containers.md)"))]
    if box.get("modules") and rt not in MODULE_RUNTIMES:
        return [(("container", "modules"), (
            f"container.modules names the centre's apptainer binding modules, and the"
            f" runtime is {rt}; allowed: container.runtime"
            f" {' or '.join(MODULE_RUNTIMES)}, or no container.modules"))]
    if rt == "singularity" and not box.get("modules"):
        return [(where, (
            "singularity runs here with the centre's binding modules (LUMI:"
            " lumi-aif-singularity-bindings), and the site file names none; allowed:"
            " container.modules: [the centre's modules, in load order], or apptainer"))]
    if (rt in INJECTS_CRAY and not (data.get("mpi") or {}).get("prefix")
            and not box.get("modules")):
        what = "the centre's Open MPI" if host_mpi else "Cray MPICH's lib-abi-mpich"
        return [(where, (
            f"{rt} binds the host's MPI ({what}) from mpi.prefix, which the site file does"
            " not give; allowed: podman, mpi.prefix, or (apptainer) container.modules"
            " naming the centre's modules that bind it"))]
    if rt == "podman" and fabric == "slingshot":
        return [(where, (
            "plain podman injects nothing, so the image's own libfabric runs, and one Spack"
            " builds in an image has no cxi provider (that needs the site's CXI driver):"
            " NCCL_NET='AWS Libfabric' and the FI_CXI_* values of the run script would"
            " reach no Slingshot NIC; allowed: apptainer or podman-hpc (with Cray MPICH:"
            " they bind the host's libfabric) or ce (CSCS)"))]
    if kind == "mpich":
        return [(where, (
            "mpi.kind mpich has no container stand-in (cray-mpich, openmpi-cuda and openmpi"
            " do); allowed: no container key, or one of those MPIs"))]
    return []


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """Applied by every loader, an installed tool's doctor included."""
    return _container(data)


# -- asked by `torchmpi container` alone --------------------------------------------------

def pinned_pair(data: dict[str, Any]) -> dict[str, str]:
    """The NCCL pair the image is pinned to: ``container.nccl``, else the site's ``nccl``."""
    return dict((data.get("container") or {}).get("nccl") or data.get("nccl") or {})


def netstack_artifact(plugin: str | None) -> tuple[str, str] | None:
    """(version, name) of the newest recorded CE netstack artifact carrying ``plugin``,
    dynamically linked to CUDA (``+dl``: "portable across versions", resource-hook.md)."""
    for version in sorted(NETSTACK_ARTIFACTS, reverse=True):
        for name in NETSTACK_ARTIFACTS[version]:
            if f"aws:{plugin}+dl" in name.split(","):
                return version, name
    return None


def cray_root(data: dict[str, Any]) -> Path | None:
    """The host's root that ``mpi.prefix``'s ``opt/cray`` sits in: ``/`` on a site,
    a test's stand-in tree below a tmp directory (tests/cray_ex.py); None off /opt/cray."""
    prefix = Path(data["mpi"]["prefix"])
    for parent in prefix.parents:
        if parent.name == "cray" and parent.parent.name == "opt":
            return parent.parent.parent
    return None


def gtl_dir(data: dict[str, Any]) -> str | None:
    """Cray MPICH's GTL directory: ``<mpich root>/<version>/gtl/lib`` above ``mpi.prefix``
    (None: no directory there is named after ``mpi.version``).

    Both NCAR (``/opt/cray/pe/mpich/${CRAY_MPICH_VERSION}/gtl/lib``, NCAR/hpc-demos
    containers/tutorial/apptainer/FastEddy/run_fasteddy_container.pbs) and Cray's
    module layout put it beside the ``ofi/<compiler>/<ver>`` prefix.
    """
    mpi = data["mpi"]
    prefix = Path(mpi["prefix"])
    for parent in (prefix, *prefix.parents):
        if parent.name == str(mpi.get("version")):
            return str(parent / "gtl" / "lib")
    return None


def _target(data: dict[str, Any]) -> list[Problem]:
    """An image is built for a family-generic target: x86_64 or aarch64 only."""
    import archspec.cpu

    name = str(data["target"])
    target = archspec.cpu.TARGETS.get(name)
    if target is None:
        return [(("target",), (f"{name!r} is not an archspec target; allowed: an archspec"
                               " name (`spack arch -t` on a compute node prints it)"))]
    if str(target.family) not in ("x86_64", "aarch64"):
        return [(("target",), (f"{name}: no generic container target for {target.family};"
                               " allowed: an x86_64 or aarch64 target"))]
    return []


def _pair(data: dict[str, Any], rt: str) -> list[Problem]:
    """The NCCL pair a runtime's injected plugin needs, vouched, and on CE an artifact."""
    box = data["container"]
    nccl = pinned_pair(data)
    vouched = [(p.nccl, p.plugin) for p in pairs.vouched()]
    listed = ", ".join(f"{n}+{p}" for n, p in vouched)
    if rt in INJECTS_PLUGIN and data["fabric"] == "slingshot" and not nccl.get("plugin"):
        return [(("container", "runtime"), (
            f"{INJECTS_PLUGIN[rt]} at run time, so the image's NCCL must be the release"
            " that plugin was vouched with; allowed: the pair pinned (container.nccl:"
            f" {{version: X, plugin: Y}}, or the site's nccl:), one of: {listed}"))]
    key = ("container", "nccl") if box.get("nccl") else ("nccl",)
    if nccl.get("plugin") and (nccl["version"], nccl["plugin"]) not in vouched:
        return [(key, (
            f"NCCL {nccl['version']} with aws-ofi-nccl {nccl['plugin']} is not a vouched"
            f" pair (nccl-ss11 VOUCHED_PAIRS, docs/design.md); allowed: {listed}"))]
    if rt == "ce" and netstack_artifact(nccl.get("plugin")) is None:
        known = "; ".join(f"{v}: {', '.join(n)}" for v, n in NETSTACK_ARTIFACTS.items())
        return [((*key, "plugin"), (
            f"aws-ofi-nccl {nccl.get('plugin')} is in no recorded CE netstack artifact, so"
            " the EDF cannot pin one that loads the image's pair; allowed: a pair whose"
            f" plugin one carries ({known}; eth-cscs/cscs-docs"
            " docs/software/container-engine/resource-hook.md)"))]
    return []


def _bind_model(data: dict[str, Any], rt: str) -> list[Problem]:
    """What binding the host's Cray MPICH needs of ``mpi.prefix``: its /opt/cray root,
    and on a CUDA-aware site the GTL directory beside it."""
    host_mpi = rt == "apptainer" and data["mpi"]["kind"] in APPTAINER_HOST_MPI
    if rt not in ("podman-hpc", "apptainer") or host_mpi or data["container"].get("modules"):
        # shifter's modules bind Cray's tree, as the centre's apptainer modules do;
        # a centre's Open MPI is bound as is
        return []
    prefix = data["mpi"]["prefix"]
    out: list[Problem] = []
    if cray_root(data) is None:
        out.append((("mpi", "prefix"), (
            f"{prefix} is not below /opt/cray; container.runtime {rt} binds the host's"
            " /opt/cray (Cray MPICH and what it NEEDs) as NCAR and NERSC do; allowed:"
            " Cray MPICH's prefix under /opt/cray")))
    if cudaaware.torch_variant(data) and gtl_dir(data) is None:
        out.append((("mpi", "prefix"), (
            f"{prefix} has no directory named after mpi.version"
            f" {data['mpi'].get('version')!r}, so the GTL library (<root>/<version>/gtl/lib)"
            f" cannot be derived for container.runtime {rt}; allowed: Cray MPICH's prefix"
            " below its version's directory, e.g. /opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1")))
    return out


def for_container_verb(data: dict[str, Any], resolved: runtime.Runtime) -> list[Problem]:
    """What ``torchmpi container`` cannot render, on data the loader accepted and its
    runtime variables as resolved once (``Site.runtime``).

    Never applied at load: the native environment needs none of it.
    """
    box = data.get("container")
    if not isinstance(box, dict):
        return [(("container",), (
            "missing: `torchmpi container` renders the site's container runtime; allowed:"
            f" container: {{runtime: R}} with R one of {', '.join(RUNTIMES)}"
            " (docs/containers.md)"))]
    rt = box["runtime"]
    out = _target(data)
    added = [op for op in runtime.PATH_OPS if getattr(resolved, op)]
    if rt == "shifter" and added:
        # shifter_setupenv puts the image's ENV over the job's environment
        # (NERSC/shifter src/shifter_core.c), so a directory added on the host to a
        # list the image sets (PATH, LD_LIBRARY_PATH) would be dropped without a word.
        out.append((("runtime", added[0]), (
            "shifter replaces a list the image sets with the image's value, so the"
            " descriptor cannot add to it; allowed: no runtime.prepend_path/append_path"
            " with shifter (an admin adds it with a shifter module's siteEnvPrepend or"
            " siteEnvAppend, udiRoot.conf), or container.runtime podman-hpc")))
    if gpuvendor.of(data) == "amd":
        return out + _amd(data, rt)
    if box.get("modules"):
        return out + [(("container", "modules"), (
            "the centre's binding modules serve AMD images here (OLCF, LUMI); an NVIDIA"
            " image's host stack is bound from mpi.prefix; allowed: no container.modules"
            " (apptainer's bind model: docs/containers.md)"))]
    return out + _pair(data, rt) + _bind_model(data, rt)


def _amd(data: dict[str, Any], rt: str) -> list[Problem]:
    """An AMD image: apptainer with the centre's binding modules, a ROCm image for the OS,
    and RCCL as ROCm's release (no NCCL pin).  The ROCm/plugin pair itself was checked
    at load (:func:`torchmpi.gpuvendor.problems`: a ROCm no source vouches for is refused
    by every verb)."""
    box = data["container"]
    if rt not in AMD_RUNTIMES:
        return [(("container", "runtime"), (
            f"{rt} has no AMD image here: the AMD centres torchmpi knows run apptainer or"
            " singularity with their own binding modules (OLCF, LUMI: docs/containers.md);"
            f" allowed: {', '.join(AMD_RUNTIMES)} with container.modules"))]
    out: list[Problem] = []
    kind = data["mpi"]["kind"]
    if kind != "cray-mpich":
        # The image's MPI is Cray MPICH's ABI stand-in and the centre's modules bind the
        # host's Cray MPICH (OLCF's containers page, LUMI's bindings): another MPI would
        # get both and never reach the container itself.
        out.append((("mpi", "kind"), (
            f"{kind}: the AMD image stands in for Cray MPICH's ABI (MPICH 3.4.3) and binds"
            " the host's Cray MPICH through the centre's modules (OLCF, LUMI:"
            " docs/containers.md); no AMD image with another MPI is built here; allowed:"
            " cray-mpich (or the native environment: torchmpi render)")))
    if not box.get("modules"):
        out.append((("container", "runtime"), (
            "apptainer on an AMD site binds the host's Cray MPICH, libfabric and GPU"
            " libraries through the centre's modules (OLCF: olcf-container-tools,"
            " apptainer-enable-mpi, apptainer-enable-gpu; LUMI:"
            " lumi-aif-singularity-bindings), and the site file names none; allowed:"
            " container.modules: [the centre's modules, in load order]")))
    images = GPU_IMAGES["amd"]["build"]
    if box["os"] not in images:
        out.append((("container", "os"), (
            f"{box['os']}: AMD publishes no ROCm development image for it (rocm/dev-<os>);"
            f" allowed: {', '.join(images)}")))
    if box.get("nccl"):
        out.append((("container", "nccl"), (
            "container.nccl pins NVIDIA's NCCL and its plugin; an AMD image's RCCL is its"
            " ROCm release (gpu.rocm.version) with the plugin vouched with it; allowed: no"
            " container.nccl")))
    return out
