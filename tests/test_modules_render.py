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
from support.sites import edited_site as _site
from torchmpi import render as renderer
from torchmpi import runtime
from torchmpi import site as sitemod
from torchmpi.errors import UserError


def committed() -> list[str]:
    """The sites whose environment is committed: every site file but the host-detected ones."""
    return [n for n in sitemod.available() if not sitemod.load(n).is_local]


COMMITTED = committed()


def _rendered(site: sitemod.Site, tmp_path: Path) -> dict[str, str]:
    return renderer.render(site, tmp_path / site.name)




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
    resolved = runtime.resolve(site.data)
    # by_nodes values (OLCF's NCCL_NET) branch on the job's node count: runtime.sh only.
    expected = dict(resolved.set)
    branches = [s for s in files["runtime.sh"].splitlines() if s.startswith("if ")]
    assert len(branches) == len(resolved.by_nodes)
    mods = yaml.safe_load(files["modules.yaml"])["modules"]["default"]["lmod"]
    # A site without runtime values (JUPITER: JSC's own modules set UCX and MPI
    # values; fabric ib has no defaults) renders no `environment` and no `env_vars`.
    assert mods["py-torch-mpi"].get("environment", {}).get("set", {}) == expected
    env_vars = yaml.safe_load(files["spack.yaml"])["spack"].get("env_vars", {})
    assert env_vars.get("set", {}) == expected
    assert _runtime_sh(files["runtime.sh"]) == expected
    for key, value in site.data.get("runtime", {}).get("env", {}).items():
        assert expected[key] == str(value)  # the site's value wins over a fabric default


@pytest.mark.parametrize("name", COMMITTED)
def test_lmod_layout(name: str, tmp_path: Path) -> None:
    site = sitemod.load(name)
    default = yaml.safe_load(_rendered(site, tmp_path)["modules.yaml"])["modules"]["default"]
    assert default["enable:"] == ["lmod"]
    lmod = default["lmod"]
    assert lmod["core_compilers"] == [c["spec"] for c in site.data["compilers"]]
    centre = site.data["mpi"].get("modules")
    if centre:  # `hierarchy::`, or Spack's default [mpi] is merged back in
        assert lmod["hierarchy:"] == [] and "hierarchy" not in lmod
    else:
        assert lmod["hierarchy"] == ["mpi"]
    assert lmod["hide_implicits"] is True and lmod["hash_length"] == 0
    assert lmod["all"]["autoload"] == "direct"
    keys = list(lmod["projections"])
    assert keys.index("py-torch-mpi+cuda") < keys.index("py-torch-mpi") < keys.index("all")
    # named by the torch release it carries, and the CUDA it was built with
    assert lmod["projections"]["py-torch-mpi+cuda"].startswith(
        "{name}/{^py-torch.version}-cuda{^cuda.version}")
    assert lmod["projections"]["py-torch-mpi"].startswith("{name}/{^py-torch.version}")
    root = site.data.get("install", {}).get("modules_root")
    assert default.get("roots", {}).get("lmod") == root


@pytest.mark.parametrize("name", COMMITTED)
def test_the_centres_mpi_module_is_not_shadowed(name: str, tmp_path: Path) -> None:
    """A site whose MPI comes from the centre's module (``mpi.modules``) gets no
    MPI module of its own (it would shadow the centre's, which NCAR loads by
    default): the MPI is excluded and py-torch-mpi loads the centre's module."""
    site = sitemod.load(name)
    lmod = yaml.safe_load(_rendered(site, tmp_path)["modules.yaml"])["modules"]["default"]["lmod"]
    mpi = site.data["mpi"]
    centre = mpi.get("modules")
    if centre:
        assert f"{mpi['kind']}@{mpi['version']}" in lmod.get("exclude", []), lmod
        assert lmod["py-torch-mpi"]["load"][:len(centre)] == centre
    else:
        assert not any(e.startswith(mpi["kind"]) for e in lmod.get("exclude", []))


