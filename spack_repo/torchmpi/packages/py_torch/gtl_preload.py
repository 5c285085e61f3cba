# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Cray's GPU Transport Layer, loaded before libmpi where a GPU driver is present.

Installed by torchmpi's ``py-torch`` and ``py-mpi4py`` (``+cuda_aware_mpi`` on
cray-mpich) as ``_torchmpi_gtl.py`` in the ``torch`` and ``mpi4py`` packages,
and imported first by their ``__init__.py``: Python runs it before the
extension that pulls in libmpi is loaded.  It reaches each build as a patch that
creates it in the stage (``as_patch.py``), so ``spack spec`` shows it
(``patches=``) and the package's install step runs that staged copy.

Why not a link-time dependency (docs/design.md, "GTL without a driver"):
``libmpi_gtl_cuda.so`` calls the CUDA driver (``cu*`` symbols, from
``libcuda.so.1``, which only GPU nodes have) and some builds NEED
``libcuda.so.1``.  Python loads extensions with ``RTLD_NOW``, so a torch that
NEEDs GTL fails to import on a login or build node either way.  Here GTL is
loaded only after the driver loaded, both ``RTLD_GLOBAL``: on a GPU node the
process has GTL before libmpi, as with ``LD_PRELOAD`` (NERSC podman-hpc's
cuda-mpich module) or a link; on a node without a driver nothing is loaded
and ``MPI_Init`` with ``MPICH_GPU_SUPPORT_ENABLED=1`` says GTL is missing,
which is true there.

