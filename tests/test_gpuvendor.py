"""The GPU vendor axis: ``gpu.vendor: amd`` sites, refused early and answered in one place.

Every refusal is shown over a broken copy of a shipped AMD site (Frontier):
the error names the file with line:column at the key, the key path and what
is allowed, before any solve.  The rules read the pinned builtin repository
(``build_systems/rocm.py``, ``packages/py_torch``, ``packages/cray_mpich``),
so these tests need its files but no Spack run.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from torchmpi import gpuvendor, pairs, paths, runtime
from torchmpi import site as sitemod
from torchmpi.errors import UserError

AMD_SITE = "frontier"


def _write(tmp_path: Path, edit) -> Path:
    data = yaml.safe_load((paths.sites_dir() / f"{AMD_SITE}.yaml").read_text())
    edit(data)
    path = tmp_path / f"{AMD_SITE}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def refused(tmp_path: Path, edit, key: str, *words: str) -> str:
    """The error line for ``key``; it points at a line of the copy that states ``key``'s
    last part (or its parent, for a missing key) and contains every one of ``words``."""
    path = _write(tmp_path, edit)
    with pytest.raises(UserError) as err:
        sitemod.load(str(path))
    lines = [s for s in str(err.value).splitlines() if f": {key}: " in s]
    line = next((s for s in lines if all(w in s for w in words)), None)
    assert line, str(err.value)
    found = re.search(rf"{re.escape(str(path))}:(\d+):(\d+): ", line)
    assert found, line
    text = path.read_text().splitlines()[int(found.group(1)) - 1]
    assert text.strip().split(":")[0] in key.split(".") or text.strip().startswith("- "), text
    return line


def test_the_shipped_amd_site_answers_as_amd() -> None:
    site = sitemod.load(AMD_SITE)
    assert site.gpu_vendor == "amd" and site.gtl_library == "libmpi_gtl_hsa"
    assert site.rocm == {"version": "7.1.1", "prefix": "/opt/rocm-7.1.1",
                         "modules": ["rocm/7.1.1", "craype-accel-amd-gfx90a"]}
    assert site.amdgpu_targets == ["gfx90a"] and site.cuda_archs == [] and not site.cuda_arch
    assert site.root_spec == ("py-torch-mpi ~cuda +rocm amdgpu_target=gfx90a +cuda_aware_mpi"
                              " fabric=slingshot")
    assert runtime.environment(site.data)["MPICH_GPU_SUPPORT_ENABLED"] == "1"


def test_lumi_answers_as_amd_with_its_rocm_as_externals() -> None:
    """LUMI-G: ROCm 7.0.3, which builtin has no release of, so its RCCL and the other
    libraries torch links are the site's externals at the ROCm prefix, built for gfx90a."""
    site = sitemod.load("lumi")
    assert site.gpu_vendor == "amd" and site.amdgpu_targets == ["gfx90a"]
    assert site.rocm["version"] == "7.0.3" and site.rocm["prefix"] == "/opt/rocm-7.0.3"
    pair = pairs.rccl("7.0.3")
    assert pair is not None and (pair.rocm, pair.plugin, pair.by) == ("7.0.3", "1.20.0", "LUMI")
    rocm = {e["spec"].split("@")[0]: e for e in site.data["externals"]}
    assert "rccl" in rocm and "rocblas" in rocm and "miopen-hip" in rocm
    for name, ext in rocm.items():
        assert ext["spec"].startswith(f"{name}@7.0.3"), ext
        assert ext["prefix"] == "/opt/rocm-7.0.3" and ext["buildable"] is False, ext


@pytest.mark.parametrize("name", [n for n in sitemod.available() if n not in (AMD_SITE, "lumi")])
def test_nvidia_is_the_default_vendor(name: str) -> None:
    try:
        site = sitemod.load(name)
    except UserError:
        pytest.skip(f"{name} does not load here (another change in progress)")
    if site.gpu:
        assert "vendor" not in site.gpu or site.gpu["vendor"] == "nvidia"
        assert site.gpu_vendor == "nvidia" and site.gtl_library == "libmpi_gtl_cuda"
        assert site.rocm is None and site.amdgpu_targets == []
    else:
        assert site.gpu_vendor is None and site.gtl_library is None


def test_the_schema_default_is_nvidia() -> None:
    schema = yaml.safe_load((paths.root() / "wrapper/torchmpi/schema/site.schema.json")
                            .read_text())
    vendor = schema["properties"]["gpu"]["oneOf"][1]["properties"]["vendor"]
    assert vendor["default"] == gpuvendor.DEFAULT == "nvidia"
    assert vendor["enum"] == sorted(gpuvendor.table(), reverse=True)


