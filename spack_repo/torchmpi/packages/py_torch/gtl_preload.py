# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Cray's GPU Transport Layer, loaded before libmpi where a GPU driver is present.

Installed by torchmpi's ``py-torch`` and ``py-mpi4py`` (``+cuda_aware_mpi`` on
cray-mpich) as ``_torchmpi_gtl.py`` in the ``torch`` and ``mpi4py`` packages,
and imported first by their ``__init__.py``: Python runs it before the
extension that pulls in libmpi is loaded.

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

This file is also a template: :func:`render` writes it with the GTL path.
"""

import ctypes
import os

#: The GTL library of the cray-mpich this package was built with (set at install).
GTL = "@TORCHMPI_GTL@"
#: The CUDA driver's soname (the NVIDIA driver installs it; the CUDA toolkit does not).
DRIVER = "libcuda.so.1"


def preload(gtl: str = GTL, driver: str = DRIVER):
    """Load the driver, then GTL, both global; None (nothing loaded) without a driver.

    A driver present but GTL not loadable is an error: on that node
    ``MPI_Init`` would abort ("GTL library is not linked") far from the cause.
    """
    mode = os.RTLD_NOW | os.RTLD_GLOBAL
    try:
        ctypes.CDLL(driver, mode=mode)
    except OSError:
        return None
    try:
        return ctypes.CDLL(gtl, mode=mode)
    except OSError as err:
        raise ImportError(
            f"torchmpi: the CUDA driver is here but Cray's GTL ({gtl}) does not load: {err}; "
            "MPI with MPICH_GPU_SUPPORT_ENABLED=1 needs it (is the cray-mpich of the build "
            "still installed?)"
        ) from err


def render(gtl: str) -> str:
    """This module's text with ``GTL`` set to ``gtl`` and a call to :func:`preload` at the end."""
    with open(__file__, encoding="utf-8") as stream:
        text = stream.read()
    return text.replace('"@TORCHMPI' + '_GTL@"', repr(gtl), 1) + "\n\n_GTL_HANDLE = preload()\n"


def import_line(package: str) -> str:
    return f"from {package} import _torchmpi_gtl  # noqa: F401  (torchmpi: Cray GTL first)\n"


def add_to_package(package_dir: str, package: str, gtl: str) -> None:
    """Write ``_torchmpi_gtl.py`` into ``package_dir`` and import it first from
    its ``__init__.py`` (after the docstring and ``from __future__`` lines,
    where Python allows the first statement)."""
    import ast

    with open(os.path.join(package_dir, "_torchmpi_gtl.py"), "w", encoding="utf-8") as out:
        out.write(render(gtl))
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
