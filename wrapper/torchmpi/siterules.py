"""Site-file mistakes that a solve would find only after minutes, found at load.

Each rule reads the validated data and returns ``(key path, message)``
pairs; :func:`torchmpi.site.validate` turns them into file:line:column
errors.  Every rule here was a solve or a build that failed late:

* a Slingshot libfabric without the ``cxi`` provider: "Cannot build
  libfabric, since it is configured buildable:false" after a two-minute solve;
* a ``cuda_arch`` Cray MPICH has no GTL for (``90a``: "no GTL support could be
  found" in the py-torch build), one the site's CUDA cannot compile for, or one
  that is not the GPU model's;
* a compiler version that the compiler's own paths contradict (typically
  taken from a module name such as ``gcc-native/12.3``; in a Spack install
  tree only the innermost ``<name>-<version>-<hash>`` counts, and
  ``path_version: false`` turns the rule off for a layout it misreads);
* a compiler ``target`` other than the site's (``aarch64`` for a
  ``neoverse_v2`` site: "Version requirement ... on c for gcc cannot match any
  known version", since every package, the compiler included, must have the
  site's target);
* vendor CPU names (``grace``, ``milan``) for archspec's (``neoverse_v2``, ``zen3``);
* ``kind: mpich`` with a version MPICH never had (ParaStation MPI's 5.10.0-1);
* the centre's MPI on a GPU site declared without ``+cuda`` ("py-torch
  +cuda_aware_mpi needs a CUDA-aware MPI" after minutes of solving);
* prefixes under ``/user-environment`` without a ``uenv`` (CSCS's squashfs
  stack is mounted there only inside ``uenv start`` or ``srun --uenv``; the
  directory is empty otherwise, cscs-docs docs/software/uenv/using.md), or a
  ``uenv`` on a site with nothing there.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from torchmpi import paths

Problem = tuple[tuple, str]

#: CPU names from vendors' product pages, for the archspec microarchitecture
#: (archspec-json microarchitectures.json) of that CPU.  archspec has none of
#: these names, and difflib finds no close archspec name for them.
VENDOR_CPUS = {
    "grace": "neoverse_v2",  # NVIDIA Grace: Arm Neoverse V2 cores
    "gh200": "neoverse_v2",
    "gb200": "neoverse_v2",
    "graviton2": "neoverse_n1",
    "graviton3": "neoverse_v1",
    "graviton4": "neoverse_v2",
    "naples": "zen",
    "rome": "zen2",
    "milan": "zen3",
    "trento": "zen3",  # Frontier's and LUMI-G's custom EPYC 7A53: Zen 3
    "genoa": "zen4",
    "bergamo": "zen4",
    "turin": "zen5",
    "skylake-sp": "skylake_avx512",
    "cascade-lake": "cascadelake",
    "ice-lake": "icelake",
    "sapphire-rapids": "sapphirerapids",
    "spr": "sapphirerapids",
}


def vendor_hint(value: str) -> str | None:
    """The archspec name for a vendor's CPU name (``grace`` -> ``neoverse_v2``), or None."""
    key = re.sub(r"[\s_]+", "-", value.strip().lower())
    for prefix in ("amd-", "epyc-", "nvidia-", "intel-", "xeon-", "aws-"):
        key = key.removeprefix(prefix)
    return VENDOR_CPUS.get(key) or VENDOR_CPUS.get(key.replace("-", ""))


#: cuda_arch values builtin cray-mpich's ``gtl_lib`` has Cray's CUDA GTL for
#: (spack-packages v2026.06.0, repos/spack_repo/builtin/packages/cray_mpich/package.py).
CRAY_GTL_ARCHS = ("70", "80", "90")

#: GPU models by the start of their name, and their compute capability
#: (NVIDIA, developer.nvidia.com/cuda-gpus).  Longest names first.
GPU_ARCHS = (
    ("gh200", "90"), ("gb200", "100"), ("h100", "90"), ("h200", "90"), ("b200", "100"),
    ("a100", "80"), ("a30", "80"), ("a40", "86"), ("a10", "86"), ("l40", "89"),
    ("l4", "89"), ("v100", "70"), ("p100", "60"),
)


def _vtuple(text: str) -> tuple[int, ...]:
    return tuple(int(p) for p in re.findall(r"\d+", text))


