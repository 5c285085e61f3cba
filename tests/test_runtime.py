"""Runtime variables: one mapping, rendered three ways, read back from the real files.

runtime.sh is run by bash (not parsed here); spack.yaml and modules.yaml are
loaded as YAML.  No Spack needed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml
from support.shell import sourced
from support.sites import edited_site, site_data
from support.sites import edited_site as _site
from torchmpi import output, paths, runtime
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.checks.schema import fill_defaults, site_schema
from torchmpi.cli import main
from torchmpi.errors import UserError


def _three(files: dict[str, str], tmp_path: Path) -> tuple[dict, dict, dict]:
    spack = yaml.safe_load(files["spack.yaml"])["spack"].get("env_vars", {}).get("set", {})
    default = yaml.safe_load(files["modules.yaml"])["modules"]["default"]
    system = default["enable:"][0]
    module = default[system].get("py-torch-mpi", {}).get("environment", {}).get("set", {})
    return sourced(files["runtime.sh"], tmp_path), spack, module


def test_site_without_runtime_section_gets_the_same_variables_everywhere(tmp_path: Path) -> None:
    """Derecho without `runtime:`: the GPU switch (and fabric defaults) reach runtime.sh too.

    Before the fix runtime.sh guarded on the raw `runtime` key and said "No
    fabric-specific variables" while spack.yaml and modules.yaml set
    MPICH_GPU_SUPPORT_ENABLED=1.
    """
    site = _site(tmp_path, "derecho", lambda d: d.pop("runtime"))
    files = renderer.render(site, tmp_path / "env")
    sh, spack, module = _three(files, tmp_path)
    expected = runtime.environment(site.data)
    assert expected["MPICH_GPU_SUPPORT_ENABLED"] == "1"
    assert sh == spack == module == expected


def _write(tmp_path: Path, name: str, edit) -> Path:
    data = yaml.safe_load((paths.sites_dir() / f"{name}.yaml").read_text())
    edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def test_site_values_override_fabric_defaults_in_place(tmp_path: Path) -> None:
    _, defaults = runtime.fabric_defaults("slingshot")
    first = defaults[0][0]

    def edit(d):
        d["runtime"]["env"] = {first: "site-value", "MY_SITE_VAR": "x"}

    site = _site(tmp_path, "derecho", edit)
    env = runtime.environment(site.data)
    assert list(env)[: len(defaults)] == [k for k, _ in defaults]  # defaults first, in order
    assert env[first] == "site-value" and env["MY_SITE_VAR"] == "x"
    for key, value in defaults[1:]:
        assert env[key] == value
    sh, spack, module = _three(renderer.render(site, tmp_path / "env"), tmp_path)
    assert sh == spack == module == env


def test_every_fabric_has_a_defaults_file() -> None:
    schema = site_schema()
    for fabric in schema["properties"]["fabric"]["enum"]:
        source, env = runtime.fabric_defaults(fabric)
        assert source or not env, f"{fabric}: defaults without a source"


def test_ib_and_tcp_have_no_defaults() -> None:
    assert runtime.fabric_defaults("ib")[1] == () and runtime.fabric_defaults("tcp")[1] == ()


def test_site_without_any_runtime_variable_says_so(tmp_path: Path) -> None:
    site = _site(tmp_path, "generic-ib", lambda d: d.pop("runtime"))
    text = renderer.render(site, tmp_path / "env")["runtime.sh"]
    assert "No runtime variables" in text and "export" not in text
    assert sourced(text, tmp_path) == {}


# --- prepend_path / append_path --------------------------------------------


def _paths_site(tmp_path: Path) -> sitemod.Site:
    def edit(d):
        d["runtime"]["prepend_path"] = {"LD_LIBRARY_PATH": "/opt/site lib/lib64"}
        d["runtime"]["append_path"] = {"PYTHONPATH": "/opt/extra"}

    return _site(tmp_path, "generic-ib", edit)


def test_prepend_and_append_in_runtime_sh(tmp_path: Path) -> None:
    files = renderer.render(_paths_site(tmp_path), tmp_path / "env")
    unset = sourced(files["runtime.sh"], tmp_path)
    assert unset["LD_LIBRARY_PATH"] == "/opt/site lib/lib64"
    assert unset["PYTHONPATH"] == "/opt/extra"
    job = {"LD_LIBRARY_PATH": "/usr/lib/a:/usr/lib/b", "PYTHONPATH": "/home/me/py"}
    kept = sourced(files["runtime.sh"], tmp_path, before=job)
    assert kept["LD_LIBRARY_PATH"] == "/opt/site lib/lib64:/usr/lib/a:/usr/lib/b"
    assert kept["PYTHONPATH"] == "/home/me/py:/opt/extra"
    assert kept["NCCL_DEBUG"] == "WARN"


def test_prepend_and_append_identical_in_modules_and_env_vars(tmp_path: Path) -> None:
    site = _paths_site(tmp_path)
    files = renderer.render(site, tmp_path / "env")
    spack = yaml.safe_load(files["spack.yaml"])["spack"]["env_vars"]
    module = yaml.safe_load(files["modules.yaml"])["modules"]["default"]["lmod"][
        "py-torch-mpi"]["environment"]
    want = {"prepend_path": {"LD_LIBRARY_PATH": "/opt/site lib/lib64"},
            "append_path": {"PYTHONPATH": "/opt/extra"}}
    for ops in (spack, module):
        assert {k: v for k, v in ops.items() if k != "set"} == want
        assert ops["set"] == runtime.environment(site.data)


@pytest.mark.parametrize("section,key,value", [
    ("env", "LD_LIBRARY_PATH", "/opt/x/lib:$LD_LIBRARY_PATH"),
    ("env", "NCCL_DEBUG", "${LEVEL}"),
    ("prepend_path", "PATH", "$HOME/bin"),
    ("append_path", "PATH", "/opt/bin:$PATH"),
])
def test_dollar_reference_is_rejected_naming_the_key(section, key, value, tmp_path, capsys):
    def edit(d):
        d["runtime"].setdefault(section, {})[key] = value

    path = _write(tmp_path, "generic-ib", edit)
    out = tmp_path / "out"
    rc = main(["render", str(path), "-o", str(out)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert f"{path}:" in err and f"runtime.{section}.{key}" in err
    assert "prepend_path" in err and "append_path" in err  # what is allowed instead
    assert not out.exists()


def test_variable_both_set_and_prepended_is_rejected(tmp_path: Path, capsys) -> None:
    def edit(d):
        d["runtime"]["prepend_path"] = {"NCCL_DEBUG": "/x"}

    path = _write(tmp_path, "generic-ib", edit)
    assert main(["render", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert "runtime.prepend_path.NCCL_DEBUG" in err and "runtime.env" in err


def test_shell_name_guard() -> None:
    with pytest.raises(UserError, match="not a shell variable name"):
        runtime.shell_lines(runtime.Runtime(set={"A B": "1"}))


@pytest.mark.spack
def test_spack_env_activate_applies_prepend_append_like_runtime_sh(spack, tmp_path: Path) -> None:
    """Real Spack: `spack env activate` of the rendered env_vars == sourcing runtime.sh."""
    site = _paths_site(tmp_path)
    env_dir = tmp_path / "tree" / "environments" / "generic-ib"
    (tmp_path / "tree").mkdir()
    (tmp_path / "tree" / "spack_repo").symlink_to(paths.root() / "spack_repo")
    files = renderer.render(site, env_dir)
    output.write(env_dir, files)
    job = {"LD_LIBRARY_PATH": "/usr/lib/a", "PYTHONPATH": "/home/me/py"}
    proc = subprocess.run([str(spack.exe), "env", "activate", "--sh", str(env_dir)],
                          env=dict(spack.env, **job), capture_output=True, text=True,
                          check=True)
    script = tmp_path / "activate.sh"
    script.write_text(proc.stdout)
    activated = sourced(script.read_text(), tmp_path, before=job)
    from_sh = sourced(files["runtime.sh"], tmp_path, before=job)
    names = set(from_sh)
    assert {"LD_LIBRARY_PATH", "PYTHONPATH", "NCCL_DEBUG"} <= names
    assert {k: activated.get(k) for k in names} == from_sh


# --- the implied MPICH_GPU_SUPPORT_ENABLED follows the site exactly -----------------


SWITCH = runtime.GPU_SWITCH


def _derecho(edit=None) -> dict:
    """derecho.yaml as data after ``edit``, with the schema's defaults as at load."""
    data = site_data("derecho", edit)
    fill_defaults(data)
    return data