def _declared(site: sitemod.Site) -> list[tuple[str, dict]]:
    """(site-file key, entry) of every external the site file declares."""
    d = site.data
    out = [("mpi", dict(d["mpi"], spec=f"{d['mpi']['kind']}@{d['mpi'].get('version')}"))]
    out += [("libfabric", d["libfabric"])] if d.get("libfabric") else []
    out += [(f"gpu.{k}", site.gpu[k]) for k in ("cuda", "cudnn") if (site.gpu or {}).get(k)]
    out += [("compilers", c) for c in d["compilers"]] if isinstance(d["compilers"], list) else []
    extra = d.get("externals")
    out += [("externals", e) for e in extra] if isinstance(extra, list) else []
    return out


@pytest.mark.parametrize("name", COMMITTED)
def test_no_centre_module_is_shadowed(name: str, tmp_path: Path) -> None:
    """Every external the site file gives a centre module (``modules:``) is
    excluded from the tree by its ``name@version``; py-torch-mpi loads the
    centre modules of its run-time pieces (MPI, libfabric, CUDA, cuDNN), never a
    compiler's.  An external without a centre module keeps its tree module.  The
    site's ROCm modules are loaded too, also where another external names them
    (LUMI-G's ROCm libraries, in ``externals`` under ``rocm/7.0.3``)."""
    site = sitemod.load(name)
    lmod = yaml.safe_load(_rendered(site, tmp_path)["modules.yaml"])["modules"]["default"]["lmod"]
    excluded = lmod.get("exclude", [])
    loads = lmod.get("py-torch-mpi", {}).get("load", [])
    rocm = set(((site.gpu or {}).get("rocm") or {}).get("modules") or [])
    for key, ext in _declared(site):
        head = ext["spec"].split()[0]
        if not ext.get("modules"):
            assert head not in excluded, (key, excluded)
            continue
        assert head in excluded, (key, head, excluded)
        runtime_piece = key in ("mpi", "libfabric", "gpu.cuda", "gpu.cudnn")
        assert all((m in loads) == (runtime_piece or m in rocm) for m in ext["modules"]), (
            key, loads)
    assert len(loads) == len(set(loads)), loads
    if name == "derecho":
        assert loads == ["cray-mpich/8.1.27", "cuda/12.2.1", "cudnn/8.8.1.3-12"]
        assert excluded == ["cray-mpich@8.1.27", "cuda@12.2.1", "cudnn@8.8.1.3-12", "gcc@12.2.0"]


def test_centre_modules_of_other_externals(tmp_path: Path) -> None:
    """An ``externals`` entry with a centre module is excluded; only a python's
    is loaded too (py-torch-mpi's interpreter), a build tool's or a python
    package's is not.  Tcl (no hierarchy) excludes and loads the same; the
    comment lists the loads."""
    def edit(d):
        d["externals"] += [{"spec": "python@3.11.6", "modules": ["python/3.11.6"]},
                           {"spec": "ninja@1.11.1", "modules": ["ninja/1.11.1"]},
                           # built on a python, but no python: excluded, not loaded
                           {"spec": "py-numpy@1.25.2 ^python@3.11.6",
                            "modules": ["py-numpy/1.25.2"]}]
        d["gpu"]["cuda"]["modules"] = ["cuda/12.2.1", "ncarenv/23.09"]
        d["gpu"]["cudnn"]["modules"] = ["cudnn/8.8.1.3-12", "ncarenv/23.09"]
        d.setdefault("install", {})["module_system"] = "tcl"

    site = _site(tmp_path, "derecho", edit)
    text = _rendered(site, tmp_path)["modules.yaml"]
    tcl = yaml.safe_load(text)["modules"]["default"]["tcl"]
    assert {"python@3.11.6", "ninja@1.11.1", "py-numpy@1.25.2",
            "cuda@12.2.1"} <= set(tcl["exclude"])
    assert tcl["py-torch-mpi"]["load"] == ["cray-mpich/8.1.27", "cuda/12.2.1", "ncarenv/23.09",
                                           "cudnn/8.8.1.3-12", "python/3.11.6"]
    comments = " ".join(line[2:] for line in text.splitlines() if line.startswith("# "))
    assert "cuda/12.2.1, ncarenv/23.09, cudnn/8.8.1.3-12, python/3.11.6." in comments