@cache
def cuda_ranges() -> dict[str, tuple[str, str]]:
    """cuda_arch -> (lowest, highest) CUDA, from builtin's CudaPackage; empty without it.

    Read from ``build_systems/cuda.py`` of the pinned builtin repository
    (``depends_on("cuda@LO:HI", when="cuda_arch=X")``), so the rule follows
    the pin rather than a copy.
    """
    path = paths.builtin_repo() / "build_systems" / "cuda.py"
    try:
        text = path.read_text()
    except OSError:
        return {}
    pattern = r'depends_on\("cuda@([\d.]*):?([\d.]*)", when="cuda_arch=(\w+)"\)'
    out = {}
    for lo, hi, arch in re.findall(pattern, text):
        out[arch] = (lo, hi)
    return out


def cuda_archs(gpu: dict[str, Any]) -> list[str]:
    """``gpu.cuda_arch`` as a list of strings: ``80`` -> ``['80']``; ``[80, 86]`` and
    ``'80,86'`` (Spack's ``cuda_arch=80,86``) -> ``['80', '86']``, for a site with
    several GPU models."""
    value = gpu.get("cuda_arch")
    items = value if isinstance(value, list) else str(value).split(",")
    return list(dict.fromkeys(str(v) for v in items))


#: One GPU model's name anywhere in ``gpu.model``, longest first (a100 before a10).
_GPU_NAMES = re.compile(
    r"\b(" + "|".join(sorted((n for n, _ in GPU_ARCHS), key=len, reverse=True)) + ")")


def _models(model: str) -> list[tuple[str, str]]:
    """(name, compute capability) of each GPU model ``gpu.model`` names, in order."""
    found = dict.fromkeys(m.group(1) for m in _GPU_NAMES.finditer(model.lower()))
    return [(n, dict(GPU_ARCHS)[n]) for n in found]


def _base(arch: str) -> str:
    """The compute capability of an architecture: ``90a`` -> ``90``."""
    found = re.match(r"\d+", arch)
    return found.group() if found else arch


def _cuda_arch(data: dict[str, Any]) -> list[Problem]:
    gpu = data.get("gpu")
    if not isinstance(gpu, dict) or "cuda_arch" not in gpu:
        return []
    archs = cuda_archs(gpu)
    where = ("gpu", "cuda_arch")
    out: list[Problem] = []
    mpi = data.get("mpi") or {}
    for arch in archs:
        if (mpi.get("kind") == "cray-mpich" and mpi.get("cuda_aware", True)
                and arch not in CRAY_GTL_ARCHS):
            base = _base(arch)
            hint = f" ({base} is the same GPU)" if base in CRAY_GTL_ARCHS else ""
            out.append((where, (
                f"{arch!r}: builtin cray-mpich has Cray's CUDA GTL only for cuda_arch"
                f" {', '.join(CRAY_GTL_ARCHS)}, so the py-torch build would stop with \"no GTL"
                f" support could be found\"; allowed: {', '.join(CRAY_GTL_ARCHS)}{hint}, or"
                " mpi.cuda_aware: false (docs/sites.md)")))
    models = _models(str(gpu.get("model") or ""))
    wanted = list(dict.fromkeys(cc for _, cc in models))
    if len(archs) == 1 and len(models) == 1:
        arch, want = archs[0], wanted[0]
        if _base(arch) != want:
            out.append((where, (
                f"{arch!r} is not the compute capability of the {gpu['model']}"
                f" (NVIDIA: {want}, developer.nvidia.com/cuda-gpus); allowed: {want}")))
    elif models:
        for arch in archs:
            if _base(arch) not in wanted:
                out.append((where, (
                    f"{arch!r} is not the compute capability of any GPU model of"
                    f" {gpu['model']} (NVIDIA: {', '.join(wanted)},"
                    f" developer.nvidia.com/cuda-gpus); allowed: {', '.join(wanted)}")))
        for name, want in models:
            if want not in {_base(a) for a in archs}:
                out.append((where, (
                    f"the NVIDIA {name.upper()} in the model needs {want}, which"
                    f" cuda_arch {','.join(archs)} lacks (developer.nvidia.com/cuda-gpus);"
                    f" allowed: {', '.join(wanted)}")))
    cuda = (gpu.get("cuda") or {}).get("spec", "")
    found = re.match(r"cuda@([\d.]+)", cuda)
    for arch in archs:
        span = cuda_ranges().get(arch)
        if not (found and span):
            continue
        have, (lo, hi) = _vtuple(found.group(1)), span
        # A range's end matches every release it prefixes (Spack: @:12.9 takes 12.9.1).
        too_old = lo and have < _vtuple(lo)
        too_new = hi and have[:len(_vtuple(hi))] > _vtuple(hi)
        if too_old or too_new:
            allowed = f"{lo or 'any'} to {hi}" if hi else f"{lo} or newer"
            out.append((where, (
                f"{arch!r} needs CUDA {allowed} (builtin CudaPackage), and the site's CUDA is"
                f" {found.group(1)}; allowed: a cuda_arch this CUDA compiles for, or the"
                " CUDA that does")))
    return out


