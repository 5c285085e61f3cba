"""The py-torch override's MPICH/Cray MPICH CUDA-awareness patch, as text and on stubs.

Runs the patcher of ``spack_repo/torchmpi/packages/py_torch`` on
``ProcessGroupMPI.cpp`` of three PyTorch states (``tests/fixtures/process_group_mpi``):
v2.6.0's real file, fetched by ``make setup`` (``v2.6.0.cpp`` only points at
it: no upstream text is committed), and shapes written for torchmpi from the
facts of v2.9.1 and of main after PR #178323 (no registry here serves their
text; each header says what it describes and where that was read).  The
patched check is then compiled against stub MPI headers and run: it must say
"CUDA-aware" exactly when the MPI is.  The real file, patched, compiled
against the real torch headers and run under mpirun with both MPI families:
tests/test_process_group_mpi_build.py.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from support import patcher
from torchmpi import paths

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "process_group_mpi"
STUB = FIXTURES / "stub"
UPSTREAM_PATH = "torch/csrc/distributed/c10d/ProcessGroupMPI.cpp"
FETCHED = paths.cache() / "reference" / "torch-2.6.0" / "src" / "ProcessGroupMPI.cpp"


patch = patcher.load()

ALL = sorted(p.name for p in FIXTURES.glob("*.cpp"))
#: Fixtures that point at text fetched by ``make setup``, and shapes written here.
POINTERS = [n for n in ALL if "a POINTER, not source" in (FIXTURES / n).read_text()]
SHAPES = [n for n in ALL if n not in POINTERS]
#: Sources that already carry upstream's MPICH branch (PR #178323).
UPSTREAM_BRANCH = [n for n in SHAPES
                   if patch.has_upstream_mpich_branch((FIXTURES / n).read_text())]
#: Sources whose check knows Open MPI only.
OPEN_MPI_ONLY = [n for n in ALL if n not in UPSTREAM_BRANCH]


def _source(name: str) -> str:
    """The fixture's text; for a pointer, the fetched file (a failure, not a skip, without it)."""
    if name in POINTERS:
        if not FETCHED.is_file():
            pytest.fail(f"{FETCHED} missing: run `make setup` (scripts/get-reference.sh)")
        return FETCHED.read_text()
    return (FIXTURES / name).read_text()


def _function(source: str) -> str:
    start = source.index("bool cudaAwareMpiCheck() {")
    return source[start : source.index("\n}\n", start)]


def _header(name: str) -> dict[str, str]:
    """The fixture's leading ``// Key: value`` fields (continuation lines joined)."""
    fields: dict[str, str] = {}
    key = None
    for line in (FIXTURES / name).read_text().split("\n"):
        if not line.startswith("//"):
            break
        text = line[2:].strip()
        match = re.match(r"([A-Z][a-z]+(?: [a-z]+)*): (.*)", text)
        if match and not line.startswith("//   "):
            key = match.group(1)
            fields[key] = match.group(2)
        elif key and line.startswith("//   "):
            fields[key] += " " + text
    return fields


def _skeleton(source: str) -> list[str]:
    """``cudaAwareMpiCheck``'s preprocessor directives and calls, in order: its shape."""
    body = _function(source)
    found = re.findall(r"^#\s*(?:if|elif|else|endif)\b[^/\n]*|\b(?:MPIX_\w+|std::getenv)\(",
                       body, re.MULTILINE)
    return [item.strip() for item in found]


def test_fixture_set() -> None:
    # Every kind is present, so no parametrized test below runs on nothing.
    assert POINTERS == ["v2.6.0.cpp"] and UPSTREAM_BRANCH and OPEN_MPI_ONLY


@pytest.mark.parametrize("name", ALL)
def test_fixture_header_says_what_it_describes(name: str) -> None:
    fields = _header(name)
    assert fields["Upstream"] == "https://github.com/pytorch/pytorch"
    assert fields["Path"] == UPSTREAM_PATH
    assert re.fullmatch(r"[0-9a-f]{40}", fields["Commit"])
    assert fields["Describes"].startswith("PyTorch ")
    if name.startswith("v"):
        assert fields["Tag"] == name.removesuffix(".cpp")
        assert f"PyTorch {fields['Tag']}" in fields["Describes"]
    else:
        assert fields["Tag"].startswith("none") and "no release" in fields["Describes"]
    if name in POINTERS:
        assert "scripts/get-reference.sh" in fields["Source"]
        assert re.fullmatch(r"[0-9a-f]{40}", fields["Blob"])
    else:
        # A shape: says so, says where its facts were read, copies no upstream line
        # beyond the few the patcher needs (the check and the error message).
        first = (FIXTURES / name).read_text().split("\n", 1)[0]
        assert "a SHAPE written for torchmpi -- not PyTorch's text" in first
        assert fields["Read"] and fields["Facts"]
        assert "[fixture]" not in (FIXTURES / name).read_text()


