"""A site's PyTorch in a container image, with the site's network stack injected at run time.

``torchmpi container SITE`` writes, beside nothing of the native environment:

* ``spack.yaml`` -- the *container* environment: self-contained (no
  ``include:``, no host or relative path), the torchmpi repository and the
  tool's source at in-image paths, a generic target for the CPU family, the
  compiler and CUDA of the base image as the only externals (both inside the
  image), an MPI that is an ABI stand-in for the site's, and the NCCL/plugin
  pair that fits what the site injects;
* ``Containerfile`` -- three stages (bootstrap, build, final) written as data,
  every ``FROM`` pinned, labels carrying the site file's sha256, the pins and
  the pair; no ``NCCL_*``/``FI_*`` ``ENV`` (in CSCS's Container Engine the
  image's environment outranks the host's, so baked values could not be
  corrected at run time: the descriptor sets them);
* the run-time descriptor of the site's ``container.runtime``: a CE EDF
  (TOML), a podman-hpc run line and module, a shifter job header, an
  apptainer bind-model wrapper, or a plain podman line.

Why a second rendering and not ``spack containerize`` of the native
environment: containerize copies the manifest as it is, and the native one
names ``include:`` files, a repository and a ``develop:`` path relative to the
checkout, site externals and the site's exact CPU target -- none of which
exist in the image (docs/containers.md).

Why ``shared_linking: runpath``: Spack links with ``DT_RPATH`` by default,
which the dynamic loader searches *before* ``LD_LIBRARY_PATH``; the image's
MPICH would then always win over the host's Cray MPICH and libfabric that the
descriptors put on ``LD_LIBRARY_PATH``.  ``DT_RUNPATH`` is searched after it.

Every file is parsed back before it is written (YAML loads to its data, TOML
through :mod:`tomllib`, shell through ``bash -n``, the Containerfile through
:func:`parse_containerfile`), and written through :func:`torchmpi.render.write`
(atomic, hand-edit and foreign-site detection).
"""

from __future__ import annotations

import copy
import hashlib
import re
import shlex
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from torchmpi import __version__, pairs, paths, runtime
from torchmpi.errors import InternalError, UserError
from torchmpi.site import Site
from torchmpi.yamltext import Block, comment, document

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

#: Base images by OS: the build stage (compiler, CUDA headers) and the final
#: stage (CUDA runtime only), and the system compiler the OS ships (the
#: container environment's only compiler, an external inside the image).
#: Ubuntu 22.04's gcc is 11.4.0, 24.04's is 13.3.0, Debian 12's 12.2.0
#: (packages.ubuntu.com gcc-11 11.4.0-1ubuntu1~22.04, gcc-13 13.3.0-6ubuntu2~24.04;
#: packages.debian.org gcc-12 12.2.0-14).
OS_IMAGES = {
    "ubuntu22.04": {"gcc": "11.4.0", "cpu": "docker.io/library/ubuntu:22.04"},
    "ubuntu24.04": {"gcc": "13.3.0", "cpu": "docker.io/library/ubuntu:24.04"},
    "debian12": {"gcc": "12.2.0", "cpu": "docker.io/library/debian:12.8"},
}
DEFAULT_OS = "ubuntu22.04"

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


def generic_target(site: Site) -> str:
    """A family-generic target the image runs on anywhere the site's CPU runs.

    x86: the highest x86-64 micro-architecture level (v3 at most: v4's AVX-512
    is missing on many nodes) that the site's target includes; Arm: aarch64.
    """
    import archspec.cpu

    name = str(site.data["target"])
    target = archspec.cpu.TARGETS.get(name)
    if target is None:
        raise UserError(f"{site.path}: target {name!r} is not an archspec target")
    family = str(target.family)
    if family == "aarch64":
        return "aarch64"
    if family != "x86_64":
        raise UserError(f"{site.path}: target {name}: no generic container target for {family}")
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
    raise UserError(f"{site.path}: mpi.prefix {prefix} has no directory named after"
                    f" mpi.version {mpi.get('version')!r}; the GTL library"
                    " (<root>/<version>/gtl/lib) cannot be derived for container.runtime"
                    f" {site.data['container']['runtime']}")


