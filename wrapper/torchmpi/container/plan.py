"""What a site's container image carries and what the host injects at run time.

:func:`plan` decides it from the site, before any file is built, and refuses
what the runtime cannot serve (each refusal names the site file and key).  The
constants say what each centre's runtime binds, with the centre's own run line
or module file as the source; the image's layout and base images are here too,
as every part of the container output reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from torchmpi import pairs, runtime
from torchmpi.checks.schema import site_schema
from torchmpi.site import Site

#: ``container.runtime`` values (site.schema.json lists the same).
RUNTIMES = ("ce", "podman-hpc", "shifter", "apptainer", "podman")

#: In-image layout, Spack's containerize conventions (lib/spack/spack/container at v1.1.0).
ENV_DIR = "/opt/spack-environment"
SPACK_DIR = "/opt/spack"
PACKAGES_DIR = "/opt/spack-packages"
TORCHMPI_DIR = "/opt/torchmpi"
SPACK_PYTHON = "/opt/spack-python"
#: Where a descriptor mounts the host's libraries that are not already at
#: their host path in the container (podman-hpc, plain podman).
HOST_MOUNT = "/opt/host"
#: Where the apptainer wrapper binds the site's native aws-ofi-nccl lib directory.
PLUGIN_DIR = f"{HOST_MOUNT}/plugin"
#: Where the Cray runtimes bind the host's /usr/lib64, last on LD_LIBRARY_PATH: NCAR's
#: ``--bind /usr/lib64:/host/lib64`` (NCAR/hpc-demos containers/tutorial/apptainer/
#: FastEddy/run_fasteddy_container.pbs).  libfabric's libcxi lives there (NERSC/podman-hpc
#: etc/modules.d/nccl.yaml takes /usr/lib64/libcxi.so* beside libfabric); last, so the
#: host's system libraries never shadow the image's.
HOST_LIB64 = "/host/lib64"
#: Directories of Cray MPICH's closure that the *host's* /etc/ld.so.conf.d names
#: (spack/spack#29392: /opt/cray/pe/lib64 holds libpmi, libpmi2 and libpals, which
#: libmpi.so.12 NEEDs; /opt/cray/xpmem/default/lib64 holds libxpmem).  The container
#: reads the image's ld.so.conf, so they go on LD_LIBRARY_PATH; absent ones cost nothing.
CRAY_LD_DIRS = ("/opt/cray/pe/lib64", "/opt/cray/xpmem/default/lib64")
#: What NERSC's MPI modules bind besides the libraries (NERSC/podman-hpc
#: etc/modules.d/mpich.yaml, cuda-mpich.yaml): xpmem and the Slingshot devices for
#: Cray MPICH's shared memory and CXI, Slurm's spool and munge's socket for PMI wire-up.
#: podman-hpc expands each source as a glob, so one a node lacks is skipped.
PODMAN_HPC_SYSTEM_BINDS = ("/dev/xpmem:/dev/xpmem", "/dev/shm:/dev/shm", "/dev/ss0:/dev/ss0",
                           "/dev/cxi*:/dev/", "/var/spool/slurmd:/var/spool/slurmd",
                           "/run/munge:/run/munge", "/run/nscd:/run/nscd",
                           "/etc/libibverbs.d:/etc/libibverbs.d")

#: The ABI stand-in for Cray MPICH: MPICH 3.4.x with the ch4 device over OFI.
#: Cray MPICH 8 reports "ANL base 3.4a2"; NCAR's Derecho container images
#: carry MPICH 3.4.3 ch4:ofi and swap in Cray MPICH's lib-abi-mpich at run time
#: (NCAR/HPC-Docs docs/environment-and-software/user-environment/containers/
#: working_with_containers.md, "ABI compatible"); NERSC's podman-hpc ``--mpi``
#: module replaces an MPICH-ABI libmpi.so.12 the same way (NERSC/podman-hpc
#: etc/modules.d/mpich.yaml, cuda-mpich.yaml).
CRAY_STANDIN = "mpich@3.4.3 device=ch4 netmod=ofi"
#: The image's own MPICH where CE runs it: CE injects no Cray MPICH, only the
#: host's (or the netstack's) libfabric and xpmem through the CXI hook, so the
#: image carries MPICH as CSCS builds it for containers (eth-cscs/cscs-docs
#: docs/software/communication/mpich.md: 4.3.1, ``--with-device=ch4:ofi
#: --with-xpmem``, ``--with-cuda`` in the GPU image); xpmem's user library only
#: (``~kernel-module``: the node's module is the system's).
CE_MPICH = "mpich@4.3.1 device=ch4 netmod=ofi +xpmem"
#: Set in the EDF where the CE image's MPICH is CUDA-aware: "To make sure that
#: GPU-to-GPU performance is good for inter-node communication one must set" it
#: (the same page).
CE_HMEM = {"MPIR_CVAR_CH4_OFI_ENABLE_HMEM": "1"}

def _base_images() -> dict[str, Any]:
    """``data/containers/base_images.yaml``: each OS's compiler and CPU image, as data."""
    ref = resources.files("torchmpi").joinpath("data", "containers", "base_images.yaml")
    return yaml.safe_load(ref.read_text(encoding="utf-8"))