@cache
def mpich_series() -> tuple[tuple[int, int], ...]:
    """MPICH's release series (MAJOR, MINOR), from builtin mpich's ``version()`` lines.

    Read from the pinned builtin repository (``packages/mpich/package.py``), so
    the rule follows the pin; empty without it.  MPICH went from MPICH2 1.5 to
    3.0 (2012), and has had 3.0 to 3.4, 4.0 to 4.3 and 5.0.
    """
    path = paths.builtin_repo() / "packages" / "mpich" / "package.py"
    try:
        text = path.read_text()
    except OSError:
        return ()
    found = {_vtuple(v)[:2] for v in re.findall(r'version\("(\d+(?:\.\d+)*)"', text)}
    return tuple(sorted(v if len(v) == 2 else (v[0], 0) for v in found))


def _spans(series: tuple[tuple[int, int], ...]) -> str:
    """``3.0 to 3.4, 4.0 to 4.3, 5.0``: the series, one span per major version."""
    out = []
    for major in dict.fromkeys(m for m, _ in series):
        minors = [n for m, n in series if m == major]
        lo, hi = min(minors), max(minors)
        out.append(f"{major}.{lo}" + (f" to {major}.{hi}" if hi != lo else ""))
    return ", ".join(out)


def _mpich_version(data: dict[str, Any]) -> list[Problem]:
    """``kind: mpich`` with a version MPICH never had, typically an MPICH derivative's.

    ParaStation MPI (JSC; MPICH-based) numbers its releases 5.10.0-1: declared
    as mpich it would render ``mpich@5.10.0-1``, a version the solver takes at
    face value for an external, and every rule about MPICH would apply to it.
    Allowed: a known series, a point release after the pin (4.3.9), the next
    minor series (5.1) or the next major (6.0).
    """
    mpi = data.get("mpi") or {}
    version = mpi.get("version")
    series = mpich_series()
    if mpi.get("kind") != "mpich" or not version or not series:
        return []
    have = _vtuple(str(version))[:2]
    have = have if len(have) == 2 else (have[0], 0)
    (top_major, top_minor) = series[-1]
    if "-" not in str(version) and have in (*series, (top_major, top_minor + 1),
                                            (top_major + 1, 0)):
        return []
    return [(("mpi", "version"), (
        f"{version!r} is no MPICH release (builtin mpich: {_spans(series)}); an MPI"
        " derived from MPICH with its own numbering (ParaStation MPI 5.10.0-1, MVAPICH,"
        " Intel MPI) is not mpich to Spack and has no kind here; allowed: an MPICH"
        f" release: {_spans(series)}, or {top_major}.{top_minor + 1} or {top_major + 1}.0"
        " after the pin, as `mpichversion` prints it")),
    ]


def _variant_names(variants: str) -> list[str]:
    """The variant names in ``+cuda ~java fabrics=ucx``: cuda, java, fabrics."""
    return [re.split(r"=", v.lstrip("+~"))[0] for v in variants.split()]