def test_fetched_text_is_the_pointed_blob() -> None:
    """The fetched v2.6.0 file is the git blob its pointer names (upstream's, at the tag)."""
    import hashlib

    data = _source("v2.6.0.cpp").encode()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    assert blob == _header("v2.6.0.cpp")["Blob"]


def test_v2_9_1_shape_has_the_fetched_release_s_check() -> None:
    """The v2.9.1 shape says its check is v2.6.0's: same directives, same calls."""
    assert _skeleton(_source("v2.9.1.cpp")) == _skeleton(_source("v2.6.0.cpp"))
    pr = _skeleton(_source(UPSTREAM_BRANCH[0]))
    assert pr[:2] == _skeleton(_source("v2.6.0.cpp"))[:2]
    assert pr[2:4] == ["#elif defined(MPIX_GPU_SUPPORT_CUDA)", "std::getenv("]


@pytest.mark.parametrize("name", ALL)
def test_patch_adds_honest_mpich_branch(name: str) -> None:
    source = _source(name)
    patched = patch.patch_source(source)
    body = _function(patched)
    # The MPICH branch sits after the Open MPI branch -- and after upstream's
    # MPICH branch where there is one -- right before the final #else.
    assert body.index("#if defined(MPIX_CUDA_AWARE_SUPPORT)") < body.index(
        "#elif defined(MPICH_VERSION)"
    )
    if name in UPSTREAM_BRANCH:
        assert body.index("#elif defined(MPIX_GPU_SUPPORT_CUDA)") < body.index(
            "#elif defined(MPICH_VERSION)")
    assert body.rindex("#elif defined(MPICH_VERSION)") < body.rindex("#else")
    assert "return torchmpiMpichCudaAware();" in body
    # Everything else still says "not CUDA-aware": no blind `return true`.
    assert body.rstrip().split("\n")[-1].startswith("#endif")
    tail = body[body.rindex("#else") :]
    assert "return false;" in tail and "return true;" not in tail
    # The helper asks MPICH_GPU_SUPPORT_ENABLED, then the library.
    helper = patched[patched.index("bool torchmpiMpichCudaAware()") :]
    assert 'std::getenv("MPICH_GPU_SUPPORT_ENABLED")' in helper
    assert "MPIX_GPU_query_support(MPIX_GPU_SUPPORT_CUDA" in helper
    assert patched.index("bool torchmpiMpichCudaAware()") < patched.index(
        "bool cudaAwareMpiCheck()"
    )
    assert "#include <cstdlib>" in patched
    # Upstream's branches are untouched, and nothing but the three insertions changed.
    assert _function(source).rsplit("#else", 1)[0] in body
    removed = patched.replace(patch._INCLUDES, "", 1).replace(patch._HELPER, "", 1)
    assert removed.replace(patch._BRANCH, "", 1) == source


@pytest.mark.parametrize("name", ALL)
def test_patch_is_idempotent(name: str) -> None:
    once = patch.patch_source(_source(name))
    assert patch.is_patched(once) and not patch.is_patched(_source(name))
    assert patch.patch_source(once) == once


def test_patch_file_reports_whether_it_changed(tmp_path: Path) -> None:
    """On the whole file (the stream order edits enqueue() and the device guards:
    only the fetched v2.6.0 text has them): the MPICH branch only when asked."""
    target = tmp_path / "ProcessGroupMPI.cpp"
    target.write_text(_source("v2.6.0.cpp"))
    assert patch.patch_file(str(target), mpich=False) is True
    streams_only = target.read_text()
    assert patch.STREAM_MARKER in streams_only and not patch.is_patched(streams_only)
    assert patch.patch_file(str(target)) is True
    once = target.read_text()
    assert patch.is_patched(once)
    assert patch.patch_file(str(target)) is False
    assert target.read_text() == once


def test_unexpected_shape_is_refused() -> None:
    with pytest.raises(patch.PatchError):
        patch.patch_source("int main() { return 0; }\n")
    odd = "#include <x>\nbool cudaAwareMpiCheck() {\n  return false;\n}\n"
    with pytest.raises(patch.PatchError, match="#if/#else"):
        patch.patch_source(odd)


# --- compile and run the patched check against stub MPI headers -------------

MAIN = """
#include <cstdio>
int main() {
  at::Tensor cuda_tensor{true};
  try {
    c10d::checkSingleTensorHelper(cuda_tensor);
    std::puts("accepted");
  } catch (const std::exception&) {
    std::puts("rejected");
  }
  return 0;
}
"""