def _cray_root(site: Site) -> Path:
    """The host's root that ``mpi.prefix``'s ``opt/cray`` sits in: ``/`` on a site,
    a test's stand-in tree below a tmp directory (tests/cray_ex.py)."""
    prefix = Path(site.data["mpi"]["prefix"])
    for parent in prefix.parents:
        if parent.name == "cray" and parent.parent.name == "opt":
            return parent.parent.parent
    raise UserError(f"{site.path}: mpi.prefix {prefix} is not below /opt/cray; container"
                    f".runtime {site.data['container']['runtime']} binds the host's /opt/cray"
                    " (Cray MPICH and what it NEEDs) as NCAR and NERSC do")


def _netstack(site: Site, plugin: str | None) -> tuple[str, str]:
    """(version, name) of the newest recorded CE netstack artifact carrying ``plugin``,
    dynamically linked to CUDA (``+dl``: "portable across versions", resource-hook.md)."""
    for version in sorted(NETSTACK_ARTIFACTS, reverse=True):
        for name in NETSTACK_ARTIFACTS[version]:
            if f"aws:{plugin}+dl" in name.split(","):
                return version, name
    known = "; ".join(f"{v}: {', '.join(n)}" for v, n in NETSTACK_ARTIFACTS.items())
    raise UserError(f"{site.path}: container.nccl.plugin: aws-ofi-nccl {plugin} is in no"
                    " recorded CE netstack artifact, so the EDF cannot pin one that loads"
                    f" the image's pair; pin a pair whose plugin one carries ({known};"
                    " eth-cscs/cscs-docs docs/software/container-engine/resource-hook.md)")


def plan(site: Site) -> Plan:
    """Decide the image and the injection, or refuse with the reason (nothing is written)."""
    d = site.data
    box = d.get("container")
    where = f"{site.path}: container"
    if not isinstance(box, dict):
        raise UserError(f"{site.path}: no `container:` key; add `container: {{runtime: ...}}`"
                        f" with one of {', '.join(RUNTIMES)} (docs/containers.md)")
    rt = box["runtime"]
    fabric, kind = d["fabric"], d["mpi"]["kind"]
    cuda_aware = bool(site.gpu) and d["mpi"].get("cuda_aware", True)
    if rt == "ce" and fabric != "slingshot":
        raise UserError(f"{where}.runtime: ce injects CSCS's Slingshot network stack;"
                        f" fabric is {fabric}: use runtime podman")
    if rt in INJECTS_CRAY and kind != "cray-mpich":
        raise UserError(f"{where}.runtime: {rt} injects the host's Cray MPICH (lib-abi-mpich)"
                        f" and libfabric; mpi.kind is {kind}: use runtime podman")
    if rt in INJECTS_CRAY and not d["mpi"].get("prefix"):
        raise UserError(f"{where}.runtime: {rt} binds Cray MPICH's lib-abi-mpich from"
                        " mpi.prefix, which the site file does not give")
    if fabric == "slingshot" and not site.gpu:
        raise UserError(f"{where}: fabric slingshot needs a GPU site (the NCCL plugin)")
    values = runtime.resolve(d)
    added = [op for op in runtime.PATH_OPS if getattr(values, op)]
    if rt == "shifter" and added:
        # shifter_setupenv puts the image's ENV over the job's environment
        # (NERSC/shifter src/shifter_core.c), so a directory added on the host to a
        # list the image sets (PATH, LD_LIBRARY_PATH) would be dropped without a word.
        raise UserError(f"{site.path}: runtime.{added[0]}: shifter replaces a list the image"
                        " sets with the image's value, so the descriptor cannot add to it;"
                        " an admin adds it with a shifter module's siteEnvPrepend or"
                        " siteEnvAppend (udiRoot.conf), or use runtime podman-hpc")
    nccl = dict(box.get("nccl") or d.get("nccl") or {})
    if rt in INJECTS_PLUGIN and fabric == "slingshot" and not nccl.get("plugin"):
        raise UserError(
                f"{where}.nccl: {INJECTS_PLUGIN[rt]} at run time, so the image's NCCL must be"
                " the release that plugin was vouched with; pin the pair"
                " (container.nccl: {version: X, plugin: Y}, or the site's nccl:) from:"
                f" {', '.join(f'{n}+{p}' for n, p in vouched_pairs())}")
    if nccl.get("plugin") and (nccl["version"], nccl["plugin"]) not in vouched_pairs():
        raise UserError(f"{where}.nccl: NCCL {nccl['version']} with aws-ofi-nccl"
                        f" {nccl['plugin']} is not a vouched pair (nccl-ss11 VOUCHED_PAIRS,"
                        " docs/design.md)")
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
    elif kind in ("openmpi-cuda", "openmpi"):
        mpi = kind
    else:
        raise UserError(f"{where}: mpi.kind {kind} has no container stand-in"
                        " (cray-mpich, openmpi-cuda and openmpi do)")
    out = Plan(runtime=rt, target=generic_target(site), os=box.get("os", DEFAULT_OS),
               mpi=mpi, nccl=nccl)
    if rt == "ce":
        out.netstack = _netstack(site, nccl.get("plugin"))
        if cuda_aware:
            out.env.update(CE_HMEM)
    if rt in ("podman-hpc", "apptainer"):
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


