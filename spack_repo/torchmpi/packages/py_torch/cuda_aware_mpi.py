"""Teach PyTorch's MPI backend to recognise a CUDA-aware MPICH / Cray MPICH.

``cudaAwareMpiCheck()`` in ``torch/csrc/distributed/c10d/ProcessGroupMPI.cpp``
only knows Open MPI (``MPIX_CUDA_AWARE_SUPPORT`` from ``mpi-ext.h``); every
MPICH-family library gets ``false`` and each collective on a CUDA tensor then
fails with "CUDA tensor detected and the MPI used doesn't have CUDA-aware MPI
support" (pytorch/pytorch#45745).  The usual site fix (a blind
``return true``) is wrong for any MPICH that is not CUDA-aware, so this adds an
``#elif`` branch that asks honestly:

* ``MPICH_GPU_SUPPORT_ENABLED`` set (Cray MPICH's switch, also honoured by
  pytorch/pytorch PR #178323): true iff it is ``"1"`` -- Cray MPICH handles
  device pointers only when it is set *and* the GTL library is linked, which
  the py-torch package arranges;
* otherwise, where ``mpix.h`` offers it (MPICH >= 4, pmodels/mpich#4741), the
  library's own answer from ``MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA)``;
* otherwise false.

Sources that already carry an MPICH branch (``MPIX_GPU_SUPPORT_CUDA`` or
``MPICH`` inside the function) are left untouched, so the change disappears
by itself on PyTorch releases that include the upstream fix.

Plain Python without Spack imports so that tests can run it on fixture files.
"""

from __future__ import annotations

import re

#: Marker written into patched sources; also makes the patch idempotent.
MARKER = "torchmpi: MPICH/Cray MPICH CUDA-awareness"

_FUNC = re.compile(r"^bool cudaAwareMpiCheck\(\) \{\n", re.MULTILINE)

_HELPER = f"""\
#if defined(MPICH_VERSION) && !defined(MPIX_CUDA_AWARE_SUPPORT)
// {MARKER} (added by the torchmpi py-torch package).
// Cray MPICH moves device buffers only with MPICH_GPU_SUPPORT_ENABLED=1 and
// the GTL library linked; plain MPICH >= 4 can be asked directly.
bool torchmpiMpichCudaAware() {{
  const char* enabled = std::getenv("MPICH_GPU_SUPPORT_ENABLED");
  if (enabled != nullptr) {{
    return std::string(enabled) == "1";
  }}
#if defined(MPIX_GPU_SUPPORT_CUDA)
  int supported = 0;
  if (MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA, &supported) == MPI_SUCCESS) {{
    return supported != 0;
  }}
#endif
  return false;
}}
#endif

"""

_BRANCH = f"""\
#elif defined(MPICH_VERSION) // {MARKER}
  return torchmpiMpichCudaAware();
"""

_INCLUDES = f"#include <cstdlib> // {MARKER}\n#include <string>\n"


class PatchError(Exception):
    """The source does not have the expected shape; refuse to guess."""


def _function_span(source: str) -> tuple[int, int]:
    """Start and end offsets of ``cudaAwareMpiCheck``'s definition."""
    match = _FUNC.search(source)
    if not match:
        raise PatchError("cudaAwareMpiCheck() definition not found")
    end = source.find("\n}\n", match.end())
    if end < 0:
        raise PatchError("end of cudaAwareMpiCheck() not found")
    return match.start(), end + 3


def has_mpich_branch(source: str) -> bool:
    """True when ``cudaAwareMpiCheck`` already handles MPICH (upstream or us)."""
    start, end = _function_span(source)
    body = source[start:end]
    return "MPIX_GPU_SUPPORT_CUDA" in body or "MPICH" in body or MARKER in source


def _outer_else(body: str) -> int:
    """Offset in ``body`` of the ``#else`` that closes the outermost ``#if``."""
    depth = 0
    for match in re.finditer(r"^#\s*(if|ifdef|ifndef|elif|else|endif)\b.*$", body, re.MULTILINE):
        word = match.group(1)
        if word.startswith("if"):
            depth += 1
        elif word == "endif":
            depth -= 1
        elif word == "else" and depth == 1:
            return match.start()
    raise PatchError("cudaAwareMpiCheck() has no #if/#else around MPIX_CUDA_AWARE_SUPPORT")


def patch_source(source: str) -> str:
    """Return ``source`` with the MPICH branch added (unchanged if already there)."""
    if has_mpich_branch(source):
        return source
    start, end = _function_span(source)
    body = source[start:end]
    at = _outer_else(body)
    body = body[:at] + _BRANCH + body[at:]
    patched = source[:start] + _HELPER + body + source[end:]
    include_at = patched.find("#include")
    if include_at < 0:
        raise PatchError("no #include found")
    return patched[:include_at] + _INCLUDES + patched[include_at:]


def patch_file(path: str) -> bool:
    """Patch ``path`` in place; return whether it changed."""
    with open(path, encoding="utf-8") as stream:
        source = stream.read()
    patched = patch_source(source)
    if patched == source:
        return False
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(patched)
    return True
