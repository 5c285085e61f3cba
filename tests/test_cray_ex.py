"""The Cray EX stand-in is what its manifest says, and the manifest says where each fact is from.

tests/cray_ex.py builds tests/fixtures/cray_ex/manifest.yaml with gcc; here
``readelf`` (binutils, not the builder) reads the built files back, so a
builder that dropped a NEEDED entry, a RUNPATH or a symbol version would be
caught before the tests that rely on them pass for the wrong reason.
"""

from __future__ import annotations

import re
import subprocess

import pytest
from support import cray_ex


@pytest.fixture(scope="module")
def gpu(tmp_path_factory) -> cray_ex.Node:
    return cray_ex.build(tmp_path_factory.mktemp("gpu"), "gpu")


def test_every_entry_cites_its_source() -> None:
    """An entry without ``source`` is a stand-in nobody can check against the record."""
    data = cray_ex.manifest()
    for key, entry in data["libraries"].items():
        assert len(entry.get("source", "")) > 20, f"{key}: no source"
        assert entry["path"].startswith("/"), key


def test_built_libraries_match_the_manifest(gpu) -> None:
    """SONAME, NEEDED (in order), RUNPATH as laid out; every NEEDED resolves on the node."""
    cray_ex.assert_libraries_match_manifest(gpu)  # ROCm's entries: tests/test_gtl_hsa.py
    ldd = subprocess.run(["ldd", str(gpu.path("libmpi"))], env=gpu.env(), check=True,
                         capture_output=True, text=True).stdout
    assert "not found" not in ldd, ldd
    for soname in ("libpmi.so.0", "libpmi2.so.0", "libpals.so.0", "libfabric.so.1",
                   "libcxi.so.1", "libxpmem.so.0"):
        assert f"{soname} => {gpu.root}" in ldd, (soname, ldd)


def test_gtl_forms_leave_undefined_what_the_record_shows(gpu) -> None:
    """8.1.21: C++ runtime undefined, no libstdc++ NEEDED; 8.1.27: CUDA runtime and
    driver undefined, nothing CUDA NEEDED; 8.1.30: cudart symbols versioned
    ``@libcudart.so.12`` (NEEDED), the driver's unversioned."""
    syms = {form: cray_ex.readelf("--dyn-syms", str(gpu.path(f"gtl-{form}")))
            for form in ("8.1.21", "8.1.27", "8.1.30")}
    undef = {form: set(re.findall(r"UND (\S+)$", text, re.MULTILINE))
             for form, text in syms.items()}
    assert {"__gxx_personality_v0", "_ZNSt13runtime_errorD1Ev"} <= undef["8.1.21"]
    assert {"cudaMemcpy", "cuCtxEnablePeerAccess"} <= undef["8.1.27"]
    assert "cudaFree@libcudart.so.12 (2)" in syms["8.1.30"] or any(
        s.startswith("cudaFree@libcudart.so.12") for s in undef["8.1.30"]), syms["8.1.30"]
    assert "cuCtxEnablePeerAccess" in undef["8.1.30"]
    for form in undef:
        dyn = cray_ex.readelf("-d", str(gpu.path(f"gtl-{form}")))
        assert "libstdc++" not in dyn, form


def test_the_driver_is_on_gpu_nodes_only(tmp_path, gpu) -> None:
    login = cray_ex.build(tmp_path, "login")
    assert gpu.has("libcuda") and not login.has("libcuda")
    assert gpu.has("libcudart") and login.has("libcudart")