def test_gtl_naming_is_builtin_cray_mpichs() -> None:
    """data/gpu_vendors.yaml says what builtin cray-mpich's gtl_lib says, per vendor."""
    text = (paths.builtin_repo() / "packages/cray_mpich/package.py").read_text()
    for vendor, row in gpuvendor.table().items():
        found = re.search(rf'"{row["cray_mpich_variant"]}": {{\s*"lib": "(\w+)",\s*'
                          rf'"variant": "(\w+)",\s*"values": {{([^}}]*)}}', text)
        assert found, vendor
        assert found.group(1) == row["gtl"] and found.group(2) == row["arch_variant"]
        assert set(re.findall(r'"(\w+)"', found.group(3))) == {str(a) for a in row["gtl_archs"]}


def test_rules_read_the_pinned_builtin() -> None:
    assert "gfx90a" in gpuvendor.known_targets() and "gfx942" in gpuvendor.known_targets()
    assert gpuvendor.llvm_minimums()["gfx942"] == "5.7.0"
    assert gpuvendor.torch_rocm_problem("2.10.0", "7.1.1") is None
    assert gpuvendor.torch_rocm_problem("2.10.0", "6.2.4") == "6.3.2:"
    assert gpuvendor.torch_rocm_problem("2.5.1", "7.1.1") == ":6.3.2"
    assert "conflicts" in gpuvendor.torch_rocm_problem("2.4.1", "7.1.1")