# -- spack.yaml ------------------------------------------------------------------------------

def _cuda_version(site: Site) -> str | None:
    if not site.gpu:
        return None
    return str(site.gpu["cuda"]["spec"]).split("@", 1)[1].split()[0]


def roots(site: Site, p: Plan) -> list[str]:
    d = site.data
    root = "py-torch-mpi"
    if site.gpu:
        cuda_aware = d["mpi"].get("cuda_aware", True)
        root += f" +cuda cuda_arch={site.cuda_arch}"
        root += " +cuda_aware_mpi" if cuda_aware else " ~cuda_aware_mpi"
    else:
        root += " ~cuda"
    root += f" fabric={d['fabric']}"
    return [f"{spec} target={p.target}" for spec in (root, *d.get("extra_specs", []))]


#: The container environment's solver settings.  Every node is required at one
#: generic target and the compiler, MPI and pair are required, so three settings
#: let Spack leave out of the problem what those requirements exclude:
#: ``targets: granularity: generic`` (the ~30 microarchitectures of the family;
#: etc/spack/defaults/base/concretizer.yaml at spack v1.1.0: "the time needed to
#: reach a solution increases noticeably with the number of targets"),
#: ``static_analysis`` (providers and conditional dependencies the requirements
#: rule out; lib/spack/spack/solver/input_analysis.py ``StaticAnalysis``, whose
#: own test, lib/spack/spack/test/env.py ``test_static_analysis_in_environments``,
#: checks the hashes do not change) and ``duplicates: none`` (one node per
#: package, as an image holds one stack: ``unify: true``; "minimal" also weighs a
#: second copy of build tools, which none of the five sites' DAGs has; a solve
#: that would need one fails in tests/test_container_solve.py rather than
#: growing the image).  Measured: the same concrete DAG for every site, about
#: 40 % less solver time together, in the image's build as in the tests
#: (docs/performance.md).  No solver cache (spack/spack#51553).
_CONCRETIZER: dict[str, Any] = {
    "unify": True,
    "targets": {"host_compatible": False, "granularity": "generic"},
    "static_analysis": True,
    "duplicates": {"strategy": "none"},
    "concretization_cache": {"enable": False},
}