#: Base images by ``container.os`` (the data file says where each value is from):
#: the OS's system compiler and the image of a CPU-only site.
_BASE_IMAGES = _base_images()
OS_IMAGES: dict[str, dict[str, str]] = {
    name: {k: str(v) for k, v in image.items()}
    for name, image in _BASE_IMAGES["images"].items()}
#: The OS a site without ``container.os`` gets: the schema's default, filled in at load.
DEFAULT_OS: str = site_schema()["properties"]["container"]["properties"]["os"]["default"]

#: The CE AWS OFI NCCL hook variant CSCS recommends: the plugin dynamically
#: linked to CUDA, so it does not have to match the image's CUDA major
#: (eth-cscs/cscs-docs docs/software/container-engine/resource-hook.md).
CE_HOOK_VARIANT = "cuda-dl"

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

#: Runtimes that inject an aws-ofi-nccl plugin of their own: the image's NCCL
#: must be the release that plugin was vouched with, so the site pins the pair.
INJECTS_PLUGIN = {
    "ce": "the CE aws_ofi_nccl hook mounts CSCS's plugin",
    "shifter": "shifter's nccl-plugin module mounts NERSC's plugin",
    "apptainer": "the wrapper binds the site's native aws-ofi-nccl",
}
#: Runtimes that inject the host's Cray MPICH (lib-abi-mpich) and libfabric.
INJECTS_CRAY = ("podman-hpc", "shifter", "apptainer")
#: ``mpi.kind`` values apptainer also binds from the host: a centre's own Open MPI
#: (``mpi.prefix``), bound over an image Open MPI of the same release, the bind
#: model of Apptainer's user guide ("Apptainer and MPI applications": the host's
#: MPI mounted into the container, which must be compatible with it), launched by
#: the centre's srun or mpirun as its MPI docs say.
APPTAINER_HOST_MPI = ("openmpi",)
#: In ``Plan.lib_path``: the host's LD_LIBRARY_PATH at launch (what the centre's
#: MPI, UCX and CUDA modules put there), expanded by the wrapper, not here.
HOST_LD_PATH = "${LD_LIBRARY_PATH:-}"
#: The host's InfiniBand verbs configuration and providers (RHEL-family paths), bound
#: at their own paths for UCX and NCCL's verbs transport in a bound-in host MPI.
IB_VERBS_DIRS = ("/etc/libibverbs.d", "/usr/lib64/libibverbs")


@dataclass
class Plan:
    """What the image carries and what the host injects, decided before any file is built."""

    runtime: str
    target: str
    os: str
    mpi: str
    nccl: dict[str, str] = field(default_factory=dict)
    #: (host directory, in-container directory) mounted read-only.
    binds: list[tuple[str, str]] = field(default_factory=list)
    #: in-container directories put first on LD_LIBRARY_PATH, in order.
    lib_path: list[str] = field(default_factory=list)
    #: in-container libraries preloaded (GTL on CUDA-aware Cray sites).
    preload: list[str] = field(default_factory=list)
    #: variables the runtime's descriptor sets beside the site's ``runtime.env``.
    env: dict[str, str] = field(default_factory=dict)
    #: (version, name) of the CE netstack artifact the EDF pins.
    netstack: tuple[str, str] | None = None
    #: How the ranks are started, for the descriptor's header (empty: the runtime's own).
    launch: str = ""


