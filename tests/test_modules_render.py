"""Rendered module configuration and the one-source rule for runtime variables (no Spack needed).

The live behaviour (Lmod, ``spack env activate``) is in test_modules.py; here
the rendered files are read as YAML so every site and the Tcl variant are
covered in milliseconds.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml
from torchmpi import paths, runtime
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.errors import UserError

COMMITTED = ["alps-gh200", "derecho", "generic-ib", "perlmutter"]


def _rendered(site: sitemod.Site, tmp_path: Path) -> dict[str, str]:
    return renderer.render(site, tmp_path / site.name)


def _site(tmp_path: Path, name: str, edit=None) -> sitemod.Site:
    data = yaml.safe_load((paths.sites_dir() / f"{name}.yaml").read_text())
    if edit:
        edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return sitemod.load(str(path))


def _runtime_sh(text: str) -> dict[str, str]:
    out = {}
    for line in text.splitlines():
        if line.startswith("export "):
            key, _, value = line[len("export "):].partition("=")
            out[key] = shlex.split(value)[0]
    return out


@pytest.mark.parametrize("name", COMMITTED)
def test_three_renderings_of_the_runtime_agree(name: str, tmp_path: Path) -> None:
    """runtime.sh, spack.yaml env_vars and the py-torch-mpi module: one mapping."""
    site = sitemod.load(name)
    files = _rendered(site, tmp_path)
    expected = runtime.environment(site.data)
    mods = yaml.safe_load(files["modules.yaml"])["modules"]["default"]["lmod"]
    assert mods["py-torch-mpi"]["environment"]["set"] == expected
    assert yaml.safe_load(files["spack.yaml"])["spack"]["env_vars"]["set"] == expected
    assert _runtime_sh(files["runtime.sh"]) == expected
    assert list(expected.items())[: len(site.data["runtime"]["env"])] == [
        (k, str(v)) for k, v in site.data["runtime"]["env"].items()]


@pytest.mark.parametrize("name", COMMITTED)
def test_lmod_layout(name: str, tmp_path: Path) -> None:
    site = sitemod.load(name)
    default = yaml.safe_load(_rendered(site, tmp_path)["modules.yaml"])["modules"]["default"]
    assert default["enable:"] == ["lmod"]
    lmod = default["lmod"]
    assert lmod["core_compilers"] == [c["spec"] for c in site.data["compilers"]]
    assert lmod["hierarchy"] == ["mpi"]
    assert lmod["hide_implicits"] is True and lmod["hash_length"] == 0
    assert lmod["all"]["autoload"] == "direct"
    keys = list(lmod["projections"])
    assert keys.index("py-torch-mpi+cuda") < keys.index("py-torch-mpi") < keys.index("all")
    root = site.data.get("install", {}).get("modules_root")
    assert default.get("roots", {}).get("lmod") == root


def test_tcl_site(tmp_path: Path) -> None:
    site = _site(tmp_path, "generic-ib",
                 lambda d: d.setdefault("install", {}).update(module_system="tcl",
                                                              modules_root="/apps/modules"))
    default = yaml.safe_load(_rendered(site, tmp_path)["modules.yaml"])["modules"]["default"]
    assert default["enable:"] == ["tcl"] and default["roots"] == {"tcl": "/apps/modules"}
    tcl = default["tcl"]
    assert "hierarchy" not in tcl and "core_compilers" not in tcl
    assert tcl["projections"]["py-torch-mpi+cuda"].endswith("-{^mpi.name}")
    assert tcl["py-torch-mpi"]["environment"]["set"] == {
        "NCCL_SOCKET_IFNAME": "^docker0,lo", "NCCL_DEBUG": "WARN"}


def test_cray_gpu_switch_added_with_gtl(tmp_path: Path) -> None:
    def drop(d):
        del d["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"]

    site = _site(tmp_path, "derecho", drop)
    assert runtime.environment(site.data)["MPICH_GPU_SUPPORT_ENABLED"] == "1"
    assert "export MPICH_GPU_SUPPORT_ENABLED=1" in _rendered(site, tmp_path)["runtime.sh"]


def test_cray_gpu_switch_contradicting_gtl_is_rejected(tmp_path: Path) -> None:
    def zero(d):
        d["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = 0

    with pytest.raises(UserError, match=r"MPICH_GPU_SUPPORT_ENABLED: must be 1 here"):
        _site(tmp_path, "derecho", zero)

    def gtl_off_but_switch_on(d):
        d["mpi"]["cuda_aware"] = False
        d["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = 1

    with pytest.raises(UserError, match=r"must be 0 here.*links no GTL"):
        _site(tmp_path, "derecho", gtl_off_but_switch_on)


def test_alps_runs_without_gpu_aware_mpi(tmp_path: Path) -> None:
    """CSCS's choice (MPI-with-NCCL deadlock warning): no GTL, switch 0, nothing added."""
    env = runtime.environment(sitemod.load("alps-gh200").data)
    assert env["MPICH_GPU_SUPPORT_ENABLED"] == "0"


@pytest.mark.spack
def test_slingshot_sites_state_every_package_default(spack) -> None:
    """Both user paths agree only if the site file covers what the packages set.

    (The module path has package defaults underneath; ``spack env activate``
    with ``view: false`` has only the site's values.)
    """
    code = (
        "import spack.repo\n"
        "cls = spack.repo.PATH.get_pkg_class('nccl-ss11')\n"
        "print(' '.join(name for name, _ in cls.slingshot_defaults))\n"
    )
    names = set(spack.python(code).stdout.split()) | {"NCCL_NET"}
    assert "FI_CXI_DISABLE_HOST_REGISTER" in names
    for name in COMMITTED:
        site = sitemod.load(name)
        if site.data["fabric"] == "slingshot":
            missing = names - set(runtime.environment(site.data))
            assert not missing, f"{name}: runtime.env lacks package-set {sorted(missing)}"