def _mpi_variants(data: dict[str, Any]) -> list[Problem]:
    """The centre's MPI declared without the variants it has, or with some it cannot take.

    A centre's CUDA-aware Open MPI declared under ``mpi:`` without ``+cuda``
    rendered a ``~cuda`` external (the variant's default) and the solve
    stopped after minutes: "py-torch +cuda_aware_mpi needs a CUDA-aware MPI".
    """
    mpi = data.get("mpi") or {}
    where = ("mpi", "variants")
    variants = mpi.get("variants")
    kind = mpi.get("kind")
    external = bool(mpi.get("prefix") or mpi.get("modules"))
    if variants is not None:
        names = _variant_names(variants)
        if kind == "cray-mpich":
            return [(where, (
                "cray-mpich's variants are the tool's: +cuda cuda_arch=<N> from gpu and"
                " mpi.cuda_aware (Cray's GTL must match them); allowed: no variants"))]
        if not external:
            return [(where, (
                "variants describe the centre's MPI external (mpi.prefix or mpi.modules);"
                f" a {kind} Spack builds takes the tool's; allowed: no variants, or the"
                " centre's prefix/modules with the variants its MPI has"))]
        twice = sorted({n for n in names if names.count(n) > 1})
        if twice:
            return [(where, f"names {', '.join(twice)} twice; allowed: each variant once")]
    gpu = isinstance(data.get("gpu"), dict)
    cuda_aware = gpu and mpi.get("cuda_aware", True)
    if (cuda_aware and external and kind in ("openmpi", "openmpi-cuda", "mpich")
            and "+cuda" not in (variants or "").split()):
        said = f"says {variants!r}" if variants else "has no variants, so it renders ~cuda"
        return [(where, (
            f"the centre's {kind} {said}, and py-torch +cuda_aware_mpi needs a CUDA-aware"
            " MPI: the solve would stop after minutes; allowed: variants: +cuda (with the"
            " others it has) where the centre's MPI is CUDA-aware (Open MPI: `ompi_info"
            " --parsable --all | grep mpi_built_with_cuda_support` prints :true), or"
            " mpi.cuda_aware: false"))]
    return []


#: Container runtimes whose descriptor binds the host's Cray MPICH (lib-abi-mpich)
#: and libfabric into the image (NCAR's apptainer bind model, NERSC's podman-hpc
#: ``--mpi`` and shifter's MPICH module); the same list as
#: :data:`torchmpi.container.INJECTS_CRAY` (tests/test_site_rules.py checks it).
INJECTS_CRAY = ("podman-hpc", "shifter", "apptainer")


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
    if rt in INJECTS_CRAY and kind != "cray-mpich":
        return [(where, (
            f"{rt} injects the host's Cray MPICH (lib-abi-mpich) and libfabric, and mpi.kind"
            f" is {kind}: the hybrid model with another MPI is not supported here; allowed:"
            " podman (the image's own MPI; off Slingshot), or ce on Slingshot"
            " (docs/containers.md)"))]
    if rt in INJECTS_CRAY and not (data.get("mpi") or {}).get("prefix"):
        return [(where, (
            f"{rt} binds Cray MPICH's lib-abi-mpich from mpi.prefix, which the site file"
            " does not give; allowed: podman, or mpi.prefix"))]
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


#: Where a uenv is mounted unless a label says otherwise (cscs-docs
#: docs/software/uenv/using.md: "most often /user-environment"; eth-cscs/cscs-reframe-tests
#: config/utilities/uenv.py ``_UENV_MOUNT_DEFAULT``).
UENV_MOUNT = "/user-environment"