def generic_target(site: Site) -> str:
    """A family-generic target the image runs on anywhere the site's CPU runs.

    x86: the highest x86-64 micro-architecture level (v3 at most: v4's AVX-512
    is missing on many nodes) that the site's target includes; Arm: aarch64.
    """
    import archspec.cpu

    name = str(site.data["target"])
    target = archspec.cpu.TARGETS.get(name)
    if target is None:
        raise site.refuse(("target",), f"{name!r} is not an archspec target; allowed: an"
                          " archspec name (`spack arch -t` on a compute node prints it)")
    family = str(target.family)
    if family == "aarch64":
        return "aarch64"
    if family != "x86_64":
        raise site.refuse(("target",), f"{name}: no generic container target for {family};"
                          " allowed: an x86_64 or aarch64 target")
    for level in ("x86_64_v3", "x86_64_v2"):
        generic = archspec.cpu.TARGETS[level]
        if target == generic or generic in target.ancestors:
            return level
    return "x86_64"


def vouched_pairs() -> list[tuple[str, str]]:
    """(NCCL, aws-ofi-nccl) of every vouched pair, from :func:`torchmpi.pairs.vouched`."""
    return [(p.nccl, p.plugin) for p in pairs.vouched()]


def _gtl_dir(site: Site) -> str:
    """Cray MPICH's GTL directory: ``<mpich root>/<version>/gtl/lib`` above ``mpi.prefix``.

    Both NCAR (``/opt/cray/pe/mpich/${CRAY_MPICH_VERSION}/gtl/lib``, NCAR/hpc-demos
    containers/tutorial/apptainer/FastEddy/run_fasteddy_container.pbs) and Cray's
    module layout put it beside the ``ofi/<compiler>/<ver>`` prefix.
    """
    mpi = site.data["mpi"]
    prefix = Path(mpi["prefix"])
    for parent in (prefix, *prefix.parents):
        if parent.name == str(mpi.get("version")):
            return str(parent / "gtl" / "lib")
    raise site.refuse(("mpi", "prefix"), (
        f"{prefix} has no directory named after mpi.version {mpi.get('version')!r}, so the"
        " GTL library (<root>/<version>/gtl/lib) cannot be derived for container.runtime"
        f" {site.data['container']['runtime']}; allowed: Cray MPICH's prefix below its"
        " version's directory, e.g. /opt/cray/pe/mpich/8.1.27/ofi/gnu/9.1"))


def _cray_root(site: Site) -> Path:
    """The host's root that ``mpi.prefix``'s ``opt/cray`` sits in: ``/`` on a site,
    a test's stand-in tree below a tmp directory (tests/cray_ex.py)."""
    prefix = Path(site.data["mpi"]["prefix"])
    for parent in prefix.parents:
        if parent.name == "cray" and parent.parent.name == "opt":
            return parent.parent.parent
    raise site.refuse(("mpi", "prefix"), (
        f"{prefix} is not below /opt/cray; container.runtime"
        f" {site.data['container']['runtime']} binds the host's /opt/cray (Cray MPICH and"
        " what it NEEDs) as NCAR and NERSC do; allowed: Cray MPICH's prefix under /opt/cray"))


def _netstack(site: Site, plugin: str | None) -> tuple[str, str]:
    """(version, name) of the newest recorded CE netstack artifact carrying ``plugin``,
    dynamically linked to CUDA (``+dl``: "portable across versions", resource-hook.md)."""
    for version in sorted(NETSTACK_ARTIFACTS, reverse=True):
        for name in NETSTACK_ARTIFACTS[version]:
            if f"aws:{plugin}+dl" in name.split(","):
                return version, name
    known = "; ".join(f"{v}: {', '.join(n)}" for v, n in NETSTACK_ARTIFACTS.items())
    key = ("container", "nccl", "plugin") if site.data["container"].get("nccl") \
        else ("nccl", "plugin")
    raise site.refuse(key, (
        f"aws-ofi-nccl {plugin} is in no recorded CE netstack artifact, so the EDF cannot"
        f" pin one that loads the image's pair; allowed: a pair whose plugin one carries"
        f" ({known}; eth-cscs/cscs-docs docs/software/container-engine/resource-hook.md)"))


