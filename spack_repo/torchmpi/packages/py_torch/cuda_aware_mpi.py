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

Upstream's own MPICH branch (pytorch/pytorch PR #178323: ``#elif
defined(MPIX_GPU_SUPPORT_CUDA)``, true iff ``MPICH_GPU_SUPPORT_ENABLED`` is
``"1"``) compiles only where the MPI headers define that macro; a Cray MPICH
whose headers lack it would fall through to ``return false``.  So the branch
is added *after* whatever upstream has, just before the outer ``#else``:
upstream's branch wins where it compiles, this one is the fallback for every
other MPICH.  :func:`selected_branch` runs the provider's preprocessor over
the patched function at patch time, and :func:`check_headers` refuses a
provider whose headers select no CUDA-aware branch at all.

:func:`order_streams` (every ``+cuda_aware_mpi`` build, Open MPI included)
adds the stream order the backend lacks (pytorch/pytorch#38642, #10800): MPI
runs on a worker thread with no wait on the caller's stream, and the worker's
own copies (all_gather/gather outputs, scatter's flattened input) are not
waited for either; and ``Work::getFuture()`` (what DDP's comm hooks chain on)
is built without devices, so c10's Future records no event and its ``wait()``
orders nothing for device tensors: the work's future is given its outputs'
devices.  It uses c10's device-generic guard interface only, so it compiles in
libtorch_cpu without CUDA headers, and does nothing for CPU tensors.

Plain Python without Spack imports so that tests can run it on fixture files.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Sequence

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


def is_patched(source: str) -> bool:
    """True when the torchmpi branch is already there (the patch is idempotent)."""
    return MARKER in source


def has_upstream_mpich_branch(source: str) -> bool:
    """True when ``cudaAwareMpiCheck`` carries upstream's MPICH branch (PR #178323)."""
    start, end = _function_span(source)
    return "MPIX_GPU_SUPPORT_CUDA" in source[start:end]


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
    """Return ``source`` with the MPICH fallback branch added, after any branch
    upstream has (unchanged if already patched)."""
    if is_patched(source):
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


#: Marker of the stream-order part of the patch (idempotency, as :data:`MARKER`).
STREAM_MARKER = "torchmpi: stream order"

_STREAM_INCLUDES = f"""\
#include <c10/core/Event.h> // {STREAM_MARKER}
#include <c10/core/impl/VirtualGuardImpl.h>
#include <algorithm>
#include <memory>
"""

# Device-generic (c10's guard interface: no CUDA header, so it compiles in
# libtorch_cpu); every call is a no-op for CPU tensors.
_STREAM_HELPERS = f"""\
// {STREAM_MARKER} (added by the torchmpi py-torch package).
// MPI reads and writes device memory from the worker thread (or, for
// send/recv, right away) while kernels queued on the caller's stream may
// still be writing it (pytorch/pytorch#38642, #10800), and the worker copies
// outputs on its own stream.  So: the caller's current stream is recorded at
// enqueue and the worker waits for it before MPI runs; the current stream is
// drained before each MPI call (the worker's copies into a send buffer, or the
// caller's stream for send/recv); the worker's stream is drained before the
// work completes (its copies into the outputs).
void torchmpiWaitStream(const c10::Device& device) {{
  if (device.is_cpu()) {{
    return;
  }}
  c10::impl::VirtualGuardImpl impl(device.type());
  impl.synchronizeStream(impl.getStream(device));
}}

void torchmpiOrderStreams(std::unique_ptr<WorkEntry>& entry) {{
  std::vector<c10::Device> devices;
  auto add = [&devices](const std::vector<at::Tensor>& tensors) {{
    for (const auto& tensor : tensors) {{
      if (tensor.defined() && !tensor.device().is_cpu() &&
          std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {{
        devices.push_back(tensor.device());
      }}
    }}
  }};
  add(entry->src);
  add(entry->dst);
  if (devices.empty()) {{
    return;
  }}
  auto events = std::make_shared<std::vector<c10::Event>>();
  for (const auto& device : devices) {{
    c10::impl::VirtualGuardImpl impl(device.type());
    events->emplace_back(device.type());
    events->back().record(impl.getStream(device));
  }}
  auto run = std::move(entry->run);
  entry->run = [events, devices, run](std::unique_ptr<WorkEntry>& work) {{
    for (const auto& event : *events) {{
      event.synchronize();
    }}
    run(work);
    for (const auto& device : devices) {{
      torchmpiWaitStream(device);
    }}
  }};
}}

// WorkMPI's future is built without devices, so for device outputs c10's
// Future records no event when it completes, its wait() orders nothing on the
// caller's stream, and then() callbacks run on whatever stream the completing
// thread has.  The same future with the outputs' devices does all three (as
// other backends' futures do); CPU outputs keep the one upstream built.
c10::intrusive_ptr<c10::ivalue::Future> torchmpiDeviceFuture(
    const std::vector<at::Tensor>& outputs,
    c10::intrusive_ptr<c10::ivalue::Future> future) {{
  std::vector<c10::Device> devices;
  for (const auto& tensor : outputs) {{
    if (tensor.defined() && !tensor.device().is_cpu() &&
        std::find(devices.begin(), devices.end(), tensor.device()) == devices.end()) {{
      devices.push_back(tensor.device());
    }}
  }}
  if (devices.empty()) {{
    return future;
  }}
  return c10::make_intrusive<c10::ivalue::Future>(future->elementType(), devices);
}}

"""

_ENQUEUE = re.compile(r"^c10::intrusive_ptr<Work> ProcessGroupMPI::enqueue\([^{]*\{\n",
                      re.MULTILINE)
#: In ``enqueue()``: the lock taken before the work is queued (the work's future
#: must be replaced before the worker can complete it).
_QUEUE_LOCK = re.compile(r"^( *)std::unique_lock<std::mutex> \w+\(pgMutex_\);\n", re.MULTILINE)
_GUARD = re.compile(r"^( *)c10::DeviceGuard \w+\((.+)\.device\(\)\);\n"
                    r"(?= *std::unique_lock<std::mutex> globalLock\(pgGlobalMutex_\);)",
                    re.MULTILINE)


def order_streams(source: str) -> str:
    """Return ``source`` (the whole ProcessGroupMPI.cpp) with the stream order
    added: :data:`_STREAM_HELPERS` before ``cudaAwareMpiCheck()``, a call to
    ``torchmpiOrderStreams`` first in ``enqueue()`` and one to
    ``torchmpiWaitStream`` after each device guard that precedes an MPI call.
    Unchanged if already there; :class:`PatchError` when a piece is not found."""
    if STREAM_MARKER in source:
        return source
    enqueue = _ENQUEUE.search(source)
    if not enqueue:
        raise PatchError("ProcessGroupMPI::enqueue() definition not found")
    lock = _QUEUE_LOCK.search(source, enqueue.end())
    if not lock or source.find("\n}\n", enqueue.end()) < lock.start():
        raise PatchError("ProcessGroupMPI::enqueue(): no pgMutex_ lock before the work is queued")
    source = (source[:enqueue.end()] + f"  torchmpiOrderStreams(entry); // {STREAM_MARKER}\n"
              + source[enqueue.end():lock.start()]
              + f"{lock.group(1)}work->future_ = torchmpiDeviceFuture(work->result(), "
              f"work->future_); // {STREAM_MARKER}\n" + source[lock.start():])
    source, guards = _GUARD.subn(
        lambda m: f"{m.group(0)}{m.group(1)}torchmpiWaitStream({m.group(2)}.device());\n", source)
    if not guards:
        raise PatchError("no c10::DeviceGuard before an MPI call found")
    start, _ = _function_span(source)
    source = source[:start] + _STREAM_HELPERS + source[start:]
    include_at = source.find("#include")
    if include_at < 0:
        raise PatchError("no #include found")
    return source[:include_at] + _STREAM_INCLUDES + source[include_at:]


def patch_all(source: str, mpich: bool) -> str:
    """What ``patch()`` makes of the whole file: the stream order for every
    ``+cuda_aware_mpi`` build, the MPICH branch for the MPICH family only
    (Open MPI's branch is PyTorch's own)."""
    patched = order_streams(source)
    return patch_source(patched) if mpich else patched


def patch_file(path: str, mpich: bool = True) -> bool:
    """Patch ``path`` in place: the stream order (:func:`order_streams`) always,
    the MPICH branch (:func:`patch_source`) when ``mpich``; return whether it changed."""
    with open(path, encoding="utf-8") as stream:
        source = stream.read()
    patched = patch_all(source, mpich)
    if patched == source:
        return False
    with open(path, "w", encoding="utf-8") as stream:
        stream.write(patched)
    return True


#: What :func:`selected_branch` returns, by the call that survives preprocessing.
BRANCHES = {
    "MPIX_Query_cuda_support": "open-mpi",
    "torchmpiMpichCudaAware": "torchmpi-mpich",
    "MPICH_GPU_SUPPORT_ENABLED": "upstream-mpich",
}

_PROBE_HEADERS = """\
#include <mpi.h>
#if defined(OPEN_MPI) && OPEN_MPI
#include <mpi-ext.h>
#endif
"""


def selected_branch(source: str, preprocessor: Sequence[str]) -> str:
    """Which branch of ``cudaAwareMpiCheck`` the MPI's headers compile.

    ``preprocessor``: a command that preprocesses C++ from stdin to stdout
    with the provider's include directories (e.g. ``["c++", "-E", "-P",
    "-x", "c++", "-I<mpi>/include", "-"]``).  The function is preprocessed
    after ``mpi.h`` (and Open MPI's ``mpi-ext.h``, as ProcessGroupMPI.cpp
    includes it), so the guard macros are those the build will see.
    Returns a value of :data:`BRANCHES` or ``"none"`` (``return false``).
    """
    start, end = _function_span(source)
    probe = _PROBE_HEADERS + "#line 1 \"cudaAwareMpiCheck\"\n" + source[start:end]
    try:
        done = subprocess.run(list(preprocessor), input=probe, capture_output=True,
                              text=True, check=False)
    except OSError as error:
        raise PatchError(f"cannot run the preprocessor {preprocessor[0]!r}: {error}") from None
    if done.returncode != 0:
        raise PatchError(f"preprocessing cudaAwareMpiCheck() with the MPI headers failed "
                         f"({' '.join(preprocessor)}): {done.stderr.strip()[-500:]}")
    body = done.stdout[done.stdout.find("cudaAwareMpiCheck()"):]
    for call, branch in BRANCHES.items():
        if call in body:
            return branch
    return "none"


def check_headers(source: str, preprocessor: Sequence[str], mpich_family: bool) -> str:
    """:func:`selected_branch`, refusing a provider whose headers select a branch
    that cannot answer for it (``mpich_family``: cray-mpich or mpich)."""
    branch = selected_branch(source, preprocessor)
    wanted = ("torchmpi-mpich", "upstream-mpich") if mpich_family else ("open-mpi",)
    macros = ("MPICH_VERSION" if mpich_family
              else "OPEN_MPI, and MPIX_CUDA_AWARE_SUPPORT in mpi-ext.h")
    if branch not in wanted:
        raise PatchError(
            f"the MPI headers select the {branch!r} branch of cudaAwareMpiCheck(), expected "
            f"one of {', '.join(wanted)}: a torch built so would refuse every CUDA tensor "
            f"(are these the provider's headers? does mpi.h define {macros}?)")
    return branch