def test_switch_is_implied_on_a_cray_gpu_site() -> None:
    data = _derecho(lambda d: d.pop("runtime", None))
    assert runtime.environment(data)[SWITCH] == "1"


def test_switch_is_implied_when_cuda_aware_is_not_stated() -> None:
    """mpi.cuda_aware defaults to true (the schema's default): no key, switch on."""
    def edit(d):
        d.pop("runtime", None)
        d["mpi"].pop("cuda_aware", None)
    assert runtime.cray_gpu_switch(_derecho(edit)) == "1"
    assert runtime.environment(_derecho(edit))[SWITCH] == "1"


def test_switch_never_on_a_cpu_only_cray_site() -> None:
    """No GPU: no GTL is linked, and 1 would abort MPI_Init."""
    def edit(d):
        d.pop("runtime", None)
        d.pop("gpu")
    assert SWITCH not in runtime.environment(_derecho(edit))
    assert runtime.cray_gpu_switch(_derecho(edit)) is None


def test_switch_never_on_when_the_site_says_cuda_aware_false(tmp_path: Path) -> None:
    """cuda_aware: false gives "0" from cray_gpu_switch -- a value, not "unset":
    nothing may turn it into 1, in the data or in the rendered runtime.sh."""
    def edit(d):
        d.pop("runtime", None)
        d["mpi"]["cuda_aware"] = False
    assert runtime.cray_gpu_switch(_derecho(edit)) == "0"
    assert runtime.environment(_derecho(edit)).get(SWITCH) != "1"
    site = edited_site(tmp_path, "derecho", edit)
    text = renderer.render(site, tmp_path / "env")["runtime.sh"]
    assert f"{SWITCH}=1" not in text and f"{SWITCH}='1'" not in text