def test_unknown_amdgpu_target(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["amdgpu_target"] = "gfx91a"
    line = refused(tmp_path, edit, "gpu.amdgpu_target", "'gfx91a'")
    assert "not an AMD GPU target builtin ROCmPackage knows; allowed:" in line
    assert "gfx90a" in line


def test_amdgpu_target_the_rocm_cannot_build(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"].update(model="AMD Instinct MI300A", amdgpu_target="gfx942")
        d["gpu"]["rocm"].update(version="5.6.1", prefix="/opt/rocm-5.6.1")
        d["torch"]["versions"] = ["2.2.2"]
    line = refused(tmp_path, edit, "gpu.amdgpu_target", "needs ROCm")
    assert "'gfx942' needs ROCm 5.7.0 or newer (builtin ROCmPackage: llvm-amdgpu@5.7.0:" in line
    assert "the site's ROCm is 5.6.1" in line


def test_amdgpu_target_without_cray_gtl_for_hsa(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"].update(model="AMD Radeon PRO W7900", amdgpu_target="gfx1100")
    line = refused(tmp_path, edit, "gpu.amdgpu_target", "GTL")
    assert "libmpi_gtl_hsa" in line and "no GTL support could be found" in line
    assert "allowed: gfx906, gfx908, gfx90a, gfx940, gfx942, or mpi.cuda_aware: false" in line


def test_amdgpu_target_not_the_models(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["amdgpu_target"] = "gfx942"
    line = refused(tmp_path, edit, "gpu.amdgpu_target", "is not the target of")
    assert "AMD Instinct MI250X" in line and "allowed: gfx90a" in line


def test_torch_release_the_rocm_cannot_build(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["torch"]["versions"] = ["2.5.1"]
    line = refused(tmp_path, edit, "torch.versions[0]", "ROCm")
    assert "torch 2.5.1 needs ROCm :6.3.2 (builtin py-torch +rocm)" in line
    assert "this site has ROCm 7.1.1" in line and "2.10.0" in line

    def no_rocm(d: dict) -> None:
        d["torch"]["versions"] = ["2.4.1"]
    line = refused(tmp_path, no_rocm, "torch.versions[0]", "ROCm")
    assert "builtin py-torch conflicts +rocm there" in line


def test_unpinned_torch_and_a_rocm_no_current_release_can_use(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        del d["torch"]
        d["gpu"]["rocm"].update(version="6.2.4", prefix="/opt/rocm-6.2.4")
    line = refused(tmp_path, edit, "gpu.rocm.version", "no current py-torch release")
    assert "2.10.0 needs 6.3.2:" in line and "allowed: a newer ROCm" in line


def test_rocm_without_a_vouched_rccl_pair(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["rocm"].update(version="7.2.0", prefix="/opt/rocm-7.2.0")
    line = refused(tmp_path, edit, "gpu.rocm.version", "vouches")
    assert "no source vouches for RCCL 7.2.0 with the aws-ofi-nccl plugin on Slingshot" in line
    assert "7.1.1 (aws-ofi-nccl 1.19.2, OLCF)" in line
    assert "6.4.0 (aws-ofi-nccl 1.19.0, HPE)" in line
    assert "7.0.3 (aws-ofi-nccl 1.20.0, LUMI)" in line


def test_nvidia_keys_in_an_amd_gpu_section(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["cuda_arch"] = 80
    line = refused(tmp_path, edit, "gpu.cuda_arch", "vendor: amd")
    assert "allowed here: amdgpu_target, rocm (one GPU vendor per site file)" in line


def test_missing_rocm_and_a_bad_rocm_version(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        del d["gpu"]["rocm"]
    line = refused(tmp_path, edit, "gpu.rocm", "missing")
    assert "missing required key 'rocm'" in line

    def short(d: dict) -> None:
        d["gpu"]["rocm"]["version"] = "7.1"
    line = refused(tmp_path, short, "gpu.rocm.version", "'7.1'")
    assert "allowed: a ROCm release as MAJOR.MINOR.PATCH" in line


def test_nccl_pin_on_an_amd_site(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["nccl"] = {"version": "2.27.7-1", "plugin": "1.17.1"}
    line = refused(tmp_path, edit, "nccl", "RCCL")
    assert "allowed: no nccl key" in line


def test_runtime_centre(tmp_path: Path) -> None:
    def unknown(d: dict) -> None:
        d["runtime"]["centre"] = "ornl"
    line = refused(tmp_path, unknown, "runtime.centre", "'ornl'")
    assert "allowed: olcf" in line

    def job_variables(d: dict) -> None:
        d["runtime"]["centre"] = "lumi"
    line = refused(tmp_path, job_variables, "runtime.centre", "lumi")
    assert "refer to job variables" in line


def test_render_refuses_with_no_traceback(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["amdgpu_target"] = "gfx91a"
    path = _write(tmp_path, edit)
    proc = subprocess.run([sys.executable, "-m", "torchmpi", "render", str(path),
                           "--out", str(tmp_path / "env")], capture_output=True, text=True,
                          check=False)
    assert proc.returncode != 0 and "Traceback" not in proc.stderr
    assert f"{path}:" in proc.stderr and "gpu.amdgpu_target" in proc.stderr
    assert not (tmp_path / "env").exists()


def test_amd_runtime_layers_vendor_and_centre() -> None:
    """HSA_FORCE_FINE_GRAIN_PCIE for every AMD site, OLCF's values on top with
    runtime.centre, and NCCL_NET only where the job spans nodes (runtime.sh)."""
    data = sitemod.load(AMD_SITE).data
    rt = runtime.resolve(data)
    assert rt.set["HSA_FORCE_FINE_GRAIN_PCIE"] == "1"
    assert rt.set["FI_MR_CACHE_MONITOR"] == "kdreg2"
    assert rt.set["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"
    assert "NCCL_NET" not in rt.set and rt.by_nodes == {"NCCL_NET": ("OFI", "Socket")}
    # The module and env_vars unset it: aws-ofi-nccl's run environment sets NCCL_NET,
    # which would make RCCL abort in a one-node job on Frontier.
    assert "NCCL_NET" not in rt.spack().get("set", {}) and rt.spack()["unset"] == ["NCCL_NET"]
    assert ('if [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]; then export NCCL_NET=OFI;'
            " else export NCCL_NET=Socket; fi") in runtime.shell_lines(rt)
    assert any("pytorch_frontier.rst:714" in src for _, src in rt.sources)
    without = dict(data, runtime={"source": "x"})
    plain = runtime.resolve(without)
    assert plain.set["HSA_FORCE_FINE_GRAIN_PCIE"] == "1" and plain.set["NCCL_NET"]
    assert plain.set["FI_MR_CACHE_MONITOR"] == "userfaultfd" and not plain.by_nodes


def test_reframe_selects_amd_gpu_features() -> None:
    """ReFrame's AMD GPU feature (amdgpu, as CSCS's checks spell it) and the device arch
    as AMD names it; the nccl checks run, torch's nccl backend being RCCL there."""
    from torchmpi import reframe

    site = sitemod.load(AMD_SITE)
    feats = reframe.features(site)
    assert {"gpu", "amdgpu", "rocm", "nccl", "cuda-aware-mpi"} <= set(feats)
    assert "nvgpu" not in feats and "cuda" not in feats
    assert site.sm_arch == "gfx90a"


def test_the_amd_module_names_its_rocm(tmp_path: Path) -> None:
    """py-torch-mpi/<torch>-rocm<hip>; NVIDIA sites keep their projections unchanged."""
    from torchmpi import render as renderer

    files = renderer.render(sitemod.load(AMD_SITE), tmp_path / "env")
    lmod = yaml.safe_load(files["modules.yaml"])["modules"]["default"]["lmod"]
    first = next(iter(lmod["projections"].items()))
    assert first == ("py-torch-mpi+rocm", "{name}/{^py-torch.version}-rocm{^hip.version}")
    nvidia = renderer.render(sitemod.load("perlmutter"), tmp_path / "nv")["modules.yaml"]
    assert "+rocm" not in nvidia
