"""The py-torch override's MPICH/Cray MPICH CUDA-awareness patch.

Runs the patch logic of ``spack_repo/torchmpi/packages/py_torch`` on excerpts
of PyTorch's real ``ProcessGroupMPI.cpp`` (``tests/fixtures/process_group_mpi``:
one per release whose text could be read from a source tarball of its tag, and
main after PR #178323 as read from a fork, each header naming tag, commit and
path), then compiles the result against stub MPI headers and runs it: the
patched check must say "CUDA-aware" exactly when the MPI is.  A source that
already has an MPICH branch (PR #178323 on main) must be left alone.
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from torchmpi import paths

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures" / "process_group_mpi"
STUB = FIXTURES / "stub"
UPSTREAM_PATH = "torch/csrc/distributed/c10d/ProcessGroupMPI.cpp"


def _load_patch_module():
    path = ROOT / "spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py"
    spec = importlib.util.spec_from_file_location("torchmpi_cuda_aware_mpi", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


patch = _load_patch_module()

ALL = sorted(p.name for p in FIXTURES.glob("*.cpp"))
#: Released shapes without an MPICH branch: the patch must add one.
UNFIXED = [n for n in ALL if not patch.has_mpich_branch((FIXTURES / n).read_text())]
#: Sources that already carry upstream's MPICH branch: left untouched.
FIXED = [n for n in ALL if n not in UNFIXED]


def _source(name: str) -> str:
    return (FIXTURES / name).read_text()


def _function(source: str) -> str:
    start = source.index("bool cudaAwareMpiCheck() {")
    return source[start : source.index("\n}\n", start)]


def _header(name: str) -> tuple[dict[str, str], list[str]]:
    """The fixture's leading ``// Key: value`` fields (continuations joined) and body."""
    lines = _source(name).split("\n")
    fields: dict[str, str] = {}
    key = None
    for i, line in enumerate(lines):
        if not line.startswith("//"):
            return fields, lines[i:]
        text = line[2:].strip()
        match = re.match(r"([A-Z][a-z]+): (.*)", text)
        if match:
            key = match.group(1)
            fields[key] = match.group(2)
        elif key and line.startswith("//   "):
            fields[key] += " " + text
        else:
            key = None
    return fields, []


def test_fixture_set() -> None:
    # Both kinds are present, so no parametrized test below runs on nothing.
    assert UNFIXED and FIXED


@pytest.mark.parametrize("name", ALL)
def test_fixture_header_names_tag_commit_path(name: str) -> None:
    fields, body = _header(name)
    assert fields["Upstream"] == "https://github.com/pytorch/pytorch"
    assert fields["Path"] == UPSTREAM_PATH
    assert {"Tag", "Commit", "Verified", "Verbatim"} <= fields.keys()
    assert re.fullmatch(r"[0-9a-f]{40}", fields["Commit"])
    # Only text read from a real repository at a named commit: no shape
    # written here, and no text whose origin could not be checked.
    if fields["Verified"] == "yes":
        # A release, read from a source tarball of that tag.
        kind = "upstream"
        assert name.startswith("v") and fields["Tag"] == name.removesuffix(".cpp")
        assert "sha256" in fields["Source"] and "git blob" in fields["Source"]
    else:
        # Read from a fork: it says so and why, names the fork, and never
        # stands for a release.
        kind = "fork"
        assert fields["Verified"].startswith("fork -- "), fields["Verified"]
        assert re.fullmatch(r"[\w.-]+/[\w.-]+", fields["Fork"])
        assert fields["Fork"] != "pytorch/pytorch"
        assert fields["Tag"].startswith("none") and not name.startswith("v")
    # The kept ranges and the "omitted" markers tile the source from line 1 on.
    ranges = re.fullmatch(rf"{kind} lines (.*)", fields["Verbatim"]).group(1)
    kept = [tuple(map(int, (r.split("-") * 2)[:2])) for r in ranges.split(", ")]
    assert body[0] == "" and body[-1] == ""
    line, pieces = 1, []
    for text in body[1:-1]:
        omitted = re.fullmatch(rf"// \[fixture\] {kind} lines (\d+)-(\d+) omitted: .+", text)
        if omitted:
            first, last = map(int, omitted.groups())
            assert first == line and last >= first
            line = last + 1
        else:
            if pieces and pieces[-1][1] == line - 1:
                pieces[-1] = (pieces[-1][0], line)
            else:
                pieces.append((line, line))
            line += 1
    assert pieces == kept
    # ... and run to the source's last line (the header says how many).
    total = re.search(r"(\d+) lines", fields.get("Source", "") + fields["Verified"])
    assert total and kept[-1][1] == int(total.group(1))