def spack_env(site: Site, p: Plan) -> dict[str, Any]:
    """The container environment as data (in-image paths only)."""
    gcc = OS_IMAGES[p.os]["gcc"]
    compiler = {
        # The compiler node obeys `all: require: target=...` like every node.
        "spec": f"gcc@{gcc} languages=c,c++,fortran os={p.os} target={p.target}",
        "prefix": "/usr",
        "extra_attributes": {"compilers": {"c": "/usr/bin/gcc", "cxx": "/usr/bin/g++",
                                           "fortran": "/usr/bin/gfortran"}},
    }
    packages: dict[str, Any] = {
        "all": {"require": [f"target={p.target}"]},
        "c": {"require": [f"gcc@{gcc}"]},
        "cxx": {"require": [f"gcc@{gcc}"]},
        "fortran": {"require": [f"gcc@{gcc}"]},
        "mpi": {"require": [p.mpi.split()[0]]},
        "gcc:": {"buildable": False, "externals": [compiler]},
        "py-networkx": {"require": ["~default"]},
        "py-torch": {"require": ["~valgrind"]},
    }
    if p.mpi.startswith("mpich"):
        packages["mpich"] = {"require": [p.mpi]}
    if "+xpmem" in p.mpi.split():
        packages["xpmem"] = {"require": ["~kernel-module"]}
    cuda = _cuda_version(site)
    if cuda:
        packages["cuda:"] = {"buildable": False,
                             "externals": [{"spec": f"cuda@{cuda}", "prefix": "/usr/local/cuda"}]}
    if p.nccl.get("version"):
        packages["nccl"] = {"require": [f"@{p.nccl['version']}"]}
    if p.nccl.get("plugin"):
        packages["aws-ofi-nccl"] = {"require": [f"@{p.nccl['plugin']}"]}
    return {"spack": {
        "specs": roots(site, p),
        "packages": packages,
        "repos": {"torchmpi": f"{TORCHMPI_DIR}/spack_repo/torchmpi",
                  "builtin": f"{PACKAGES_DIR}/repos/spack_repo/builtin"},
        "develop": {"py-torchmpi": {"spec": f"py-torchmpi@={__version__}",
                                    "path": TORCHMPI_DIR}},
        "concretizer": copy.deepcopy(_CONCRETIZER),
        "config": {"install_tree": {"root": "/opt/software"},
                   "shared_linking": {"type": "runpath"}},
        "view": "/opt/views/view",
    }}


def spack_yaml(site: Site, p: Plan) -> str:
    data = spack_env(site, p)
    lines = [
        f"Container environment for site '{site.name}' (runtime {p.runtime}): built in the",
        "image by the Containerfile beside it; every path is a path inside the image.",
        f"target {p.target}: generic for the site's {site.data['target']}, so the image runs",
        "on any node of the family and builds on any host of it.",
        f"mpi {p.mpi}: " + ("MPICH as CSCS builds it for CE; the CXI hook injects"
                            " libfabric and xpmem under it." if p.runtime == "ce"
                            else "an ABI stand-in; the host's Cray MPICH (lib-abi-mpich)"
                            " replaces it at run time." if p.mpi.startswith("mpich")
                            else "built in the image, nothing injected."),
        "shared_linking runpath: LD_LIBRARY_PATH (the injected host libraries) outranks",
        "the image's own library paths (DT_RPATH would not let it).",
        "externals: only the base image's gcc (/usr) and CUDA (/usr/local/cuda).",
        "concretizer: generic targets, static analysis and no duplicate nodes leave out",
        "of the solve what the requirements exclude (same DAG, faster; docs/performance.md).",
    ]
    return document([comment(*lines), Block(data)], data, "spack.yaml")


# -- Containerfile ---------------------------------------------------------------------------

def _pins() -> tuple[str, str, str]:
    pins = paths.pins()
    clingo = "5.8.3"
    req = paths.root() / "requirements.txt"
    if req.is_file():
        match = re.search(r"^clingo==(\S+)", req.read_text(), re.MULTILINE)
        clingo = match.group(1) if match else clingo
    return pins["TORCHMPI_SPACK_TAG"], pins["TORCHMPI_SPACK_PACKAGES_TAG"], clingo


def base_images(site: Site, p: Plan) -> tuple[str, str]:
    """(build, final) images, pinned: NVIDIA's CUDA images at the site's CUDA release."""
    box = site.data["container"]
    cuda = _cuda_version(site)
    if cuda:
        build = f"nvcr.io/nvidia/cuda:{cuda}-devel-{p.os}"
        final = f"nvcr.io/nvidia/cuda:{cuda}-runtime-{p.os}"
    else:
        build = final = OS_IMAGES[p.os]["cpu"]
    return box.get("base", build), box.get("final", final)