def test_no_exclude_without_centre_modules(tmp_path: Path) -> None:
    def drop(d):
        for ext in (d["mpi"], d["gpu"]["cuda"], d["gpu"]["cudnn"], *d["compilers"]):
            ext.pop("modules", None)

    site = _site(tmp_path, "derecho", drop)
    text = _rendered(site, tmp_path)["modules.yaml"]
    lmod = yaml.safe_load(text)["modules"]["default"]["lmod"]
    assert "exclude" not in lmod and "load" not in lmod["py-torch-mpi"]
    assert lmod["hierarchy"] == ["mpi"]
    assert "exclude:" not in text.split("modules:")[0]


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
        "NCCL_SOCKET_IFNAME": "^lo,docker,virbr,lxcbr,cni,podman,veth,br",
        "NCCL_DEBUG": "WARN"}


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

    with pytest.raises(UserError, match=r"must be 0 here.*loads no GTL"):
        _site(tmp_path, "derecho", gtl_off_but_switch_on)


def test_alps_runs_without_gpu_aware_mpi(tmp_path: Path) -> None:
    """CSCS's choice (MPI-with-NCCL deadlock warning): no GTL, switch 0, nothing added."""
    env = runtime.environment(sitemod.load("alps-gh200").data)
    assert env["MPICH_GPU_SUPPORT_ENABLED"] == "0"


@pytest.mark.spack
def test_slingshot_fabric_defaults_cover_every_package_default(spack) -> None:
    """`spack env activate` (view: false) has only the rendered variables; `module load`
    has the package defaults underneath.  Both agree only if the Slingshot fabric
    defaults carry every package-set variable with the package's value.
    """
    code = (
        "import spack.repo\n"
        "cls = spack.repo.PATH.get_pkg_class('nccl-ss11')\n"
        "print('\\n'.join(f'{k}={v}' for k, v in cls.slingshot_defaults))\n"
    )
    package = dict(line.split("=", 1) for line in spack.python(code).stdout.split("\n") if line)
    assert "FI_CXI_DISABLE_HOST_REGISTER" in package
    _, fabric = runtime.fabric_defaults("slingshot")
    fabric = dict(fabric)
    assert {k: fabric.get(k) for k in package} == package
    # aws-ofi-nccl +cxi sets NCCL_NET by plugin version ("AWS Libfabric" up to 1.12,
    # "OFI" after, which keeps "AWS Libfabric" as an alias): the alias selects both.
    assert fabric["NCCL_NET"] == "AWS Libfabric"
    for name in COMMITTED:
        site = sitemod.load(name)
        if site.data["fabric"] == "slingshot":
            env = runtime.environment(site.data)
            assert set(package) | {"NCCL_NET"} <= set(env), name


def test_alps_module_says_the_uenv_must_be_started_first(tmp_path: Path) -> None:
    """Lmod cannot mount a squashfs image, and every Alps prefix lies in CSCS's uenv:
    modules.yaml names the start command (cscs-docs docs/software/uenv/using.md)."""
    site = sitemod.load("alps-gh200")
    text = _rendered(site, tmp_path)["modules.yaml"]
    uenv = site.data["uenv"]
    assert f"uenv start {uenv['image']} --view={uenv['view']}" in text
    assert f"#SBATCH --uenv={uenv['image']}" in text


@pytest.mark.parametrize("name", [n for n in COMMITTED if n != "alps-gh200"])
def test_modules_of_sites_without_a_uenv_do_not_mention_one(tmp_path: Path, name: str) -> None:
    assert "uenv" not in _rendered(sitemod.load(name), tmp_path)["modules.yaml"]


def test_several_torches_name_every_package_built_on_torch_by_its_torch_too() -> None:
    """Two torch releases in one environment: py-torchvision exists once per release,
    so its module name carries the torch version (and, on Tcl, the MPI as every name does)."""
    from torchmpi import modules

    tcl = modules.projections("tcl", several_torches=True)
    assert tcl["^py-torch"] == "{name}/{version}-torch{^py-torch.version}-{^mpi.name}"
    lmod = modules.projections("lmod", several_torches=True)
    assert lmod["^py-torch"] == "{name}/{version}-torch{^py-torch.version}"
    assert list(lmod)[-2:] == ["^py-torch", "all"], "the first key a spec satisfies wins"
    assert "^py-torch" not in modules.projections("lmod")
