"""modules.yaml of a site: module layout, built as data.

The py-torch-mpi module's ``environment`` is :func:`torchmpi.runtime.resolve`,
the one mapping runtime.sh and spack.yaml ``env_vars`` render too.
"""

from __future__ import annotations

import textwrap
from typing import Any

from torchmpi import gpuvendor
from torchmpi.site import Site
from torchmpi.yamltext import Block, Part, comment


def projections(system: str, several_torches: bool = False,
                rocm: bool = False) -> dict[str, str]:
    """Readable module names, no hashes: ``py-torch-mpi/2.9.1-cuda12.2.1``.

    The torch version names py-torch-mpi (its own version is the bundle's).
    Tcl has no hierarchy, so there the MPI is part of the name.  Order matters:
    Spack uses the first key a spec satisfies.
    With several torch releases (site key ``torch``), every other package
    built on torch (py-torchvision, ...) exists once per release: its name
    carries the torch version too, or two module files would have one name.
    An AMD site's py-torch-mpi names its ROCm (HIP) release instead of CUDA's.
    """
    suffix = "-{^mpi.name}" if system == "tcl" else ""
    out = {"py-torch-mpi+rocm": "{name}/{^py-torch.version}-rocm{^hip.version}" + suffix} \
        if rocm else {}
    out |= {
        "py-torch-mpi+cuda": "{name}/{^py-torch.version}-cuda{^cuda.version}" + suffix,
        "py-torch-mpi": "{name}/{^py-torch.version}" + suffix,
    }
    if several_torches:
        out["^py-torch"] = "{name}/{version}-torch{^py-torch.version}" + suffix
    out["all"] = "{name}/{version}"
    return out


def system(data: dict[str, Any]) -> str:
    return data["install"]["module_system"]


def centre_mpi_modules(data: dict[str, Any]) -> list[str]:
    """The centre's own MPI modules (the site file's ``mpi.modules``), or none.

    Where the centre provides the MPI as a module (Cray PE's ``cray-mpich/<v>``,
    loaded by default on NCAR's Derecho), the tree has no MPI layer: the
    centre's module opens none of it (see :func:`centre_externals`).
    """
    mpi = data.get("mpi") or {}
    return [str(m) for m in mpi.get("modules") or []]


def _spec_head(spec: str) -> str:
    """``name@version`` of an external's spec (``cuda@12.2.1``), its variants dropped."""
    return spec.split()[0]


def centre_externals(data: dict[str, Any]) -> list[tuple[str, list[str], bool]]:
    """Every external the site file declares with a centre module, as
    ``(spec, modules, loaded)``: ``spec`` is excluded from the tree, and
    ``loaded`` says whether py-torch-mpi's module loads ``modules``.

    No module of this tree shadows a centre module: Lmod loads one module per
    name, and a ``cuda/12.2.1-<hash>`` of this tree (hidden, autoloaded by
    py-torch's module) took the place of the centre's ``cuda/12.2.1``; a
    ``cray-mpich`` one, before any was excluded, that of NCAR's default
    cray-mpich.  NCAR's own Spack modules exclude the externals another party
    provides modules for (cray-mpich, cray-libsci, libfabric: HPE's Cray PE;
    NCAR/spack-derecho, branch 23.09, config/modules.yaml ``exclude:``), and
    Spack never autoloads an excluded module.  So py-torch-mpi ``load``s the
    centre's modules in their place (Lmod ``depends_on``: a no-op when loaded
    already, a swap when another version is), for what it needs at run time,
    i.e. what Spack's ``autoload: direct`` (link and run dependencies) loaded
    before:

    * the MPI and libfabric: the libraries its NCCL plugin and MPI run on;
    * CUDA and cuDNN: RPATHed, but at NCAR a module built on them loads
      them (config/modules.yaml there writes modules for its cuda and cudnn
      externals, the cudnn one only to put its library on LD_LIBRARY_PATH,
      and keeps Spack's autoload, turning it off only for a few packages
      such as cdo and nco), and NCAR's CUDA module puts
      ``nvcc`` on PATH (its ``prefix_inspections``), where torch's C++/CUDA
      extensions find CUDA without ``CUDA_HOME`` (pytorch/pytorch
      torch/utils/cpp_extension.py, ``_find_cuda_home``);
    * a ``python`` in ``externals``: py-torch-mpi's direct run dependency,
      the interpreter users run (py-torch-mpi/package.py);
    * an AMD site's ROCm (``gpu.rocm``): one centre module (OLCF's
      ``rocm/7.1.1``) for the several Spack packages it is declared as
      (``data/gpu_vendors.yaml``); hip and the HSA runtime are what py-torch,
      RCCL and the plugin link, and a ``hip/7.1.1-<hash>`` of this tree would
      be unknown to Lmod (excluded) yet autoloaded, as real Lmod showed.

    Not loaded, only excluded: a compiler's modules (a build dependency, never
    autoloaded; its run-time libraries come RPATHed with gcc-runtime) and any
    other ``externals`` entry (reused for the build; its libraries are
    RPATHed).  The spec excluded is the external's ``name@version``, so a
    buildable one the solver builds at another version keeps its module.
    An external without a centre module keeps its (hidden) module of this
    tree: nothing shadows, and autoload needs it, as NCAR writes modules
    for its own cuda and cudnn externals.
    """
    out: list[tuple[str, list[str], bool]] = []

    def add(spec: str, ext: dict[str, Any], loaded: bool) -> None:
        modules = [str(m) for m in ext.get("modules") or []]
        if modules:
            out.append((_spec_head(spec), modules, loaded))

    mpi = data.get("mpi") or {}
    add(mpi["kind"] + (f"@{mpi['version']}" if mpi.get("version") else ""), mpi, True)
    for ext in (data.get("libfabric") or {},
                *[((data.get("gpu") or {}).get(k) or {}) for k in ("cuda", "cudnn")]):
        if ext:
            add(ext["spec"], ext, True)
    gpu = data.get("gpu")
    rocm = gpu.get("rocm") if isinstance(gpu, dict) else None
    if isinstance(rocm, dict):
        for name in gpuvendor.table()["amd"]["rocm_components"]:
            add(f"{name}@{rocm['version']}", rocm, True)
    extra = data.get("externals")
    for ext in extra if isinstance(extra, list) else []:
        add(ext["spec"], ext, _spec_head(ext["spec"]).split("@")[0] == "python")
    compilers = data.get("compilers")
    for comp in compilers if isinstance(compilers, list) else []:
        add(comp["spec"], comp, False)
    return out