def _under_uenv_mount(node: Any, path: tuple = ()) -> list[tuple]:
    """Key paths of every string in ``node`` that is a path under :data:`UENV_MOUNT`."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _under_uenv_mount(v, path + (k,))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _under_uenv_mount(v, path + (i,))]
    if isinstance(node, str) and (node == UENV_MOUNT or node.startswith(UENV_MOUNT + "/")):
        return [path]
    return []


def _uenv(data: dict[str, Any]) -> list[Problem]:
    """A uenv and the prefixes that need it come together.

    Prefixes under /user-environment without ``uenv``: nothing starts the uenv, so
    every compiler, external and runtime path there is missing when the job runs.
    ``uenv`` with nothing there: the site would mount a stack it does not use.
    """
    inside = _under_uenv_mount({k: v for k, v in data.items() if k != "uenv"})
    if data.get("uenv") is None and inside:
        return [(inside[0], (
            f"lies under {UENV_MOUNT}, which holds software only inside a started uenv,"
            " and the site file has no uenv to start (it would be empty when the job"
            f" runs; {len(inside)} value(s) there); allowed: uenv: {{image:"
            " NAME/VERSION[:TAG], view: VIEW}, or paths outside " + UENV_MOUNT))]
    if isinstance(data.get("uenv"), dict) and not inside:
        return [(("uenv",), (
            f"nothing in the site file lies under {UENV_MOUNT}, where the uenv is"
            " mounted, so starting it serves nothing here; allowed: no uenv key, or"
            f" prefixes under {UENV_MOUNT}"))]
    return []


def _libfabric(data: dict[str, Any]) -> list[Problem]:
    lib = data.get("libfabric")
    if data.get("fabric") != "slingshot" or not isinstance(lib, dict):
        return []
    spec = str(lib.get("spec", ""))
    fabrics = re.search(r"\bfabrics=(\S+)", spec)
    if fabrics and "cxi" in fabrics.group(1).split(","):
        return []
    return [(("libfabric", "spec"), (
        f"{spec!r} lacks the cxi provider: nccl-ss11 needs libfabric fabrics=cxi and the"
        " site's libfabric is not buildable, so the solve would fail after minutes (\"Cannot"
        " build libfabric\"); allowed: the spec with fabrics=cxi (and the other providers it"
        " has), e.g. libfabric@1.15.2.0 fabrics=cxi"))]


#: A gcc version inside a path: ``gcc/12.2.0/``, ``gcc-12.2.0``, ``gcc-12``.
_PATH_VERSION = re.compile(r"gcc[-/@](\d+(?:\.\d+){0,2})(?![\d.]*\d)")


#: A path component Spack's default install layout gives a package:
#: ``<name>-<version>-<hash>`` (``{name}-{version}-{hash}`` in
#: spack/spack lib/spack/spack/directory_layout.py; the hash is base32,
#: possibly shortened by a projection such as ``{hash:7}``).
_SPACK_DIR = re.compile(r"[a-z0-9][a-z0-9_-]*?-\d[\w.]*-[a-z0-9]{7,32}")


def _own_part(place: str) -> str:
    """The part of ``place`` that can name its own compiler's version.

    In a Spack install tree a gcc lives at ``.../gcc-8.5.0/gcc-11.4.0-<hash>``:
    the directory before the innermost ``<name>-<version>-<hash>`` names the
    compiler that built it, not this one, so only that component and what
    follows it are read.
    """
    parts = place.split("/")
    for i in range(len(parts) - 1, -1, -1):
        if _SPACK_DIR.fullmatch(parts[i]):
            return "/".join(parts[i:])
    return place


def _compilers(data: dict[str, Any]) -> list[Problem]:
    out: list[Problem] = []
    comps = data.get("compilers")
    if not isinstance(comps, list):
        return out
    target = data.get("target")
    for i, comp in enumerate(comps):
        spec = str(comp.get("spec", ""))
        version = spec.partition("@")[2]
        places = [comp.get("prefix") or ""] + list((comp.get("languages") or {}).values())
        if comp.get("path_version") is False:  # the site says its paths mislead the rule
            places = []
        for place in places:
            for seen in _PATH_VERSION.findall(_own_part(str(place))):
                if _vtuple(version)[:len(_vtuple(seen))] == _vtuple(seen):
                    continue
                taken = [m for m in comp.get("modules") or []
                         if _vtuple(m.rpartition("/")[2])
                         and _vtuple(version)[:len(_vtuple(m.rpartition("/")[2]))]
                         == _vtuple(m.rpartition("/")[2])]
                why = f" (it looks taken from the module {taken[0]})" if taken else ""
                out.append(((("compilers", i, "spec")), (
                    f"{spec}{why} contradicts {place}, a gcc {seen}; allowed: the version"
                    f" `{(comp.get('languages') or {}).get('c', 'gcc')} -dumpfullversion`"
                    " prints on the site")))
                break
            else:
                continue
            break
        ctarget = comp.get("target")
        known = ctarget in _archspec_names()  # an unknown name has its own error
        if known and target not in (None, "auto") and ctarget != target:
            out.append((("compilers", i, "target"), (
                f"{ctarget!r} differs from the site's target {target!r}: packages.yaml requires"
                f" target={target} of every package, the compiler's external included, so"
                " the solve finds no gcc (\"Version requirement ... on c for gcc cannot match"
                f" any known version\"); allowed: {target}")))
    return out


def _archspec_names() -> set[str]:
    import archspec.cpu

    return set(archspec.cpu.TARGETS)


def problems(data: dict[str, Any]) -> list[Problem]:
    """Every mistake of these kinds in a schema-valid site file."""
    return [*_libfabric(data), *_cuda_arch(data), *_compilers(data), *_mpich_version(data)]


def runtime_problems(data: dict[str, Any]) -> list[Problem]:
    """The mistakes found without the package repositories: applied by every loader,
    an installed tool's doctor included (:func:`problems` needs the repositories)."""
    return [*_mpi_variants(data), *_container(data), *_uenv(data)]