def labels(site: Site, p: Plan) -> dict[str, str]:
    spack, packages, _ = _pins()
    out = {
        "org.torchmpi.version": __version__,
        "org.torchmpi.site": site.name,
        "org.torchmpi.site-sha256": site.sha256,
        "org.torchmpi.spack": spack,
        "org.torchmpi.spack-packages": packages,
        "org.torchmpi.runtime": p.runtime,
        "org.torchmpi.mpi": p.mpi,
        "org.torchmpi.target": p.target,
    }
    if p.nccl.get("version"):
        out["org.torchmpi.nccl"] = p.nccl["version"]
    if p.nccl.get("plugin"):
        out["org.torchmpi.aws-ofi-nccl"] = p.nccl["plugin"]
    return out


Instruction = tuple[str, str]


def containerfile_instructions(site: Site, p: Plan) -> list[Instruction]:
    """The Containerfile as (INSTRUCTION, arguments), the data the text must parse back to."""
    _, _, clingo = _pins()  # the Spack trees come from the build context, at the pins
    build, final = base_images(site, p)
    spack = f"SPACK_PYTHON={SPACK_PYTHON}/bin/python {SPACK_DIR}/bin/spack"
    os_pkgs = ("build-essential gfortran python3 python3-venv git curl ca-certificates"
               " file patch unzip xz-utils bzip2")
    out: list[Instruction] = [
        ("FROM", f"{build} AS bootstrap"),
        ("RUN", ("apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y"
                 f" --no-install-recommends {os_pkgs} && rm -rf /var/lib/apt/lists/*")),
        ("RUN", (f"python3 -m venv {SPACK_PYTHON} && {SPACK_PYTHON}/bin/pip install"
                 f" --no-cache-dir clingo=={clingo}")),
        # Build context (scripts/container-context.sh): the pinned trees, no .git.
        ("COPY", f"spack {SPACK_DIR}"),
        ("COPY", f"spack-packages {PACKAGES_DIR}"),
        ("FROM", "bootstrap AS build"),
        ("COPY", f"torchmpi {TORCHMPI_DIR}"),
        ("COPY", f"spack.yaml {ENV_DIR}/spack.yaml"),
        ("WORKDIR", ENV_DIR),
        ("RUN", (f"{spack} -e . concretize && {spack} -e . install --fail-fast"
                 f" && {spack} -e . gc -y && {spack} -e . env activate --sh -d ."
                 " > activate.sh")),
        ("FROM", f"{final} AS final"),
        ("COPY", "--from=build /opt/software /opt/software"),
        ("COPY", "--from=build /opt/views /opt/views"),
        ("COPY", f"--from=build {ENV_DIR} {ENV_DIR}"),
    ]
    if site.gpu:
        # CSCS known issue: the cuda-dl plugin dlopens the unversioned libcudart.so
        # (eth-cscs/cscs-docs docs/software/container-engine/known-issue.md).
        lib = "/usr/local/cuda/lib64"
        link = (f'test -e {lib}/libcudart.so || ln -s'
                f' "$(ls {lib}/libcudart.so.* | head -n 1)" {lib}/libcudart.so')
        out.append(("RUN", link))
    out.append(("LABEL", " ".join(f"{k}={shlex.quote(v)}" for k, v in labels(site, p).items())))
    out.append(("ENTRYPOINT", '["/bin/bash", "-c", ". ' + ENV_DIR + '/activate.sh && exec'
                              ' \\"$@\\"", "--"]'))
    out.append(("CMD", '["python", "-c", "import torch; print(torch.__version__)"]'))
    return out


def parse_containerfile(text: str) -> list[Instruction]:
    """(INSTRUCTION, arguments) of a Containerfile: comments dropped, continuations joined."""
    out: list[Instruction] = []
    pending = ""
    for line in text.splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        line, pending = pending + line, ""
        word, _, rest = line.strip().partition(" ")
        out.append((word.upper(), rest.strip()))
    return out


def check_containerfile(instructions: list[Instruction]) -> list[str]:
    """What makes a Containerfile unfit: unpinned FROM, unknown stages, NCCL/FI ENV."""
    errors, stages = [], set()
    for word, args in instructions:
        if word == "FROM":
            image, _, name = args.partition(" AS ")
            if image not in stages:
                tag = image.rsplit("/", 1)[-1].partition(":")[2]
                if not tag or tag in ("latest", "develop"):
                    errors.append(f"FROM {image}: not pinned to a release tag")
            stages.add(name.strip())
        elif word == "COPY" and args.startswith("--from="):
            stage = args.split()[0].split("=", 1)[1]
            if stage not in stages:
                errors.append(f"COPY {args}: no earlier stage {stage!r}")
        elif word == "ENV" and re.search(r"(^|\s)(NCCL_|FI_)", args):
            errors.append(f"ENV {args}: NCCL/libfabric settings belong to the descriptor")
    return errors