@pytest.mark.parametrize("name", [n for n in ALL if n.startswith("v")])
def test_fixture_commit_is_builtin_py_torch(name: str) -> None:
    """The tag and commit are those the pinned builtin py-torch builds."""
    builtin = paths.builtin_repo() / "packages" / "py_torch" / "package.py"
    if not builtin.exists():
        pytest.skip(f"{builtin} missing: run make setup")
    fields, _ = _header(name)
    tag = fields["Tag"]
    line = f'version("{tag[1:]}", tag="{tag}", commit="{fields["Commit"]}")'
    assert line in builtin.read_text()


@pytest.mark.parametrize("name", UNFIXED)
def test_patch_adds_honest_mpich_branch(name: str) -> None:
    source = _source(name)
    patched = patch.patch_source(source)
    body = _function(patched)
    # The MPICH branch sits between the Open MPI branch and the final #else.
    assert body.index("#if defined(MPIX_CUDA_AWARE_SUPPORT)") < body.index(
        "#elif defined(MPICH_VERSION)"
    )
    assert body.rindex("#elif defined(MPICH_VERSION)") < body.rindex("#else")
    assert "return torchmpiMpichCudaAware();" in body
    # Everything else still says "not CUDA-aware": no blind `return true`.
    assert body.rstrip().endswith("#endif // MPIX_CUDA_AWARE_SUPPORT") or body.rstrip().endswith(
        "#endif"
    )
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
    # The Open MPI branch is untouched, and nothing but the three insertions changed.
    assert _function(source).split("#else")[0] in body
    removed = patched.replace(patch._INCLUDES, "", 1).replace(patch._HELPER, "", 1)
    assert removed.replace(patch._BRANCH, "", 1) == source


@pytest.mark.parametrize("name", ALL)
def test_patch_is_idempotent(name: str) -> None:
    once = patch.patch_source(_source(name))
    assert patch.has_mpich_branch(once)
    assert patch.patch_source(once) == once


@pytest.mark.parametrize("name", FIXED)
def test_source_with_mpich_branch_is_unchanged(tmp_path: Path, name: str) -> None:
    source = _source(name)
    assert patch.has_mpich_branch(source)
    target = tmp_path / "ProcessGroupMPI.cpp"
    target.write_text(source)
    assert patch.patch_file(str(target)) is False
    assert target.read_text() == source


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
        pytest.skip("no C++ compiler")
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


@pytest.mark.parametrize("name", UNFIXED)
def test_unpatched_source_rejects_cuda_tensors_on_mpich(tmp_path: Path, name: str) -> None:
    """The bug being fixed: MPICH is never CUDA-aware to stock PyTorch."""
    exe = _build(tmp_path, _source(name), "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1", STUB_GPU_QUERY="1") == "rejected"


@pytest.mark.parametrize("name", UNFIXED)
def test_patched_check_follows_cray_switch(tmp_path: Path, name: str) -> None:
    exe = _build(tmp_path, patch.patch_source(_source(name)), "mpich")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "accepted"
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"
    assert _run(exe) == "rejected"  # plain MPICH without the query API: not CUDA-aware


@pytest.mark.parametrize("name", UNFIXED)
def test_patched_check_asks_mpich4_library(tmp_path: Path, name: str) -> None:
    exe = _build(tmp_path, patch.patch_source(_source(name)), "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, STUB_GPU_QUERY="1") == "accepted"
    assert _run(exe, STUB_GPU_QUERY="0") == "rejected"
    # The Cray switch, when set, is the answer even if the library says yes.
    assert _run(exe, STUB_GPU_QUERY="1", MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"


@pytest.mark.parametrize("name", FIXED)
def test_upstream_mpich_branch_follows_cray_switch(tmp_path: Path, name: str) -> None:
    """Left unpatched, upstream's own branch answers as the patch would for Cray."""
    exe = _build(tmp_path, patch.patch_source(_source(name)), "mpich", "-DSTUB_MPIX_GPU")
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="1") == "accepted"
    assert _run(exe, MPICH_GPU_SUPPORT_ENABLED="0") == "rejected"


@pytest.mark.parametrize("name", ALL)
def test_patched_check_keeps_open_mpi_path(tmp_path: Path, name: str) -> None:
    exe = _build(tmp_path, patch.patch_source(_source(name)), "openmpi")
    assert _run(exe) == "accepted"


def test_patcher_digest_is_in_the_package_file() -> None:
    """Spack hashes py_torch/package.py, not the modules it imports: the
    patcher's sha256 is written there, so changing the patcher changes the
    package hash (and patch() refuses a patcher whose digest differs)."""
    import hashlib
    import re

    package = (ROOT / "spack_repo/torchmpi/packages/py_torch/package.py").read_text()
    recorded = re.search(r'^CUDA_AWARE_MPI_SHA256 = "([0-9a-f]{64})"$', package, re.MULTILINE)
    assert recorded, "CUDA_AWARE_MPI_SHA256 missing from py_torch/package.py"
    patcher = ROOT / "spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py"
    assert recorded.group(1) == hashlib.sha256(patcher.read_bytes()).hexdigest(), (
        "cuda_aware_mpi.py changed: update CUDA_AWARE_MPI_SHA256 in py_torch/package.py")


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