def test_site_zero_is_kept_as_zero() -> None:
    def edit(d):
        d["mpi"]["cuda_aware"] = False
        d["runtime"] = {"env": {SWITCH: "0"}}
    assert runtime.environment(_derecho(edit))[SWITCH] == "0"


@pytest.mark.parametrize("nodes, value", [(1, "Socket"), (2, "OFI"), (64, "OFI")])
def test_a_multi_node_value_only_when_the_job_spans_nodes(nodes: int, value: str) -> None:
    """Frontier's NCCL_NET (OLCF's PyTorch guide): OFI from two nodes on, Socket on one
    (the plugin's network does not initialise within a node there)."""
    assert runtime.environment(site_data("frontier"), nodes)["NCCL_NET"] == value


def test_each_layer_with_values_is_cited_and_a_layer_without_is_not() -> None:
    """Frontier: the fabric's, the AMD block's and OLCF's layers each name their
    sources (the multi-node NCCL_NET's included); Perlmutter, an NVIDIA site, has no
    vendor layer at all, not an empty citation."""
    whats = [what for what, _ in runtime.resolve(sitemod.load("frontier").data).sources]
    assert whats[:3] == ["fabric defaults (slingshot)", "amd GPUs on slingshot",
                         "centre defaults (olcf, amd GPUs)"]
    sources = dict(runtime.resolve(sitemod.load("frontier").data).sources)
    assert "olcf/olcf-user-docs" in sources["centre defaults (olcf, amd GPUs)"]
    assert all(cited for _, cited in runtime.resolve(sitemod.load("perlmutter").data).sources)
    assert not [w for w, _ in runtime.resolve(sitemod.load("perlmutter").data).sources
                if "GPUs on" in w or w.startswith("centre defaults")]


