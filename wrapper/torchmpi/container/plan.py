"""What a site's container image carries and what the host injects at run time.

:func:`plan` decides it from the site, before any file is built, once
:func:`torchmpi.checks.container.for_container_verb` found nothing the runtime
cannot serve (its refusals name the site file, line and key; which runtime
injects what is data there).  The constants say what each centre's runtime
binds, with the centre's own run line or module file as the source; the
image's layout and base images are here too, as every part of the container
output reads them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from torchmpi import pairs
from torchmpi.checks import container as checks
from torchmpi.checks.container import (  # noqa: F401 (re-exported by torchmpi.container)
    APPTAINER_HOST_MPI,
    GPU_IMAGES,
    INJECTS_CRAY,
    INJECTS_PLUGIN,
    NETSTACK_ARTIFACTS,
    RUNTIMES,
)
from torchmpi.checks.schema import site_schema
from torchmpi.errors import InternalError
from torchmpi.site import Site

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

#: Base images by ``container.os`` (the data file says where each value is from):
#: the OS's system compiler and the image of a CPU-only site.
_BASE_IMAGES = checks.base_images()
OS_IMAGES: dict[str, dict[str, str]] = {
    name: {k: str(v) for k, v in image.items()}
    for name, image in _BASE_IMAGES["images"].items()}
#: The OS a site without ``container.os`` gets: the schema's default, filled in at load.
DEFAULT_OS: str = site_schema()["properties"]["container"]["properties"]["os"]["default"]

#: The CE AWS OFI NCCL hook variant CSCS recommends: the plugin dynamically
#: linked to CUDA, so it does not have to match the image's CUDA major
#: (eth-cscs/cscs-docs docs/software/container-engine/resource-hook.md).
CE_HOOK_VARIANT = "cuda-dl"

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
    #: The centre's modules that bind the host's stack (AMD sites: apptainer's
    #: ``container.modules``), loaded in the job before the ranks start.
    modules: list[str] = field(default_factory=list)
    #: Where they are found (``module use``), when not on the default MODULEPATH.
    modulepath: str = ""
    #: Set over the site's runtime variables in the container (AMD: what the image's
    #: torch can serve; see :func:`_amd`).
    override: dict[str, str] = field(default_factory=dict)
    #: Whether the image's MPI takes device buffers; not the AMD image's ABI stand-in
    #: (:data:`AMD_OVERRIDE` says why), whose torch is therefore ``~cuda_aware_mpi``.
    device_buffers: bool = True
    #: Whether the wrapper binds the site's native aws-ofi-nccl (``TORCHMPI_PLUGIN_LIB``)
    #: at :data:`PLUGIN_DIR`, first on the library path: decided here (:func:`_bind_plugin`)
    #: and read by the descriptors, which never look for the directory in ``lib_path``.
    binds_plugin: bool = False


def generic_target(site: Site) -> str:
    """A family-generic target the image runs on anywhere the site's CPU runs.

    x86: the highest x86-64 micro-architecture level (v3 at most: v4's AVX-512
    is missing on many nodes) that the site's target includes; Arm: aarch64.
    """
    import archspec.cpu

    # an archspec name of the x86_64 or aarch64 family (checks.container)
    target = archspec.cpu.TARGETS[str(site.data["target"])]
    if str(target.family) == "aarch64":
        return "aarch64"
    for level in ("x86_64_v3", "x86_64_v2"):
        generic = archspec.cpu.TARGETS[level]
        if target == generic or generic in target.ancestors:
            return level
    return "x86_64"


_REFUSED = "the site file cannot be rendered as a container"


def plan(site: Site) -> Plan:
    """Decide the image and the injection, or refuse with every reason (nothing is written).

    A runtime the site's MPI or fabric cannot serve was refused at load, by every
    verb alike; what only an image needs is refused here, before anything is decided
    (:func:`torchmpi.checks.container.for_container_verb`).
    """
    found = checks.for_container_verb(site.data, site.runtime)
    if found:
        raise site.refuse(found, _REFUSED)
    if site.rocm:
        return _amd(site)
    d = site.data
    box = d["container"]
    rt = box["runtime"]
    fabric, kind = d["fabric"], d["mpi"]["kind"]
    cuda_aware = site.torch_cuda_aware
    host_mpi = rt == "apptainer" and kind in APPTAINER_HOST_MPI
    nccl = checks.pinned_pair(d)
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
    else:  # refused at load (torchmpi.checks.container): a check let it through
        raise InternalError(f"mpi.kind {kind}: no container stand-in, yet the site loaded")
    out = Plan(runtime=rt, target=generic_target(site), os=box["os"],
               mpi=mpi, nccl=nccl)
    if rt == "ce":
        out.netstack = checks.netstack_artifact(nccl.get("plugin"))
        if cuda_aware:
            out.env.update(CE_HMEM)
    if host_mpi:
        _bind_centre_mpi(site, out)
    elif rt in ("podman-hpc", "apptainer"):
        # The whole Cray tree at its own path, as NCAR binds it (--bind /opt/cray), so
        # every RUNPATH and link inside it resolves as on the host; the host's
        # /usr/lib64 last (run_fasteddy_container.pbs).  Under a test's stand-in root
        # the same layout sits below that root.
        root = checks.cray_root(d)
        if root is None:  # checks.container refuses it first; data is refused, not asserted
            raise site.refuse([(("mpi", "prefix"), (
                f"{d['mpi']['prefix']} is not below /opt/cray; container.runtime {rt} binds"
                " the host's /opt/cray (Cray MPICH and what it NEEDs); allowed: Cray"
                " MPICH's prefix under /opt/cray"))], _REFUSED)

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
            gtl = inside(str(checks.gtl_dir(d)))  # checks.container: it is derivable
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
            _bind_plugin(out)
    return out


def _bind_plugin(out: Plan) -> None:
    """The site's native plugin, bound by the wrapper when it is given
    (``TORCHMPI_PLUGIN_LIB``) at :data:`PLUGIN_DIR`, first on the library path; a
    directory that is absent costs nothing.  The one place a plan decides it."""
    out.binds_plugin = True
    out.lib_path.insert(0, PLUGIN_DIR)


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
        _bind_plugin(out)
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
    if not site.gpu or site.rocm:
        return None
    return str(site.gpu["cuda"]["spec"]).split("@", 1)[1].split()[0]


#: AMD: Cray MPICH's switch for device buffers, off in the container.  The image's MPI is
#: the ABI stand-in, and builtin-derived py-torch refuses ``+rocm +cuda_aware_mpi`` on
#: any MPI but cray-mpich +rocm (the torchmpi py-torch package: the patched check cannot
#: see another MPI's ROCm support), so the image's torch is ``~cuda_aware_mpi``: it loads
#: no GTL for HSA, and Cray MPICH with the switch on and no GTL aborts in MPI_Init
#: (olcf/olcf-user-docs@f0571fe systems/frontier_user_guide.rst:4068-4072).  RCCL carries
#: the device tensors; MPI the host ones.
AMD_OVERRIDE = {"MPICH_GPU_SUPPORT_ENABLED": "0"}


def _amd(site: Site) -> Plan:
    """An AMD image: ROCm's base image of the site's release, RCCL as that release (on
    Slingshot with the plugin vouched with it, the site's native plugin bound at run time),
    Cray MPICH's ABI stand-in (OLCF: "MPICH 3.4.2 is required ... ABI compatible with the
    cray-mpich-abi module", olcf/olcf-user-docs@f0571fe
    software/containers_on_frontier.rst:44; OLCF's own CPE base images carry mpich@3.4.3,
    the same file :190-271), and the host's stack bound by the centre's modules
    (``container.modules``).  The plugin is a Slingshot pair (libfabric's cxi provider,
    ``VOUCHED_RCCL_PAIRS``), so an image for another fabric carries none, as the native
    environment of that fabric pins none (:func:`torchmpi.spackenv.packages_yaml`)."""
    box = site.data["container"]
    rocm = str(site.rocm["version"]) if site.rocm else ""
    slingshot = site.data["fabric"] == "slingshot"
    pair = pairs.rccl(rocm) if slingshot else None
    if slingshot and pair is None:
        # Asked at load of a Slingshot site only (gpuvendor): the native environment of
        # another fabric needs no plugin, but this image carries RCCL with one.
        listed = ", ".join(f"{p.rocm} (aws-ofi-nccl {p.plugin}, {p.by})"
                           for p in pairs.vouched_rccl())
        raise site.refuse([(("gpu", "rocm", "version"), (
            f"ROCm {rocm}: the AMD image carries RCCL (ROCm's release) with the aws-ofi-nccl"
            " plugin vouched for it, and no source vouches for a plugin with RCCL"
            f" {rocm}; allowed: {listed or 'none recorded'} (VOUCHED_RCCL_PAIRS,"
            " docs/design.md)"))], _REFUSED)
    out = Plan(runtime=box["runtime"], target=generic_target(site), os=box["os"],
               mpi=f"{CRAY_STANDIN} ~cuda",
               nccl={"rccl": rocm, **({"plugin": pair.plugin} if pair else {})},
               modules=[str(m) for m in box["modules"]],
               modulepath=str(box.get("modulepath") or ""),
               override=dict(AMD_OVERRIDE), device_buffers=False,
               launch="srun -n N ./run.sh python train.py")
    if pair is not None:
        _bind_plugin(out)
    return out