def centre_loads(data: dict[str, Any]) -> list[str]:
    """The centre modules py-torch-mpi's module loads, in order, once each."""
    out: list[str] = []
    for _, modules, loaded in centre_externals(data):
        out += [m for m in modules if loaded and m not in out]
    return out


def config(site: Site) -> dict[str, Any]:
    """The ``<system>:`` mapping under ``modules: default:``."""
    data = site.data
    system_ = system(data)
    centre_mpi = centre_mpi_modules(data)
    excluded = [spec for spec, _, _ in centre_externals(data)]
    out: dict[str, Any] = {}
    if system_ == "lmod":
        compilers = data["compilers"] if isinstance(data["compilers"], list) else []
        out["core_compilers"] = [c["spec"] for c in compilers]
        if centre_mpi:
            # `hierarchy::` (quoted key 'hierarchy:'): an empty list would merge
            # with Spack's default [mpi] (etc/spack/defaults/base/modules.yaml).
            out["hierarchy:"] = []
        else:
            out["hierarchy"] = ["mpi"]
    if excluded:
        out["exclude"] = excluded
    out["hash_length"] = 0
    out["hide_implicits"] = True
    out["all"] = {"autoload": "direct"}
    several = len((data.get("torch") or {}).get("versions") or []) > 1
    amd = isinstance(data.get("gpu"), dict) and data["gpu"].get("vendor") == "amd"
    out["projections"] = projections(system_, several, rocm=amd)
    torch: dict[str, Any] = {}
    env = site.runtime.spack()
    if env:
        torch["environment"] = env
    loads = centre_loads(data)
    if loads:
        torch["load"] = loads
    if torch:
        out["py-torch-mpi"] = torch
    return out


def parts(site: Site) -> tuple[list[Part], dict[str, Any]]:
    """The modules.yaml text parts and the data they must load back to."""
    data = site.data
    system_ = system(data)
    centre = centre_mpi_modules(data)
    hint = site.mpi_module
    if centre:
        hint = f"the centre's {' '.join(centre)}, which it loads itself"
    elif system_ == "lmod":
        hint = f"module load {hint}"
    else:
        hint = f"built against {hint}"
    root = (data.get("install") or {}).get("modules_root")
    default: dict[str, Any] = {}
    if root:
        default["roots"] = {system_: root}
    # `enable::` (quoted key 'enable:') replaces the lower scopes' list.
    default["enable:"] = [system_]
    default[system_] = config(site)
    expected = {"modules": {"default": default}}
    text: list[Part] = [
        comment(
            f"Module files for '{site.name}' ({system_}).  One module a user picks:",
            f"py-torch-mpi, {'on' if centre else 'under'} the site's MPI ({hint}).",
            "Its `environment` is the site's runtime variables (fabric defaults and",
            "`runtime` of the site file), the same spack.yaml's `env_vars` gives",
            "`spack env activate`; it is applied after the autoloaded dependencies'",
            "package defaults, so the site wins (docs/admins.md).",
            "`enable:` (Spack's `enable::`) replaces the lower scopes' list.",
        ),
    ]
    uenv = data.get("uenv")
    if uenv:
        # Lmod cannot mount a squashfs image and Spack's modules.yaml has no help
        # text per site, so the prerequisite is said here and checked by the doctor.
        text.append(comment(
            "Every prefix of this site lies in CSCS's uenv, mounted at",
            "/user-environment only inside it (Lmod cannot mount it): first",
            f"`uenv start {uenv['image']} --view={uenv['view']}`, or in a job",
            f"`#SBATCH --uenv={uenv['image']}` and `#SBATCH --view={uenv['view']}`",
            "(cscs-docs docs/software/uenv/using.md); `torchmpi doctor` checks it.",
        ))
    externals = centre_externals(data)
    if externals:
        loads = centre_loads(data) or ["none here"]
        text.append(comment(
            "exclude: the externals the site file gives a centre module (`modules:`),",
            "so no module of this tree shadows the centre's (NCAR's own Spack modules",
            "exclude cray-mpich and libfabric the same way).  py-torch-mpi's `load`",
            "names the centre's modules it needs at run time instead:",
            *textwrap.wrap(", ".join(loads) + ".", 76),
        ))
    if system_ == "lmod":
        layer = ("hierarchy: none, the centre's MPI module opens no layer of this tree."
                 if centre else "hierarchy: py-torch-mpi appears after its MPI module is loaded.")
        text.append(comment(
            "core_compilers is explicit, or Spack guesses and rewrites the file;",
            layer,
            "hide_implicits: dependencies " + ("not excluded " if externals else "")
            + "get modules (autoload needs them) but",
            "`module avail` hides them.",
        ))
    text.append(Block(expected))
    return text, expected