# --- GH200 on Slingshot: HPE's GDRCopy corruption workaround ----------------------

#: HPE shs-ccl-docs ccl_env.sh (commit "Force LL128 traffic onto rendezvous path to
#: avoid GDRCopy corruption"): eager LL128-sized sends are copied by GDRCopy, which
#: corrupts data on GH200; CSCS's PyTorch uenv for GH200 sets both too.
GH200_RDZV = {"FI_CXI_RDZV_THRESHOLD": "0", "FI_CXI_RDZV_GET_MIN": "0"}


def _alps(edit=None) -> dict:
    """alps-gh200.yaml without the two values in its runtime.env, after ``edit``,
    with the schema's defaults as at load: a GH200 Slingshot site written from
    the docs."""
    def without(d):
        for name in GH200_RDZV:
            d["runtime"]["env"].pop(name)
        if edit:
            edit(d)
    data = site_data("alps-gh200", without)
    fill_defaults(data)
    return data


def test_a_gh200_slingshot_site_gets_hpe_rendezvous_values_cited() -> None:
    rt = runtime.resolve(_alps())
    assert {k: rt.set.get(k) for k in GH200_RDZV} == GH200_RDZV
    sources = dict(rt.sources)
    cited = sources["gh200 nodes (nvidia GPUs on slingshot)"]
    assert "HewlettPackard/shs-ccl-docs@1437748 ccl_env.sh:17" in cited
    assert "eth-cscs/alps-uenv@0db6323" in cited


def test_a_gh200_site_stating_another_value_keeps_its_own() -> None:
    env = runtime.environment(_alps(lambda d: d["runtime"]["env"].update(
        FI_CXI_RDZV_THRESHOLD=16384)))
    assert env["FI_CXI_RDZV_THRESHOLD"] == "16384"
    assert env["FI_CXI_RDZV_GET_MIN"] == "0"


def test_a_gh200_site_stating_both_cites_no_gh200_layer() -> None:
    """alps-gh200 states both (as its uenv does): the layer gives it no value,
    so runtime.sh names no source for it and the rendered files stay as they were."""
    rt = runtime.resolve(sitemod.load("alps-gh200").data)
    assert not [w for w, _ in rt.sources if w.startswith("gh200")]


def test_the_gh200_values_reach_all_three_renderings(tmp_path: Path) -> None:
    def edit(d):
        for name in GH200_RDZV:
            d["runtime"]["env"].pop(name)
    site = edited_site(tmp_path, "alps-gh200", edit)
    sh, spack, module = _three(renderer.render(site, tmp_path / "env"), tmp_path)
    for got in (sh, spack, module):
        assert {k: str(got.get(k)) for k in GH200_RDZV} == GH200_RDZV


@pytest.mark.parametrize("name, edit", [
    ("perlmutter", None),                                          # NVIDIA A100 on x86
    ("frontier", None),                                            # AMD MI250X
    ("jupiter", None),                                             # GH200 on InfiniBand
    ("alps-gh200", lambda d: d["gpu"].update(cuda_arch=100)),      # Grace + Blackwell
    ("alps-gh200", lambda d: d.update(target="zen3")),             # Hopper on x86
])
def test_no_other_node_gets_the_gh200_values(name: str, edit) -> None:
    if name == "alps-gh200":
        data = _alps(edit)
    else:
        data = site_data(name)
        fill_defaults(data)
    env = runtime.environment(data)
    assert not {k for k in GH200_RDZV if k in env}, name
    assert not [w for w, _ in runtime.resolve(data).sources if w.startswith("gh200")]