GTL also calls libraries it does not NEED, depending on the release: the C++
runtime (cray-mpich 8.1.21, eth-cscs/stackinator#9), the CUDA runtime (8.1.27,
eth-cscs/stackinator#158), or it NEEDs ``libcudart.so.12`` that no search path
of a plain job names (8.1.30, spectral-compute/scale-validation#66).  So the
libraries the build used for those (its ``libstdc++`` and ``libcudart``,
:func:`build_needs`) are recorded at install in ``NEEDS`` and loaded
``RTLD_GLOBAL`` between the driver and GTL; a GTL that still does not load is
an error that names the symbol and the library that provides it.

AMD GPUs (``py-torch +rocm``): the GTL is ``libmpi_gtl_hsa`` and the runtime
it calls is ROCm's, not a driver library of its own: ROCr's HSA runtime
``libhsa-runtime64.so.1`` (which drives the amdgpu kernel driver) and HIP's
``libamdhip64``.  What the record shows of that GTL, per cray-mpich release:
it leaves HSA symbols undefined without NEEDing the runtime (8.1.4,
petsc/petsc config/examples/arch-olcf-spock.py), dlopens the unversioned
``libhsa-runtime64.so`` and ``libamdhip64.so`` (olcf/olcf-user-docs
systems/frontier_user_guide.rst, the SBCAST recipe), or NEEDs
``libamdhip64.so.6`` (8.1.31, ORNL/matsim-agents
deployments/frontier/setup/build-qe-gpu-frontier.sh).  So the build's vendor is
recorded (``VENDOR``: ``hsa`` loads the HSA runtime where ``cuda`` loads the
driver, by soname and else at the path the build used) and ``NEEDS`` holds the
build's HSA and HIP runtimes; a node where no HSA runtime loads (no ROCm
there) loads nothing, as a node without a CUDA driver does.

This file is also a template: :func:`render` writes it with the GTL path, the
vendor and the recorded libraries.
"""

import ctypes
import glob
import os
import re
import subprocess

#: The GTL library of the cray-mpich this package was built with (set at install).
GTL = "@TORCHMPI_GTL@"
#: Libraries GTL calls without NEEDing them, or NEEDs from no searched directory:
#: the build's C++ and CUDA (or HSA and HIP) runtimes, loaded before GTL (set at install).
NEEDS: tuple = ()
#: The GPU runtime this GTL serves, from the build (set at install): ``cuda``
#: (``libmpi_gtl_cuda``) or ``hsa`` (``libmpi_gtl_hsa``, ``py-torch +rocm``).
VENDOR = "cuda"
#: Per vendor, the soname whose load says this node can run GTL: the CUDA driver
#: (the NVIDIA driver installs it, the CUDA toolkit does not), or ROCr's HSA
#: runtime (ROCm installs it; a node or container without ROCm has none).
DRIVERS = {"cuda": "libcuda.so.1", "hsa": "libhsa-runtime64.so.1"}
#: What the error message calls that library.
DRIVER_NAMES = {"cuda": "the CUDA driver", "hsa": "the ROCm (HSA) runtime"}
DRIVER = DRIVERS["cuda"]

#: Who provides an undefined symbol, by its prefix (first match wins).
PROVIDERS = (
    (("_Z", "__gxx_", "__cxa_"), "libstdc++.so.6 (the C++ runtime)"),
    (("cuda", "__cuda"), "libcudart (the CUDA runtime)"),
    (("cu",), "libcuda.so.1 (the CUDA driver)"),
    (("hip", "__hip"), "libamdhip64 (the HIP runtime)"),
    (("hsa_",), "libhsa-runtime64.so.1 (ROCm's HSA runtime)"),
)


def provider(symbol: str) -> str:
    """The library that defines ``symbol``, as far as its name tells."""
    name, _, version = symbol.partition("@")
    if version:
        return version
    for prefixes, library in PROVIDERS:
        if name.startswith(prefixes):
            return library
    return "a library GTL does not NEED"


def explain(gtl: str, err: OSError, needs: tuple, failed: list, vendor: str = "cuda") -> str:
    """Why GTL did not load, in terms a user can act on: the symbol and who provides
    it, the library not found, or the file gone (the cray-mpich of the build removed)."""
    text = str(err)
    here = DRIVER_NAMES.get(vendor, DRIVER_NAMES["cuda"])
    head = f"torchmpi: {here} is here but Cray's GTL ({gtl}) does not load: {text}"
    if not os.path.exists(gtl):
        return (f"{head}; the file is gone: is the cray-mpich this package was built with "
                "still installed? MPI with MPICH_GPU_SUPPORT_ENABLED=1 needs it")
    undefined = re.search(r"undefined symbol: (\S+?)(?:, version (\S+))?$", text)
    missing = re.search(r"(\S+): cannot open shared object file", text)
    if undefined:
        symbol = undefined.group(1) + ("@" + undefined.group(2) if undefined.group(2) else "")
        why = f"GTL calls {undefined.group(1)}, which {provider(symbol)} provides, and neither "
        why += "GTL's NEEDED entries nor the libraries recorded at build time loaded it"
    elif missing:
        why = f"GTL NEEDs {missing.group(1)}, which is not on this node's library path"
    else:
        why = "GTL's file is there but the loader refused it"
    recorded = ", ".join(needs) or "none"
    gone = "".join(f"; recorded {lib} did not load: {e}" for lib, e in failed)
    return f"{head}; {why} (recorded at build: {recorded}{gone})"


def _load_once(lib: str, mode: int):
    """``lib`` loaded global, unless a library of its soname (its file name, as
    recorded) is loaded already: then that one is made global instead.  A second
    C++ or CUDA runtime in one process (the build's beside the one torch or
    another extension brought) would split their state."""
    try:
        return ctypes.CDLL(os.path.basename(lib), mode=mode | os.RTLD_NOLOAD)
    except OSError:
        return ctypes.CDLL(lib, mode=mode)


def drivers(vendor: str, needs: tuple) -> tuple:
    """Where the driver (or runtime) of ``vendor`` is looked for: its soname on this
    node's search path, then a recorded library of that soname (the ROCm the build
    used, found even where no ROCm module is loaded; a CUDA driver is never recorded)."""
    soname = DRIVERS.get(vendor, DRIVER)
    return (soname, *(lib for lib in needs if os.path.basename(lib) == soname))


def _load_any(candidates: tuple, mode: int) -> bool:
    for lib in candidates:
        try:
            ctypes.CDLL(lib, mode=mode)
        except OSError:
            continue
        return True
    return False


def preload(gtl: str = GTL, driver: "str | None" = None, needs: tuple = NEEDS,
            vendor: str = VENDOR):
    """Load the driver (``vendor``'s, unless ``driver`` names one), then ``needs``, then
    GTL, all global; None (nothing loaded) without a driver.

    A driver present but GTL not loadable is an error: on that node
    ``MPI_Init`` would abort ("GTL library is not linked") far from the cause.
    A recorded library that does not load is reported only if GTL then fails.
    """
    mode = os.RTLD_NOW | os.RTLD_GLOBAL
    if not _load_any((driver,) if driver else drivers(vendor, needs), mode):
        return None
    failed = []
    for lib in needs:
        try:
            _load_once(lib, mode)
        except OSError as err:
            failed.append((lib, err))
    try:
        return ctypes.CDLL(gtl, mode=mode)
    except OSError as err:
        raise ImportError(explain(gtl, err, needs, failed, vendor)) from err


def _soname_file(prefix: str, stem: str) -> "str | None":
    """``<prefix>/lib*/<stem>.so.<major>``: the soname file, not a link or a full version."""
    found = []
    for sub in ("lib64", "lib", os.path.join("targets", "*", "lib")):
        found += sorted(glob.glob(os.path.join(prefix, sub, f"{stem}.so.[0-9]*")))
    sonames = [f for f in found if re.search(rf"{re.escape(stem)}\.so\.\d+$", f)]
    return (sonames or found or [None])[0]


def build_needs(cxx: "str | None", cuda_prefix: "str | None",
                rocm_prefixes: tuple = ()) -> list:
    """What :data:`NEEDS` records at install: the C++ runtime of compiler ``cxx``
    (``-print-file-name``), ``libcudart.so.<major>`` of the CUDA at ``cuda_prefix``,
    and for ROCm the HSA runtime then HIP's ``libamdhip64.so.<major>`` found under
    ``rocm_prefixes`` (the build's hsa-rocr-dev and hip prefixes).
    Runs at build time only (the installed copy never calls it)."""
    out = []
    if cxx:
        path = subprocess.run([cxx, "-print-file-name=libstdc++.so.6"], check=False,
                              capture_output=True, text=True).stdout.strip()
        # The soname's path (a link), not the file it names: the preload matches
        # an already loaded runtime by this name.
        out.append(os.path.normpath(path) if os.path.isabs(path) else "libstdc++.so.6")
    # The soname file (libcudart.so.12), not a full version (libcudart.so.12.4.127).
    wanted = [("libcudart", (cuda_prefix,))] if cuda_prefix else []
    wanted += [(stem, rocm_prefixes) for stem in ("libhsa-runtime64", "libamdhip64")]
    for stem, prefixes in wanted:
        found = [f for f in (_soname_file(p, stem) for p in prefixes) if f]
        if found:
            out.append(found[0])
    return out


def vendor_of(gtl: str) -> str:
    """The vendor a GTL library serves, from its name (``libmpi_gtl_cuda``,
    ``libmpi_gtl_hsa``: builtin cray-mpich's ``gtl_lib`` picks it by the build's
    ``+cuda`` or ``+rocm``), so that what is recorded is what the build linked for."""
    name = os.path.basename(gtl)
    for vendor in DRIVERS:
        if name.startswith(f"libmpi_gtl_{vendor}."):
            return vendor
    raise ValueError(f"{gtl}: not a Cray GTL library (libmpi_gtl_cuda or libmpi_gtl_hsa)")


def render(gtl: str, needs: tuple = (), vendor: str = "cuda") -> str:
    """This module's text with ``GTL`` set to ``gtl``, ``NEEDS`` to ``needs``, ``VENDOR``
    to ``vendor`` and a call to :func:`preload` at the end."""
    if vendor not in DRIVERS:
        raise ValueError(f"GTL vendor {vendor!r}: not one of {sorted(DRIVERS)}")
    with open(__file__, encoding="utf-8") as stream:
        text = stream.read()
    text = text.replace('"@TORCHMPI' + '_GTL@"', repr(gtl), 1)
    text = text.replace("\nNEEDS: tuple = ()\n", f"\nNEEDS: tuple = {tuple(needs)!r}\n", 1)
    text = text.replace('\nVENDOR = "cuda"\n', f"\nVENDOR = {vendor!r}\n", 1)
    return text + "\n\n_GTL_HANDLE = preload()\n"


def import_line(package: str) -> str:
    return f"from {package} import _torchmpi_gtl  # noqa: F401  (torchmpi: Cray GTL first)\n"


def add_to_package(package_dir: str, package: str, gtl: str, needs: tuple = (),
                   vendor: str = "cuda") -> None:
    """Write ``_torchmpi_gtl.py`` (GTL ``gtl``, recorded ``needs``, ``vendor``) into
    ``package_dir`` and import it first from its ``__init__.py`` (after the docstring and
    ``from __future__`` lines, where Python allows the first statement)."""
    import ast

    with open(os.path.join(package_dir, "_torchmpi_gtl.py"), "w", encoding="utf-8") as out:
        out.write(render(gtl, needs, vendor))
    init = os.path.join(package_dir, "__init__.py")
    with open(init, encoding="utf-8") as stream:
        text = stream.read()
    line = import_line(package)
    if line in text:
        return
    body = ast.parse(text).body
    after = 0  # 1-based last line of the docstring / __future__ imports
    for node in body:
        is_doc = isinstance(node, ast.Expr) and isinstance(getattr(node, "value", None),
                                                           ast.Constant)
        is_future = isinstance(node, ast.ImportFrom) and node.module == "__future__"
        if (is_doc and node is body[0]) or is_future:
            after = node.end_lineno
        else:
            break
    lines = text.splitlines(keepends=True)
    lines.insert(after, line)
    with open(init, "w", encoding="utf-8") as out:
        out.write("".join(lines))