def containerfile(site: Site, p: Plan) -> str:
    instructions = containerfile_instructions(site, p)
    text = comment(
        f"Image for site '{site.name}': bootstrap (pinned Spack + clingo), build (the",
        "container spack.yaml), final (CUDA runtime + /opt/software, /opt/views).",
        "Build context: `scripts/container-context.sh DIR` puts spack/, spack-packages/",
        "and torchmpi/ beside this file (docs/containers.md).",
        "No NCCL_*/FI_* ENV here: the run-time descriptor sets them (in CE the image's",
        "environment would outrank the host's).",
    ) + "".join(f"{w} {a}\n" for w, a in instructions)
    if parse_containerfile(text) != instructions:
        raise InternalError("Containerfile: the rendered text does not parse back to its"
                        " instructions; nothing was written (a torchmpi bug, please report it)")
    errors = check_containerfile(instructions)
    if errors:
        raise UserError("Containerfile: " + "; ".join(errors))
    return text


# -- run-time descriptors --------------------------------------------------------------------

def image_name(site: Site) -> str:
    return f"torchmpi-{site.name}:{__version__}"


def edf(site: Site, p: Plan) -> dict[str, Any]:
    """CSCS Container Engine environment definition (eth-cscs/cscs-docs
    docs/software/container-engine/edf.md): image, mounts, hook annotations, [env]."""
    rt = runtime.resolve(site.data)
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
    import tomllib

    text = tomli_w.dumps(data)
    if tomllib.loads(text) != data:
        raise InternalError(f"{name}: the rendered TOML does not load back to its data;"
                        " nothing was written (a torchmpi bug, please report it)")
    return text


#: Set by every descriptor: how ``torchmpi doctor`` knows it runs in a container
#: even where the runtime leaves no marker of its own (torchmpi.doctor.container).
MARKER = "TORCHMPI_CONTAINER"


def srun_line(site: Site, rest: str) -> str:
    """``srun --mpi=pmi2`` plus the flags the site's runtime values need, then ``rest``.

    PMI-2: MPICH in a container is wired up through Slurm's PMI-2 (eth-cscs/cscs-docs
    docs/software/communication/mpich.md, "Use PMI-2"); the flags: fabric data
    ``launcher_flags`` (``--network=disable_rdzv_get`` with ``alt_read``)."""
    env = runtime.environment(site.data)
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
              extra: dict[str, str] | None = None) -> list[str]:
    env = {MARKER: engine, **(extra or {}), **runtime.environment(site.data)}
    return [f"{flag} {shlex.quote(f'{k}={v}')}" for k, v in env.items()]


def _in_container(site: Site) -> str:
    """Words put between the image and the user's command (``"$@"``) so that the site's
    ``runtime.prepend_path``/``append_path`` add to the *container's* lists.

    podman, podman-hpc and apptainer's ``-e``/``--env`` only replace a variable, and
    on the host ``$PATH`` is the host's list, not the image's; so a POSIX shell in
    the image runs the same ``export`` lines as runtime.sh, then ``exec``-s the
    command.  Empty where the site adds to no list (the command starts as before).
    """
    rt = runtime.resolve(site.data)
    lines = runtime.shell_lines(runtime.Runtime(prepend_path=rt.prepend_path,
                                                append_path=rt.append_path))
    if not lines:
        return ""
    script = "; ".join([*lines, 'exec "$@"'])
    return f"/bin/sh -c {shlex.quote(script)} torchmpi-paths "


def _command(site: Site) -> str:
    """The end of every ``exec`` line: the image, then the user's command."""
    return f' "$image" {_in_container(site)}"$@"'