def plan(site: Site) -> Plan:
    """Decide the image and the injection, or refuse with the reason (nothing is written)."""
    d = site.data
    box = d.get("container")
    if not isinstance(box, dict):
        raise site.refuse(("container",), (
            "missing: `torchmpi container` renders the site's container runtime; allowed:"
            f" container: {{runtime: R}} with R one of {', '.join(RUNTIMES)}"
            " (docs/containers.md)"))
    rt = box["runtime"]
    fabric, kind = d["fabric"], d["mpi"]["kind"]
    cuda_aware = site.torch_cuda_aware
    # A runtime the site's MPI or fabric cannot serve was refused at load, by every
    # verb alike (torchmpi.checks.container), and Slingshot needs a gpu (the schema).
    host_mpi = rt == "apptainer" and kind in APPTAINER_HOST_MPI
    values = site.runtime
    added = [op for op in runtime.PATH_OPS if getattr(values, op)]
    if rt == "shifter" and added:
        # shifter_setupenv puts the image's ENV over the job's environment
        # (NERSC/shifter src/shifter_core.c), so a directory added on the host to a
        # list the image sets (PATH, LD_LIBRARY_PATH) would be dropped without a word.
        raise site.refuse(("runtime", added[0]), (
            "shifter replaces a list the image sets with the image's value, so the"
            " descriptor cannot add to it; allowed: no runtime.prepend_path/append_path"
            " with shifter (an admin adds it with a shifter module's siteEnvPrepend or"
            " siteEnvAppend, udiRoot.conf), or container.runtime podman-hpc"))
    nccl = dict(box.get("nccl") or d.get("nccl") or {})
    if rt in INJECTS_PLUGIN and fabric == "slingshot" and not nccl.get("plugin"):
        raise site.refuse(("container", "runtime"), (
            f"{INJECTS_PLUGIN[rt]} at run time, so the image's NCCL must be the release"
            " that plugin was vouched with; allowed: the pair pinned (container.nccl:"
            " {version: X, plugin: Y}, or the site's nccl:), one of:"
            f" {', '.join(f'{n}+{p}' for n, p in vouched_pairs())}"))
    if nccl.get("plugin") and (nccl["version"], nccl["plugin"]) not in vouched_pairs():
        raise site.refuse(("container", "nccl") if box.get("nccl") else ("nccl",), (
            f"NCCL {nccl['version']} with aws-ofi-nccl {nccl['plugin']} is not a vouched"
            " pair (nccl-ss11 VOUCHED_PAIRS, docs/design.md); allowed:"
            f" {', '.join(f'{n}+{p}' for n, p in vouched_pairs())}"))
    if fabric == "slingshot":
        # Where nothing injects a plugin (podman-hpc) the image's own one runs on
        # Slingshot: the pair is chosen as for the native environment
        # (spackenv.packages_yaml), never left to the solver's newest vouched pair,
        # which may have been run only on EFA.
        chosen = pairs.choose(nccl)
        if chosen is not None:
            nccl = {"version": chosen.nccl, "plugin": chosen.plugin}
    if kind == "cray-mpich":
        mpi = ((CE_MPICH if rt == "ce" else CRAY_STANDIN)
               + (f" +cuda cuda_arch={site.cuda_arch}" if cuda_aware else " ~cuda"))
    elif host_mpi and d["mpi"].get("version"):
        # The centre's release, so that its libmpi replaces the image's (same ABI).
        mpi = f"{kind}@{d['mpi']['version']}"
    elif kind in ("openmpi-cuda", "openmpi"):
        mpi = kind
    else:
        raise site.refuse(("mpi", "kind"), (
            f"{kind} has no container stand-in; allowed: cray-mpich, openmpi-cuda or"
            " openmpi (refused at load already: torchmpi.checks.container)"))
    out = Plan(runtime=rt, target=generic_target(site), os=box["os"],
               mpi=mpi, nccl=nccl)
    if rt == "ce":
        out.netstack = _netstack(site, nccl.get("plugin"))
        if cuda_aware:
            out.env.update(CE_HMEM)
    if host_mpi:
        _bind_centre_mpi(site, out)
    elif rt in ("podman-hpc", "apptainer"):
        # The whole Cray tree at its own path, as NCAR binds it (--bind /opt/cray), so
        # every RUNPATH and link inside it resolves as on the host; the host's
        # /usr/lib64 last (run_fasteddy_container.pbs).  Under a test's stand-in root
        # the same layout sits below that root.
        root = _cray_root(site)

        def inside(host: str) -> str:
            return "/" + str(Path(host).relative_to(root))

        out.binds.append((str(root / "opt" / "cray"), "/opt/cray"))
        out.lib_path.append(inside(str(Path(d["mpi"]["prefix"]) / "lib-abi-mpich")))
        out.lib_path.append(CRAY_LD_DIRS[0])
        libfabric = (d.get("libfabric") or {}).get("prefix")
        if libfabric:
            lib64 = f"{libfabric}/lib64"
            if Path(lib64).is_relative_to(root / "opt" / "cray"):
                out.lib_path.append(inside(lib64))
            else:
                out.binds.append((lib64, f"{HOST_MOUNT}/libfabric"))
                out.lib_path.append(f"{HOST_MOUNT}/libfabric")
        out.lib_path.extend(CRAY_LD_DIRS[1:])
        if cuda_aware:
            gtl = inside(_gtl_dir(site))
            out.lib_path.append(gtl)
            # What GTL leaves undefined, loaded first as the native preload does
            # (gtl_preload.preload: driver, C++ runtime, CUDA runtime, GTL): C++
            # runtime symbols with libstdc++ not NEEDED (cray-mpich 8.1.21,
            # eth-cscs/stackinator#9), CUDA runtime ones with libcudart not NEEDED
            # (8.1.27, stackinator#158), driver symbols (8.1.30,
            # spectral-compute/scale-validation#66).  By soname: the image's runtimes,
            # the driver the runtime mounts (--nv, the GPU module).
            major = (_cuda_version(site) or "12").split(".")[0]
            out.preload += ["libcuda.so.1", "libstdc++.so.6", f"libcudart.so.{major}",
                            f"{gtl}/libmpi_gtl_cuda.so.0"]
        out.binds.append((str(root / "usr" / "lib64"), HOST_LIB64))
        out.lib_path.append(HOST_LIB64)
        if rt == "apptainer":
            # NCAR's run line: Cray MPICH's single-copy path (xpmem/CMA) is off across
            # apptainer's process boundary (run_fasteddy_container.pbs).
            out.env["MPICH_SMP_SINGLE_COPY_MODE"] = "NONE"
            # The site's native plugin, bound here by the wrapper when it is given
            # (TORCHMPI_PLUGIN_LIB); a directory that is absent costs nothing.
            out.lib_path.insert(0, PLUGIN_DIR)
    return out


