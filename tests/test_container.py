"""`torchmpi container SITE`: the rendered files, read back the way their consumers read them.

spack.yaml with a YAML loader, the EDF with :mod:`tomllib`, scripts with
``bash -n``, the Containerfile with the tool's parser and its checks.  No Spack
and no container runtime here (tests/test_container_solve.py concretizes,
tests/test_container_podman.py runs podman).
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest
import tomllib
import yaml
from support.sites import edited_site
from torchmpi import container, pairs, paths, runtime
from torchmpi import site as sitemod
from torchmpi.checks import container as container_rules
from torchmpi.cli import main
from torchmpi.errors import UserError

#: Sites with a container descriptor (AMD sites: tests/test_container_amd.py too).
SITES = [n for n in sitemod.available()
         if "container" in (yaml.safe_load((paths.sites_dir() / f"{n}.yaml").read_text()) or {})]

#: Host paths of the shipped sites that must never reach the image recipe.
HOST_PATHS = ("/glade", "/opt/cray", "/global", "/capstor", "/user-environment",
              "/usr/local/cuda-",
              "../", "$PSCRATCH", "$user")


def render_cli(tmp_path: Path, site: str, capsys) -> Path:
    out = tmp_path / site
    assert main(["container", site, "-o", str(out)]) == 0, capsys.readouterr()
    return out


def _strings(node) -> list[str]:
    if isinstance(node, dict):
        return [s for k, v in node.items() for s in (*_strings(k), *_strings(v))]
    if isinstance(node, list):
        return [s for v in node for s in _strings(v)]
    return [node] if isinstance(node, str) else []


@pytest.mark.parametrize("name", SITES)
def test_container_spack_yaml_is_self_contained(name: str, tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, name, capsys)
    env = yaml.safe_load((out / "spack.yaml").read_text())["spack"]
    assert "include" not in env
    site = sitemod.load(name)
    text = (out / "spack.yaml").read_text()
    for host in HOST_PATHS:
        assert host not in text.split("site-sha256")[1], (name, host)
    for value in _strings(env):
        if "/" in value and not value.startswith(("@", "py-", "gcc@", "cuda@", "mpich@")):
            assert value.startswith(("/opt/", "/usr")), (name, value)
    assert env["repos"]["torchmpi"] == "/opt/torchmpi/spack_repo/torchmpi"
    assert env["develop"]["py-torchmpi"]["path"] == "/opt/torchmpi"
    assert env["config"]["shared_linking"] == {"type": "runpath"}
    target = container.generic_target(site)
    # the target ends each root's own constraints (an AMD root then pins its torch)
    assert all(s.split(" ^", 1)[0].endswith(f" target={target}") for s in env["specs"])
    assert target in ("x86_64_v3", "x86_64_v2", "x86_64", "aarch64")
    externals = [e for pkg in env["packages"].values() if isinstance(pkg, dict)
                 for e in pkg.get("externals", [])]
    rocm = f"/opt/rocm-{site.rocm['version']}" if site.rocm else "/usr/local/cuda"
    assert {e["prefix"] for e in externals} <= {"/usr", "/usr/local/cuda", rocm}


def test_generic_targets_of_the_shipped_sites() -> None:
    got = {n: container.generic_target(sitemod.load(n)) for n in
           ("alps-gh200", "derecho", "perlmutter", "generic-ib")}
    assert got == {"alps-gh200": "aarch64", "derecho": "x86_64_v3",
                   "perlmutter": "x86_64_v3", "generic-ib": "x86_64_v3"}


@pytest.mark.parametrize("name", SITES)
def test_containerfile_is_pinned_and_labelled(name: str, tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, name, capsys)
    text = (out / "Containerfile").read_text()
    instructions = container.parse_containerfile(text)
    assert container.check_containerfile(instructions) == []
    froms = [a for w, a in instructions if w == "FROM"]
    assert len(froms) == 3 and "latest" not in text
    assert not [a for w, a in instructions if w == "ENV"]
    label = " ".join(a for w, a in instructions if w == "LABEL")
    site = sitemod.load(name)
    assert f"org.torchmpi.site-sha256={site.sha256}" in label
    assert "org.torchmpi.spack=v1.1.0" in label and "spack-packages=v2026.06.0" in label
    nccl = (site.data["container"].get("nccl") or site.data.get("nccl") or {})
    if nccl.get("plugin"):
        assert f"org.torchmpi.nccl={nccl['version']}" in label
        assert f"org.torchmpi.aws-ofi-nccl={nccl['plugin']}" in label
    # Every COPY source without --from is in the build context the script makes.
    sources = {a.split()[0] for w, a in instructions if w == "COPY" and "--from" not in a}
    assert sources == {"spack", "spack-packages", "torchmpi", "spack.yaml"}


@pytest.mark.parametrize("name", SITES)
def test_slingshot_image_pins_a_pair_vouched_for_the_plugin_that_runs(name: str) -> None:
    """On Slingshot, where the image's own plugin is the one that runs (Perlmutter's
    podman-hpc), its NCCL/plugin pair is one vouched for Slingshot, as in the native
    environment (pairs.choose).  Where a runtime injects the site's plugin (CE's hook
    mounts its artifact's aws-ofi-nccl 1.18.0), the image's NCCL is the release that
    plugin is vouched with, by whatever evidence (1.18.0's release notes: AWS), and on
    CE a recorded artifact carries that plugin."""
    site = sitemod.load(name)
    env = yaml.safe_load(container.render(site)["spack.yaml"])["spack"]["packages"]
    pinned = (env.get("nccl", {}).get("require"), env.get("aws-ofi-nccl", {}).get("require"))
    if site.data["fabric"] != "slingshot":
        assert pinned[1] is None
        return
    if site.rocm:  # RCCL is ROCm's release, the plugin the one vouched with it
        rccl, plugin, *_ = pairs.rccl(str(site.rocm["version"]))
        require = (env.get("rccl") or env["rccl:"])["require"]  # "rccl:" beside an external
        assert (require, pinned) == ([f"@{rccl}"], (None, [f"@{plugin}"]))
        return
    chosen = pairs.choose(container.plan(site).nccl)
    runtime_ = site.data["container"]["runtime"]
    assert chosen is not None
    assert chosen.fabric == "slingshot" or runtime_ in container_rules.INJECTS_PLUGIN, chosen
    if runtime_ == "ce":
        assert container_rules.netstack_artifact(chosen.plugin) is not None, chosen
    assert pinned == ([f"@{chosen.nccl}"], [f"@{chosen.plugin}"])
    label = container.labels(site, container.plan(site))
    assert (label["org.torchmpi.nccl"], label["org.torchmpi.aws-ofi-nccl"]) == (
        chosen.nccl, chosen.plugin)


@pytest.mark.parametrize("name", SITES)
def test_the_descriptors_bind_the_plugin_as_the_plan_decides(name: str) -> None:
    """Whether the wrapper binds the site's native aws-ofi-nccl (TORCHMPI_PLUGIN_LIB) is
    decided once, by the plan (Plan.binds_plugin, set where it puts PLUGIN_DIR first on
    the library path: Cray MPICH under apptainer, a centre's MPI on Slingshot, an AMD
    image on Slingshot); the descriptors follow that field, never the directory's place
    in the path, so a plan that binds none gets no bind line."""
    site = sitemod.load(name)
    p = container.plan(site)
    assert p.binds_plugin == (container.PLUGIN_DIR in p.lib_path), name
    assert p.binds_plugin == (name in ("delta", "derecho", "frontier", "lumi")), name
    bind = f"$TORCHMPI_PLUGIN_LIB:{container.PLUGIN_DIR}:ro"
    assert any(bind in text for text in container.descriptors(site, p).values()) == \
        p.binds_plugin, name
    p.binds_plugin = False
    texts = container.descriptors(site, p).values()
    assert not any(bind in text for text in texts), name
    if p.modules:  # the centre-modules wrapper names the variable only where it binds it
        assert not any("TORCHMPI_PLUGIN_LIB" in text for text in texts), name


def test_containerfile_check_refuses_latest_unknown_stage_and_baked_nccl() -> None:
    bad = container.parse_containerfile(
        "FROM docker.io/library/ubuntu:latest AS a\nFROM ubuntu AS b\n"
        "COPY --from=nowhere /x /x\nENV NCCL_NET=Socket\nENV FI_PROVIDER=tcp\n")
    errors = container.check_containerfile(bad)
    assert len(errors) == 5, errors


def test_alps_edf_is_toml_with_the_hook_and_the_sites_variables(tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, "alps-gh200", capsys)
    edf = tomllib.loads((out / "alps-gh200.toml").read_text())
    hook = edf["annotations"]["com"]["hooks"]["aws_ofi_nccl"]
    assert hook == {"enabled": "true", "variant": "cuda-dl"}
    site = sitemod.load("alps-gh200")
    assert edf["env"] == {"TORCHMPI_CONTAINER": "ce", **runtime.environment(site.data)}
    assert edf["mounts"] == ["/capstor", "/iopsstor"]
    assert edf["image"].endswith(".sqsh")


def test_alps_edf_pins_the_netstack_that_carries_the_images_pair(tmp_path: Path,
                                                                   capsys) -> None:
    """eth-cscs/cscs-docs docs/software/container-engine/resource-hook.md: with
    ``com.hooks.netstack.version``/``name`` unset the hook takes ``latest`` and the
    vCluster's ``default`` name, so a new artifact would change the plugin under an
    image whose NCCL was pinned to the old one.  The pinned artifact carries the
    image's aws-ofi-nccl (1.18.0) dynamically linked to CUDA (``+dl``), which the
    image's CUDA 12.9 can load (the ``cuda-dl`` note in the same page)."""
    out = render_cli(tmp_path, "alps-gh200", capsys)
    edf = tomllib.loads((out / "alps-gh200.toml").read_text())
    netstack = edf["annotations"]["com"]["hooks"]["netstack"]
    assert netstack == {"source": "artifact", "version": "26.05.1",
                        "name": "gpu:cuda13,cxi:12.0.1,ofi:2.5.1,aws:1.18.0+dl"}
    assert f"aws:{sitemod.load('alps-gh200').data['container']['nccl']['plugin']}+dl" \
        in netstack["name"]


def test_ce_pair_no_recorded_netstack_carries_is_refused(tmp_path: Path, capsys) -> None:
    def other(d):  # a vouched pair run on Slingshot, but no artifact carries 1.17.2
        d["container"]["nccl"] = {"version": "2.29.2-1", "plugin": "1.17.2"}

    err = _refused(tmp_path, edited_site(tmp_path, "alps-gh200", other).path, capsys)
    assert "netstack" in err and "1.17.2" in err and "26.05.1" in err
    assert "Traceback" not in err


def test_ce_image_mpich_is_the_one_cscs_builds_for_containers(tmp_path: Path) -> None:
    """CE injects no Cray MPICH: the image's MPICH runs on the CXI hook's libfabric and
    xpmem.  eth-cscs/cscs-docs docs/software/communication/mpich.md builds MPICH 4.3.1
    ``--with-device=ch4:ofi --with-xpmem`` (``--with-cuda`` in the GPU image) and sets
    ``MPIR_CVAR_CH4_OFI_ENABLE_HMEM=1`` for GPU buffers.  Before, the CE image
    carried the Cray ABI stand-in, MPICH 3.4.3 without xpmem."""
    site = sitemod.load("alps-gh200")
    p = container.plan(site)
    assert p.mpi == "mpich@4.3.1 device=ch4 netmod=ofi +xpmem ~cuda"
    packages = yaml.safe_load(container.spack_yaml(site, p))["spack"]["packages"]
    assert packages["mpich"]["require"] == [p.mpi]
    assert packages["xpmem"]["require"] == ["~kernel-module"]  # the node's module is CSCS's
    assert "MPIR_CVAR_CH4_OFI_ENABLE_HMEM" not in container.edf(site, p)["env"]

    def aware(d):
        d["mpi"]["cuda_aware"] = True
        d["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = 1

    site = edited_site(tmp_path, "alps-gh200", aware)
    p = container.plan(site)
    assert p.mpi == f"mpich@4.3.1 device=ch4 netmod=ofi +xpmem +cuda cuda_arch={site.cuda_arch}"
    assert container.edf(site, p)["env"]["MPIR_CVAR_CH4_OFI_ENABLE_HMEM"] == "1"
    # The Cray runtimes keep the ABI stand-in that lib-abi-mpich replaces.
    assert container.plan(sitemod.load("derecho")).mpi.startswith("mpich@3.4.3 ")


def test_alps_launch_line_is_pmi2_with_the_alt_read_network_flag(tmp_path: Path,
                                                                 capsys) -> None:
    """cscs-docs docs/software/communication/mpich.md ("Use PMI-2": MPICH in a
    container is launched with ``srun --mpi=pmi2``); the site sets
    ``FI_CXI_RDZV_PROTO=alt_read``, which needs ``--network=disable_rdzv_get``
    (docs/users.md).  The EDF says so in its header, docs/containers.md in its run line."""
    text = (render_cli(tmp_path, "alps-gh200", capsys) / "alps-gh200.toml").read_text()
    [launch] = [line for line in text.splitlines() if "srun " in line]
    words = launch.split()
    assert "--mpi=pmi2" in words and "--network=disable_rdzv_get" in words, launch
    docs = (Path(__file__).resolve().parents[1] / "docs" / "containers.md").read_text()
    [run] = [line for line in docs.splitlines() if "alps-gh200.toml python" in line]
    assert "--mpi=pmi2" in run and "--network=disable_rdzv_get" in run, run
    # Perlmutter sets no alt_read (NERSC/podman-hpc etc/modules.d/nccl.yaml neither):
    # its run line has no flag for it.
    [run] = [line for line in docs.splitlines() if "containers/perlmutter/run.sh" in line
             and "srun" in line]
    assert "disable_rdzv_get" not in run, run


@pytest.mark.parametrize("name", SITES)
def test_scripts_parse(name: str, tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, name, capsys)
    scripts = sorted(out.glob("*.sh"))
    if sitemod.load(name).data["container"]["runtime"] != "ce":
        assert scripts
    for script in scripts:
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True,
                              check=False)
        assert proc.returncode == 0, (script, proc.stderr)


def test_derecho_wrapper_is_derived_from_the_site_file(tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, "derecho", capsys)
    text = (out / "run.sh").read_text()
    site = sitemod.load("derecho")
    abi = f"{site.data['mpi']['prefix']}/lib-abi-mpich"
    assert "--bind /opt/cray:/opt/cray:ro" in text
    assert f"LD_LIBRARY_PATH=/opt/host/plugin:{abi}:" in text
    assert f"{site.data['libfabric']['prefix']}/lib64" in text
    assert "LD_PRELOAD=libcuda.so.1:libstdc++.so.6:libcudart.so.12:" \
        "/opt/cray/pe/mpich/8.1.27/gtl/lib/libmpi_gtl_cuda.so.0" in text
    for key, value in runtime.environment(site.data).items():
        assert f"{key}={value}" in text
    assert text.startswith("#!/usr/bin/env bash\n")


def test_gtl_is_preloaded_only_where_the_site_is_cuda_aware(tmp_path: Path, capsys) -> None:
    def off(data):
        data["mpi"]["cuda_aware"] = False
        data["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = 0

    site = edited_site(tmp_path, "derecho", off)
    files = container.render(site)
    assert "LD_PRELOAD" not in files["run.sh"] and "gtl" not in files["run.sh"]
    assert "LD_PRELOAD" in container.render(sitemod.load("derecho"))["run.sh"]
    assert "~cuda" in yaml.safe_load(files["spack.yaml"])["spack"]["packages"]["mpich"][
        "require"][0]


def test_perlmutter_podman_hpc_module_binds_the_host_stack(tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, "perlmutter", capsys)
    module = yaml.safe_load((out / "torchmpi-podman-hpc.yaml").read_text())
    binds = dict(b.split(":", 1) for b in module["bind"])
    data = sitemod.load("perlmutter").data  # the site file's prefixes, not retyped here
    assert binds["/opt/cray"] == "/opt/cray"
    assert binds["/usr/lib64"] == container.HOST_LIB64
    lib_path = _arg(module["additional_args"], "LD_LIBRARY_PATH").split(":")
    assert lib_path[0] == f"{data['mpi']['prefix']}/lib-abi-mpich"
    assert f"{data['libfabric']['prefix']}/lib64" in lib_path
    gtl = "/opt/cray/pe/mpich/8.1.28/gtl/lib/libmpi_gtl_cuda.so.0"
    assert _arg(module["additional_args"], "LD_PRELOAD").split(":")[-1] == gtl
    assert "--torchmpi" in (out / "run.sh").read_text()


def _arg(args: list[str], key: str) -> str:
    [value] = [a.split("=", 1)[1] for a in args if a.startswith(f"-e {key}=")]
    return value


#: The closure of Cray MPICH's lib-abi-mpich/libmpi.so.12 outside its own directory
#: (tests/fixtures/cray_ex/manifest.yaml): libpmi/libpmi2/libpals in /opt/cray/pe/lib64
#: (the host's ld.so.conf, which the container does not read), libxpmem in
#: /opt/cray/xpmem/default/lib64, libfabric's libcxi in /usr/lib64.
CLOSURE_DIRS = ("/opt/cray/pe/lib64", "/opt/cray/xpmem/default/lib64")


def test_derecho_wrapper_binds_what_ncars_run_line_binds(tmp_path: Path, capsys) -> None:
    """NCAR/hpc-demos containers/tutorial/apptainer/FastEddy/run_fasteddy_container.pbs:
    ``--bind /run --bind /opt/cray --bind /usr/lib64:/host/lib64``, ``/host/lib64`` last
    on LD_LIBRARY_PATH, ``MPICH_SMP_SINGLE_COPY_MODE=NONE``.  Before, only
    lib-abi-mpich, libfabric and GTL were bound: libpmi, libpals, libxpmem and libcxi,
    which libmpi.so.12 and libfabric NEED, were not in the container."""
    text = (render_cli(tmp_path, "derecho", capsys) / "run.sh").read_text()
    words = shlex.split(text.split("exec apptainer exec", 1)[1])
    assert words[:2] == ["--nv", "--bind"] and words[2] == "/run"
    inject = "\n".join(line for line in text.splitlines() if "inject+=" in line)
    assert "--bind /opt/cray:/opt/cray:ro" in inject
    assert f"--bind /usr/lib64:{container.HOST_LIB64}:ro" in inject
    [path] = re.findall(r"LD_LIBRARY_PATH=(\S+)\)", inject)
    dirs = path.split(":")
    assert dirs[-1] == container.HOST_LIB64 == "/host/lib64"
    for d in CLOSURE_DIRS:
        assert d in dirs
    abi = f"{sitemod.load('derecho').data['mpi']['prefix']}/lib-abi-mpich"
    assert dirs.index(abi) < dirs.index("/opt/cray/pe/lib64")
    assert "--env MPICH_SMP_SINGLE_COPY_MODE=NONE" in text


@pytest.mark.parametrize("name", ["derecho", "perlmutter"])
def test_gtl_preload_loads_what_gtl_leaves_undefined_first(name: str) -> None:
    """GTL as the record shows it leaves the C++ runtime (cray-mpich 8.1.21,
    eth-cscs/stackinator#9), the CUDA runtime (8.1.27, stackinator#158) and driver
    symbols (8.1.30, spectral-compute/scale-validation#66) to whoever loaded them; the
    native preload loads driver, libstdc++, libcudart, then GTL (gtl_preload.preload).
    The descriptors' LD_PRELOAD lists them in the same order, by soname, so the image's
    runtimes and the driver the runtime mounts are the ones found."""
    site = sitemod.load(name)
    p = container.plan(site)
    major = container._cuda_version(site).split(".")[0]
    assert p.preload[:3] == ["libcuda.so.1", "libstdc++.so.6", f"libcudart.so.{major}"]
    assert p.preload[3].endswith("/gtl/lib/libmpi_gtl_cuda.so.0") and len(p.preload) == 4


def test_perlmutter_module_binds_what_nersc_modules_bind(tmp_path: Path, capsys) -> None:
    """NERSC/podman-hpc etc/modules.d/mpich.yaml (and cuda-mpich.yaml): the devices,
    Slurm's and munge's sockets beside the MPI libraries; nccl.yaml: libcxi (in
    /usr/lib64) beside libfabric."""
    out = render_cli(tmp_path, "perlmutter", capsys)
    module = yaml.safe_load((out / "torchmpi-podman-hpc.yaml").read_text())
    for bind in ("/dev/xpmem:/dev/xpmem", "/dev/shm:/dev/shm", "/dev/cxi*:/dev/",
                 "/var/spool/slurmd:/var/spool/slurmd", "/run/munge:/run/munge",
                 f"/usr/lib64:{container.HOST_LIB64}"):
        assert bind in module["bind"], bind
    dirs = _arg(module["additional_args"], "LD_LIBRARY_PATH").split(":")
    assert dirs[-1] == container.HOST_LIB64
    for d in CLOSURE_DIRS:
        assert d in dirs
    # The plain-podman check script injects the libraries, not the node's devices.
    assert "/dev/xpmem" not in (out / "run-podman.sh").read_text()


# --- refusals: nothing is written -----------------------------------------------------------

def _refused(tmp_path: Path, site_path: Path, capsys) -> str:
    out = tmp_path / "out"
    assert main(["container", str(site_path), "-o", str(out)]) == 2
    assert not out.exists() or not any(out.iterdir())
    return capsys.readouterr().err


def test_ce_without_the_hooks_pair_is_refused(tmp_path: Path, capsys) -> None:
    def unpin(d):  # neither the container's pair nor the site's own pin
        d["container"].pop("nccl")
        d.pop("nccl", None)

    site = edited_site(tmp_path, "alps-gh200", unpin)
    err = _refused(tmp_path, site.path, capsys)
    assert "container.nccl" in err and "CE aws_ofi_nccl hook" in err and "2.29.2-1+1.18.0" in err


def test_unvouched_pair_is_refused(tmp_path: Path, capsys) -> None:
    def edit(d):
        d["container"]["nccl"] = {"version": "2.21.5-1", "plugin": "1.18.0"}

    err = _refused(tmp_path, edited_site(tmp_path, "alps-gh200", edit).path, capsys)
    assert "not a vouched pair" in err


def test_ce_on_infiniband_is_refused(tmp_path: Path, capsys) -> None:
    with pytest.raises(UserError):  # at load, by every verb (tests/test_checks_rules.py)
        edited_site(tmp_path, "generic-ib", lambda d: d["container"].update(runtime="ce"))
    err = _refused(tmp_path, tmp_path / "generic-ib.yaml", capsys)
    assert "runtime: ce" in err and "fabric is ib" in err


def test_bind_model_needs_cray_mpich(tmp_path: Path, capsys) -> None:
    with pytest.raises(UserError):  # at load, by every verb (tests/test_checks_rules.py)
        edited_site(tmp_path, "generic-ib",
                    lambda d: d["container"].update(runtime="apptainer"))
    err = _refused(tmp_path, tmp_path / "generic-ib.yaml", capsys)
    assert "Cray MPICH" in err and "openmpi-cuda" in err


def test_bind_model_refuses_a_cray_mpich_outside_opt_cray(tmp_path: Path, capsys) -> None:
    """The closure is bound as the /opt/cray tree (NCAR's ``--bind /opt/cray``); a
    prefix elsewhere is refused with the key, not bound half."""
    def elsewhere(d):
        d["mpi"]["prefix"] = "/sw/cray-mpich/8.1.27/ofi/gnu/9.1"

    err = _refused(tmp_path, edited_site(tmp_path, "derecho", elsewhere).path, capsys)
    assert ": mpi.prefix: /sw/cray-mpich/8.1.27/ofi/gnu/9.1 is not below /opt/cray" in err
    assert "Traceback" not in err


def test_site_without_container_key_is_refused(tmp_path: Path, capsys) -> None:
    site = edited_site(tmp_path, "derecho", lambda d: d.pop("container"))
    assert f"{site.path}:1:1: container: missing" in _refused(tmp_path, site.path, capsys)


def test_unknown_runtime_is_a_schema_error(tmp_path: Path, capsys) -> None:
    path = tmp_path / "derecho.yaml"
    text = (sitemod.resolve("derecho")).read_text().replace("runtime: apptainer",
                                                            "runtime: docker")
    path.write_text(text)
    err = _refused(tmp_path, path, capsys)
    line = text.splitlines().index("  runtime: docker") + 1
    assert re.search(rf"derecho.yaml:{line}:\d+", err) and "container.runtime" in err
    assert "Traceback" not in err


def test_rewrite_is_atomic_and_hand_edits_are_kept(tmp_path: Path, capsys) -> None:
    out = render_cli(tmp_path, "derecho", capsys)
    run = out / "run.sh"
    run.write_text(run.read_text() + "# my change\n")
    assert main(["container", "derecho", "-o", str(out)]) == 2
    assert "edited by hand" in capsys.readouterr().err
    assert main(["container", "derecho", "-o", str(out), "--force"]) == 0
    assert "# my change" not in run.read_text()
    assert not [p for p in out.iterdir() if p.name.startswith(".")]


@pytest.mark.skipif(not shutil.which("bash"), reason="no bash")
def test_container_help_names_the_verb(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["container", "--help"])
    assert "Containerfile" in capsys.readouterr().out


# --- what the image and its descriptors must carry (each kills a planted bug, scripts/mutate.py)

def test_unstated_cuda_aware_is_cuda_aware_in_the_image(tmp_path: Path) -> None:
    """``mpi.cuda_aware`` defaults to true (site schema, runtime.cray_gpu_switch): a Cray
    site that does not state it gets the same image and injection as one stating true --
    the stand-in MPICH built +cuda and the host's GTL preloaded."""
    site = edited_site(tmp_path, "derecho", lambda d: d["mpi"].pop("cuda_aware"))
    assert container.plan(site) == container.plan(sitemod.load("derecho"))
    files = container.render(site)
    mpich = yaml.safe_load(files["spack.yaml"])["spack"]["packages"]["mpich"]["require"][0]
    assert "+cuda" in mpich.split()
    assert "libmpi_gtl_cuda.so.0" in files["run.sh"]


#: The image's root spec, site by site: alps-gh200 states cuda_aware: false (CSCS's
#: uenv has no CUDA-aware MPI for torch), derecho and perlmutter true, generic-ib's
#: openmpi-cuda is CUDA-aware without stating it.
CUDA_AWARE_ROOT = {"alps-gh200": "~cuda_aware_mpi", "derecho": "+cuda_aware_mpi",
                   "perlmutter": "+cuda_aware_mpi", "generic-ib": "+cuda_aware_mpi"}


@pytest.mark.parametrize("name", sorted(CUDA_AWARE_ROOT))
def test_image_root_spec_is_cuda_aware_only_where_the_site_is(name: str) -> None:
    env = yaml.safe_load(container.render(sitemod.load(name))["spack.yaml"])["spack"]
    root = env["specs"][0].split()
    assert root[0] == "py-torch-mpi" and "+cuda" in root
    assert CUDA_AWARE_ROOT[name] in root
    other = {"+cuda_aware_mpi": "~cuda_aware_mpi", "~cuda_aware_mpi": "+cuda_aware_mpi"}
    assert other[CUDA_AWARE_ROOT[name]] not in root


def test_plain_podman_passes_the_gpus_and_the_hca_only_where_the_runtime_is_podman(
        tmp_path: Path, capsys) -> None:
    """generic-ib's runtime is podman: its run.sh must hand the container the GPUs and
    /dev/infiniband (without it NCCL has no verbs device and falls back to sockets);
    derecho's run-podman.sh re-creates the apptainer injection and passes no device."""
    ib = (render_cli(tmp_path, "generic-ib", capsys) / "run.sh").read_text()
    launch = next(line for line in ib.splitlines() if line.startswith("exec podman run"))
    assert "--device nvidia.com/gpu=all" in launch and "--device /dev/infiniband" in launch
    derecho = (render_cli(tmp_path, "derecho", capsys) / "run-podman.sh").read_text()
    assert "--device" not in derecho


def _shifter(cuda_aware: bool):
    def edit(data):
        data["container"] = {"runtime": "shifter",
                             "nccl": {"version": "2.29.2-1", "plugin": "1.18.0"}}
        data["mpi"]["cuda_aware"] = cuda_aware
        data["runtime"]["env"]["MPICH_GPU_SUPPORT_ENABLED"] = int(cuda_aware)
    return edit


def test_shifter_loads_cuda_mpich_only_on_a_cuda_aware_site(tmp_path: Path) -> None:
    """NERSC's cuda-mpich module injects the GTL; on a site whose torch is built
    ~cuda_aware_mpi (MPICH_GPU_SUPPORT_ENABLED=0) it must not be requested."""
    def header(cuda_aware: bool) -> str:
        site = edited_site(tmp_path / str(cuda_aware), "perlmutter", _shifter(cuda_aware))
        return container.render(site)["shifter.sh"]

    (tmp_path / "True").mkdir()
    (tmp_path / "False").mkdir()
    assert "#SBATCH --module=gpu,nccl-plugin,cuda-mpich\n" in header(True)
    off = header(False)
    assert "#SBATCH --module=gpu,nccl-plugin\n" in off and "cuda-mpich\n" not in off
    assert "export MPICH_GPU_SUPPORT_ENABLED=0\n" in off


def test_edf_prepends_and_appends_to_the_jobs_paths(tmp_path: Path) -> None:
    """runtime.prepend_path/append_path add to a path list (docs/sites.md): in the EDF the
    job's own value must stay after (before) the site's directory, not be replaced.
    ``${VAR:-}`` is the EDF's expansion that tolerates an unset VAR (CSCS EDF reference,
    docs.cscs.ch/software/container-engine/edf/, variable expansion)."""
    def edit(data):
        data["runtime"]["prepend_path"] = {"LD_LIBRARY_PATH": "/opt/site/lib"}
        data["runtime"]["append_path"] = {"PATH": "/opt/site/bin"}

    edf = tomllib.loads(container.render(edited_site(tmp_path, "alps-gh200", edit))[
        "alps-gh200.toml"])
    assert edf["env"]["LD_LIBRARY_PATH"] == "/opt/site/lib:${LD_LIBRARY_PATH:-}"
    assert edf["env"]["PATH"] == "${PATH:-}:/opt/site/bin"


def _add_to_paths(data) -> None:
    data["runtime"]["prepend_path"] = {"PATH": "/opt/site/bin"}
    data["runtime"]["append_path"] = {"TORCHMPI_TEST_LIST": "/opt/site/share"}


@pytest.mark.parametrize(("name", "script"), [("derecho", "run.sh"),
                                              ("derecho", "run-podman.sh"),
                                              ("perlmutter", "run.sh"),
                                              ("generic-ib", "run.sh")])
def test_every_shell_descriptor_adds_the_sites_paths_in_the_container(
        name: str, script: str, tmp_path: Path) -> None:
    """What each ``exec`` line runs after the image is run here by a real POSIX sh,
    standing in for the image's: the site's directory goes before (after) the
    list the process already has, an unset list gets it alone.  podman runs the
    same words in a container (tests/test_container_podman.py)."""
    text = container.render(edited_site(tmp_path, name, _add_to_paths))[script]
    line = next(line for line in text.splitlines() if line.startswith("exec "))
    words = shlex.split(line)
    after_image = words[words.index("$image") + 1:]
    assert after_image[-1] == "$@", line
    proc = subprocess.run([*after_image[:-1], "/usr/bin/env"], capture_output=True, text=True,
                          check=True, env={"PATH": "/usr/bin:/bin"})
    env = dict(row.split("=", 1) for row in proc.stdout.splitlines())
    assert env["PATH"] == "/opt/site/bin:/usr/bin:/bin"
    assert env["TORCHMPI_TEST_LIST"] == "/opt/site/share"


def test_a_site_without_added_paths_starts_the_command_directly(tmp_path: Path,
                                                                capsys) -> None:
    """No shell between the image and the command where nothing is added to a list."""
    for script in ("run.sh", "run-podman.sh"):
        text = (render_cli(tmp_path, "derecho", capsys) / script).read_text()
        line = next(line for line in text.splitlines() if line.startswith("exec "))
        assert line.endswith(' "$image" "$@"'), line


def test_shifter_refuses_paths_it_cannot_add_to(tmp_path: Path, capsys) -> None:
    """shifter puts the image's ENV over the job's (NERSC/shifter src/shifter_core.c,
    shifter_setupenv): a directory added on the host would be lost in the container."""
    def edit(data):
        _shifter(True)(data)
        _add_to_paths(data)

    err = _refused(tmp_path, edited_site(tmp_path, "perlmutter", edit).path, capsys)
    assert "runtime.prepend_path" in err and "siteEnvPrepend" in err
    assert "Traceback" not in err


def test_the_sites_extra_specs_are_container_roots_too() -> None:
    """The image installs what the native environment does: the site's root, then its
    extra_specs (Derecho's), each at the image's generic target."""
    site = sitemod.load("derecho")
    p = container.plan(site)
    want = [site.root_spec, *site.data["extra_specs"]]
    assert want[1:], "derecho lists extra_specs"
    assert container.roots(site, p) == [f"{spec} target={p.target}" for spec in want]


def test_json_names_what_was_written_then_what_was_unchanged(tmp_path: Path, capsys) -> None:
    """`container --json` is for scripts: the files written on the first run, none and every
    one unchanged on the second, two-space indented as every verb's JSON."""
    out = tmp_path / "derecho"
    assert main(["container", "derecho", "-o", str(out), "--json"]) == 0
    text = capsys.readouterr().out
    first = json.loads(text)
    files = sorted(p.name for p in out.iterdir())
    assert (first["site"], first["status"], first["unchanged"]) == ("derecho", "written", [])
    assert sorted(first["written"]) == files and first["output"] == str(out)
    assert text.startswith('{\n  "site": "derecho",\n'), text[:40]
    assert main(["container", "derecho", "-o", str(out), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert (again["status"], again["written"]) == ("unchanged", [])
    assert sorted(again["unchanged"]) == files


def test_a_shipped_base_image_without_a_release_tag_is_refused(monkeypatch) -> None:
    """The site schema refuses an unpinned `container.base`; the shipped image table
    (data/containers/base_images.yaml) is checked at render time instead: a `latest`
    there is refused by name, as a UserError, before anything is written."""
    from torchmpi.container import image

    images = {k: dict(v) for k, v in image.GPU_IMAGES.items()}
    images["nvidia"]["build"] = {os: "docker.io/nvidia/cuda:latest"
                                 for os in images["nvidia"]["build"]}
    monkeypatch.setattr(image, "GPU_IMAGES", images)
    with pytest.raises(UserError) as refused:
        container.render(sitemod.load("derecho"))
    assert str(refused.value) == (
        "Containerfile: FROM docker.io/nvidia/cuda:latest: not pinned to a release tag")


def test_an_existing_file_as_output_is_refused_by_its_flag(tmp_path: Path, capsys) -> None:
    """`-o` naming a file is reported as the flag the user typed, before any work."""
    target = tmp_path / "a-file"
    target.write_text("")
    assert main(["container", "derecho", "-o", str(target)]) == 2
    err = capsys.readouterr().err
    assert f"-o/--output {target}: exists and is not a directory" in err, err


def test_a_centres_libfabric_is_bound_once_at_its_own_path(tmp_path: Path) -> None:
    """Delta's HPE libfabric lies outside its Spack tree (`mounts`): bound at its own
    path; moved below the tree, the tree's bind carries it and it is not bound again."""
    lib = "/opt/cray/libfabric/1.15.2.0"
    binds = container.plan(sitemod.load("delta")).binds
    assert (lib, lib) in binds and f"{lib}/lib64" in container.plan(
        sitemod.load("delta")).lib_path
    inside = "/sw/spack/deltas11-2023-03/libfabric-1.15.2.0"

    def move(data: dict) -> None:
        data["libfabric"]["prefix"] = inside

    binds = container.plan(edited_site(tmp_path, "delta", move)).binds
    assert [b for b in binds if b[0].startswith("/sw/spack")] == [
        ("/sw/spack/deltas11-2023-03", "/sw/spack/deltas11-2023-03")], binds


def test_a_continuation_drops_the_backslash_and_nothing_before_it() -> None:
    """As a Containerfile's reader joins lines: the backslash and line end go, the
    characters before them stay (a word split across the line is one word)."""
    assert container.parse_containerfile("RUN echo to\\\ngether \\\n  && true\n") == [
        ("RUN", "echo together   && true")]


def test_open_mpi_on_a_runtime_that_binds_nothing_is_the_images_own(tmp_path: Path) -> None:
    """Only apptainer binds a centre's Open MPI; with podman the image's own Open MPI
    runs (no release pin, nothing bound), whatever release the site states."""
    def openmpi(data: dict) -> None:
        data["mpi"].update(kind="openmpi", version="4.1.6", prefix="/opt/openmpi-4.1.6",
                           variants="+cuda")

    p = container.plan(edited_site(tmp_path, "generic-ib", openmpi))
    assert (p.runtime, p.mpi, p.binds, p.lib_path) == ("podman", "openmpi", [], [])


def test_the_image_installs_the_clingo_requirements_txt_pins(tmp_path: Path,
                                                              monkeypatch) -> None:
    """The image's clingo is the one developers solve with (requirements.txt), read at
    render time, so a bump there reaches the image without a code change."""
    from torchmpi.container import image

    (tmp_path / "sites").mkdir()
    (tmp_path / "scripts").mkdir()
    (tmp_path / "scripts" / "pins.sh").write_text(
        (paths.root() / "scripts" / "pins.sh").read_text())
    (tmp_path / "requirements.txt").write_text("pytest\nclingo==5.9.1\n")
    monkeypatch.setenv("TORCHMPI_ROOT", str(tmp_path))
    assert image._pins()[2] == "5.9.1"
    (tmp_path / "requirements.txt").write_text("pytest\n")
    assert image._pins()[2] == "5.8.3"  # no pin: the release the code was written for