def _inject_block(p: Plan, bind_flag: str, env_flag: str) -> list[str]:
    """Shell lines that fill the ``inject`` array: binds, LD_LIBRARY_PATH, LD_PRELOAD."""
    if not (p.binds or p.lib_path or p.preload):
        return ["inject=()  # nothing is injected on this site"]
    lines = ['inject=()', 'if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then']
    for host, inside in p.binds:
        lines.append(f"  inject+=({bind_flag} {shlex.quote(f'{host}:{inside}:ro')})")
    if p.lib_path:
        path = ":".join(p.lib_path)
        lines.append(f"  inject+=({env_flag} {shlex.quote('LD_LIBRARY_PATH=' + path)})")
    if p.preload:
        lines.append(f"  inject+=({env_flag} {shlex.quote('LD_PRELOAD=' + ':'.join(p.preload))})")
    if p.runtime == "apptainer":
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
    if site.data["mpi"].get("cuda_aware", True) and site.gpu:
        modules.append("cuda-mpich")
    what = [f"shifter job header for '{site.name}': NERSC's gpu, nccl-plugin"
            + (", cuda-mpich" if "cuda-mpich" in modules else "") + " modules inject",
            f"the host's stack; the image's NCCL {p.nccl.get('version')} pairs with the",
            f"plugin {p.nccl.get('plugin')} they mount. Source it, then: srun shifter python ..."]
    body = [f"#SBATCH --image={image_name(site)}", f"#SBATCH --module={','.join(modules)}",
            f"export {MARKER}=shifter",
            *[f"export {k}={shlex.quote(v)}" for k, v in runtime.environment(site.data).items()]]
    return "\n".join(["#!/usr/bin/env bash", *comment(*what).splitlines(), *body]) + "\n"


def _check_shell(name: str, text: str) -> None:
    bash = shutil.which("bash")
    if not bash:
        return
    proc = subprocess.run([bash, "-n"], input=text, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise InternalError(f"{name}: the rendered text does not parse ({proc.stderr.strip()});"
                        " nothing was written (a torchmpi bug, please report it)")


def descriptors(site: Site, p: Plan) -> dict[str, str]:
    out: dict[str, str] = {}
    if p.runtime == "ce":
        out[f"{site.name}.toml"] = edf_text(site, p)
    elif p.runtime == "podman-hpc":
        module = podman_hpc_module(site, p)
        out["torchmpi-podman-hpc.yaml"] = document([Block(module)], module,
                                                   "torchmpi-podman-hpc.yaml")
        out["run.sh"] = podman_hpc_sh(site, p)
        out["run-podman.sh"] = podman_sh(site, p)
    elif p.runtime == "shifter":
        out["shifter.sh"] = shifter_sh(site, p)
    elif p.runtime == "apptainer":
        out["run.sh"] = apptainer_sh(site, p)
        out["run-podman.sh"] = podman_sh(site, p)
    else:
        out["run.sh"] = podman_sh(site, p, devices=True)
    for name, text in out.items():
        if name.endswith(".sh"):
            _check_shell(name, text)
    return out


# -- the whole set ---------------------------------------------------------------------------

def _header(site: Site, body: str, shebang: bool) -> tuple[str, str]:
    """(text before the body's first line, body without it): the provenance header of
    :func:`torchmpi.render.header`, after a script's ``#!`` line."""
    from torchmpi.render import site_label

    spack, packages, _ = _pins()
    first = ""
    if shebang and body.startswith("#!"):
        first, _, body = body.partition("\n")
        first += "\n"
    head = comment(
        f"Rendered by torchmpi {__version__} from {site_label(site)}; do not edit by hand:",
        f"change the site file and run `torchmpi container {site.name}` (docs/containers.md).",
        f"spack {spack}, builtin spack-packages {packages}",
        f"site-sha256: {site.sha256}",
        f"body-sha256: {hashlib.sha256(body.encode()).hexdigest()}",
    )
    return first + head, body


def render(site: Site) -> dict[str, str]:
    """File name -> full text, each parsed back; refuses before anything is built."""
    p = plan(site)
    bodies = {"spack.yaml": spack_yaml(site, p), "Containerfile": containerfile(site, p),
              **descriptors(site, p)}
    out = {}
    for name, body in bodies.items():
        head, rest = _header(site, body, name.endswith(".sh"))
        out[name] = head + rest
    return out


def default_outdir(site: Site) -> Path:
    return paths.root() / "containers" / site.name