def _bind_centre_mpi(site: Site, out: Plan) -> None:
    """Apptainer's bind model for a centre's own Open MPI.

    The trees in ``container.mounts`` (where the centre's MPI and what it NEEDs
    were installed: a Spack tree's RUNPATHs, an EasyBuild stage) and ``mpi.prefix``
    are bound at their own paths; the MPI's lib directory, the site's libfabric
    (Slingshot) and the host's LD_LIBRARY_PATH of the job (the centre's modules:
    UCX, PMIx, CUDA) come before the image's libraries, the host's /usr/lib64
    (libibverbs, libcxi) last, as in NCAR's bind model.
    """
    d = site.data
    prefix = str(d["mpi"]["prefix"])
    mounts = [str(m) for m in (d["container"].get("mounts") or [])]
    for mount in mounts:
        out.binds.append((mount, mount))
    if not any(Path(prefix).is_relative_to(m) for m in mounts):
        out.binds.append((prefix, prefix))
    if d["fabric"] == "slingshot":  # the site's native aws-ofi-nccl, as for Cray MPICH
        out.lib_path.append(PLUGIN_DIR)
    out.lib_path.append(f"{prefix}/lib")
    if d["fabric"] == "ib":
        # The host's libibverbs (from /usr/lib64, below) reads its provider list in
        # /etc/libibverbs.d and loads the providers from the directory it was built
        # with (rdma-core: IBV_CONFIG_DIR, VERBS_PROVIDER_DIR); the image has neither.
        out.binds += [(x, x) for x in IB_VERBS_DIRS]
    libfabric = (d.get("libfabric") or {}).get("prefix")
    if libfabric:
        if not any(Path(libfabric).is_relative_to(m) for m in mounts):
            out.binds.append((str(libfabric), str(libfabric)))
        out.lib_path.append(f"{libfabric}/lib64")
    out.lib_path.append(HOST_LD_PATH)
    out.binds.append(("/usr/lib64", HOST_LIB64))
    out.lib_path.append(HOST_LIB64)
    # The site's own launch (docs/sites.md, launch): srun, or the MPI's mpirun.
    word = d.get("launch") or ("srun" if d["launcher"] == "slurm" else "mpiexec")
    out.launch = f"{word} -n N ./run.sh python train.py"


def _cuda_version(site: Site) -> str | None:
    if not site.gpu:
        return None
    return str(site.gpu["cuda"]["spec"]).split("@", 1)[1].split()[0]