def _build(tmp_path: Path, source: str, mpi: str, *defines: str) -> Path:
    cxx = shutil.which("g++") or shutil.which("c++")
    if not cxx:
        pytest.fail("no C++ compiler: run make setup (scripts/check-system.sh installs g++)")
    unit = tmp_path / "unit.cpp"
    unit.write_text(source + MAIN)
    exe = tmp_path / f"check-{mpi}-{len(defines)}"
    subprocess.run(
        [cxx, "-std=c++17", "-I", str(STUB / mpi), "-I", str(STUB), *defines, str(unit),
         "-o", str(exe)],
        check=True,
    )
    return exe


def _run(exe: Path, **env: str) -> str:
    full = {k: v for k, v in os.environ.items() if k != "MPICH_GPU_SUPPORT_ENABLED"}
    full.update(env)
    return subprocess.run([str(exe)], env=full, capture_output=True, text=True,
                          check=True).stdout.strip()


#: Shapes without upstream's MPICH branch (the real v2.6.0 file is compiled with
#: the real headers in tests/test_process_group_mpi_build.py, not with stubs).
STUB_OPEN_MPI_ONLY = [n for n in SHAPES if n in OPEN_MPI_ONLY]


@pytest.mark.parametrize("name", STUB_OPEN_MPI_ONLY)
def test_unpatched_source_rejects_cuda_tensors_on_mpich(tmp_path: Path, name: str) -> None:
    """The bug being fixed: MPICH is never CUDA-aware to stock PyTorch."""
    exe = _build(tmp_path, _source(name), "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1", STUB_GPU_QUERY="1") == "rejected"


@pytest.mark.parametrize("name", SHAPES)
def test_patched_check_follows_cray_switch(tmp_path: Path, name: str) -> None:
    """No MPIX_GPU_SUPPORT_CUDA in the headers (a Cray MPICH without it): upstream's
    branch, where present, compiles out and torchmpi's fallback answers."""
    exe = _build(tmp_path, patch.patch_source(_source(name)), "mpich")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "accepted"
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"
    assert _run(exe) == "rejected"  # plain MPICH without the query API: not CUDA-aware


@pytest.mark.parametrize("name", UPSTREAM_BRANCH)
def test_upstream_branch_alone_refuses_on_mpich_without_the_macro(tmp_path: Path,
                                                                    name: str) -> None:
    """Why the fallback stays after upstream's branch: left
    unpatched, a source with PR #178323's branch still refuses every CUDA tensor
    where the MPICH headers do not define MPIX_GPU_SUPPORT_CUDA."""
    exe = _build(tmp_path, _source(name), "mpich")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "rejected"


@pytest.mark.parametrize("name", STUB_OPEN_MPI_ONLY)
def test_patched_check_asks_mpich4_library(tmp_path: Path, name: str) -> None:
    exe = _build(tmp_path, patch.patch_source(_source(name)), "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, STUB_GPU_QUERY="1") == "accepted"
    assert _run(exe, STUB_GPU_QUERY="0") == "rejected"
    # The Cray switch, when set, is the answer even if the library says yes.
    assert _run(exe, STUB_GPU_QUERY="1", MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"


@pytest.mark.parametrize("name", UPSTREAM_BRANCH)
def test_upstream_mpich_branch_wins_where_it_compiles(tmp_path: Path, name: str) -> None:
    """With the macro, upstream's branch answers (switch only), before torchmpi's."""
    exe = _build(tmp_path, patch.patch_source(_source(name)), "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "accepted"
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"
    # Upstream's branch does not ask the library: torchmpi's would have said yes.
    assert _run(exe, STUB_GPU_QUERY="1") == "rejected"


@pytest.mark.parametrize("name", SHAPES)
def test_patched_check_keeps_open_mpi_path(tmp_path: Path, name: str) -> None:
    exe = _build(tmp_path, patch.patch_source(_source(name)), "openmpi")
    assert _run(exe) == "accepted"


def test_patch_file_carries_this_patcher(tmp_path: Path) -> None:
    """py-torch's ``patch()`` directive applies torchmpi-patcher.patch, which
    creates the patcher in the stage; ``patch()`` runs that copy.  The file must
    be this module exactly (regenerate: ``python
    spack_repo/torchmpi/packages/py_torch/as_patch.py``), applied as Spack
    applies patches (``patch -p1``), and no hand-kept digest replaces it."""
    package_dir = ROOT / "spack_repo" / "torchmpi" / "packages" / "py_torch"
    spec = importlib.util.spec_from_file_location("torchmpi_as_patch", package_dir / "as_patch.py")
    as_patch = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(as_patch)
    patch_file = package_dir / as_patch.PATCH
    assert patch_file.read_text() == as_patch.expected(), (
        "cuda_aware_mpi.py changed: run python spack_repo/torchmpi/packages/py_torch/as_patch.py")
    # Spack re-reads the patch index only for a changed package.py: the patch's
    # sha256 is written there too, so a new patcher is never looked up in a stale
    # index ("Couldn't find patch" at install).
    recorded = as_patch.SHA_LINE.search((package_dir / "package.py").read_text())
    assert recorded and recorded.group(0).split('"')[1] == as_patch.sha256() == hashlib.sha256(
        patch_file.read_bytes()).hexdigest(), "run python .../py_torch/as_patch.py"
    subprocess.run(["patch", "-s", "-p1", "-i", str(patch_file)], cwd=tmp_path, check=True)
    assert (tmp_path / as_patch.STAGED).read_bytes() == patcher.PATH.read_bytes()
    package = (package_dir / "package.py").read_text()
    assert "CUDA_AWARE_MPI_SHA256" not in package
    assert 'patch(as_patch.PATCH, when="+cuda_aware_mpi")' in package


def test_branch_goes_before_the_outer_else_past_a_nested_one() -> None:
    """A check whose Open MPI branch has an ``#if``/``#else`` of its own (a shape
    upstream may take): the MPICH branch joins the *outer* conditional, so the
    nested ``#else`` keeps its meaning.  (Found by `make mutate`: the released
    fixtures have no nested ``#else``, so a depth-blind search survived.)"""
    source = (
        "#include <mpi.h>\n\n"
        "bool cudaAwareMpiCheck() {\n"
        "#if defined(MPIX_CUDA_AWARE_SUPPORT)\n"
        "#if MPIX_CUDA_AWARE_SUPPORT\n"
        "  return MPIX_Query_cuda_support() == 1;\n"
        "#else\n"
        "  return false;\n"
        "#endif\n"
        "#else\n"
        "  return false;\n"
        "#endif\n"
        "}\n"
    )
    body = _function(patch.patch_source(source))
    outer_else = body.rindex("#else")
    assert body.index("#elif defined(MPICH_VERSION)") < outer_else
    assert body.index("#elif defined(MPICH_VERSION)") > body.index("#endif\n")  # after nested


# --- the patch-time header check, on the stub headers --------------------------


def _preprocess(mpi: str, *defines: str) -> list[str]:
    cxx = shutil.which("g++") or shutil.which("c++")
    assert cxx, "no C++ compiler: run make setup"
    return [cxx, "-E", "-P", "-x", "c++", "-I", str(STUB / mpi), "-I", str(STUB), *defines, "-"]


@pytest.mark.parametrize("name", SHAPES)
def test_headers_select_the_branch(name: str) -> None:
    """check_headers() names the branch each MPI's headers compile: Open MPI's own;
    on MPICH, upstream's where its macro is defined, else torchmpi's fallback."""
    patched = patch.patch_source(_source(name))
    assert patch.check_headers(patched, _preprocess("openmpi"), mpich_family=False) == "open-mpi"
    assert patch.check_headers(patched, _preprocess("mpich"), mpich_family=True) == (
        "torchmpi-mpich")
    with_macro = patch.check_headers(patched, _preprocess("mpich", "-DSTUB_MPIX_GPU"), True)
    assert with_macro == ("upstream-mpich" if name in UPSTREAM_BRANCH else "torchmpi-mpich")


@pytest.mark.parametrize("name", SHAPES)
def test_header_check_refuses_a_build_that_refuses_cuda(name: str) -> None:
    """Unpatched, an MPICH without the macro compiles only ``return false``: refused,
    naming the branch; so is an MPICH-family check of Open MPI headers."""
    source = _source(name)
    assert patch.selected_branch(source, _preprocess("mpich")) == "none"
    with pytest.raises(patch.PatchError, match="'none' branch of cudaAwareMpiCheck"):
        patch.check_headers(source, _preprocess("mpich"), mpich_family=True)
    with pytest.raises(patch.PatchError, match="'open-mpi' branch"):
        patch.check_headers(patch.patch_source(source), _preprocess("openmpi"), True)


def test_header_check_reports_a_failing_preprocessor() -> None:
    with pytest.raises(patch.PatchError, match="preprocessing cudaAwareMpiCheck"):
        patch.selected_branch(_source("v2.9.1.cpp"), _preprocess("no-such-mpi"))
    with pytest.raises(patch.PatchError, match="cannot run the preprocessor"):
        patch.selected_branch(_source("v2.9.1.cpp"), ["/nonexistent/c++", "-E", "-"])
