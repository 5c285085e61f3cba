"""Site-file mistakes caught at load, before any solve, over broken copies of shipped sites.

Each was a solve or a build that failed late (docs/sites.md).  Every error
must name the file with line:column at the key it is about, the key path,
and what is allowed.  No Spack needed.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from support.sites import edited_site, site_data, write_site
from torchmpi import site as sitemod
from torchmpi.errors import UserError

ROOT = Path(__file__).resolve().parents[1]


def refused(tmp_path: Path, name: str, edit, key: str) -> tuple[str, str]:
    """The error line naming ``key`` and the text of the file line it points at."""
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, name, edit)
    msg = str(err.value)
    line = next((s for s in msg.splitlines() if f": {key}: " in s), None)
    assert line, msg
    found = re.search(rf"{re.escape(str(tmp_path / (name + '.yaml')))}:(\d+):(\d+): ", line)
    assert found, line
    text = (tmp_path / f"{name}.yaml").read_text().splitlines()[int(found.group(1)) - 1]
    return line, text


def test_slingshot_libfabric_without_cxi(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["libfabric"]["spec"] = "libfabric@1.15.2.0 fabrics=tcp,udp"
    line, text = refused(tmp_path, "derecho", edit, "libfabric.spec")
    assert "lacks the cxi provider" in line and "allowed: the spec with fabrics=cxi" in line
    assert text.strip().startswith("spec: libfabric@1.15.2.0")

    def bare(d: dict) -> None:
        d["libfabric"]["spec"] = "libfabric@1.15.2.0"
    line, _ = refused(tmp_path, "perlmutter", bare, "libfabric.spec")
    assert "lacks the cxi provider" in line


def test_cuda_arch_without_cray_gtl(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["cuda_arch"] = "90a"
        d["gpu"]["model"] = "NVIDIA GH200"
        d["gpu"]["cuda"]["spec"] = "cuda@12.4.0"
    line, text = refused(tmp_path, "derecho", edit, "gpu.cuda_arch")
    assert "no GTL support could be found" in line
    assert "allowed: 70, 80, 90 (90 is the same GPU), or mpi.cuda_aware: false" in line
    assert text.strip().startswith("cuda_arch:")


def test_cuda_arch_without_cray_gtl_when_cuda_aware_is_unstated(tmp_path: Path) -> None:
    """Cray MPICH is CUDA-aware unless the site says otherwise (the root is
    +cuda_aware_mpi and the build needs the GTL), so the GTL rule holds too."""
    def edit(d: dict) -> None:
        d["mpi"].pop("cuda_aware")
        d["gpu"].update(cuda_arch="90a", model="NVIDIA GH200")
        d["gpu"]["cuda"]["spec"] = "cuda@12.4.0"
    line, _ = refused(tmp_path, "derecho", edit, "gpu.cuda_arch")
    assert "no GTL support could be found" in line


def test_cuda_range_end_takes_its_point_releases(tmp_path: Path) -> None:
    """builtin's `cuda@9.0:12.9` for cuda_arch=70 takes 12.9.1 (Spack: a range's
    end matches every release it prefixes); 13.0 is past it."""
    def v100(cuda: str):
        def edit(d: dict) -> None:
            d["gpu"].update(cuda_arch=70, model="NVIDIA V100-SXM2-32GB")
            d["gpu"]["cuda"]["spec"] = f"cuda@{cuda}"
        return edit
    site = edited_site(tmp_path, "derecho", v100("12.9.1"))
    assert site.cuda_arch == "70" and site.gpu["cuda"]["spec"] == "cuda@12.9.1"
    line, _ = refused(tmp_path, "derecho", v100("13.0.0"), "gpu.cuda_arch")
    assert "'70' needs CUDA 9.0 to 12.9" in line and "the site's CUDA is 13.0.0" in line


def test_cuda_arch_gtl_rule_is_off_without_cuda_aware_mpi(tmp_path: Path) -> None:
    site = edited_site(tmp_path, "alps-gh200", lambda d: d["gpu"].update(cuda_arch="90a"))
    assert site.cuda_arch == "90a"  # alps-gh200 has mpi.cuda_aware: false


def test_cuda_arch_not_the_models(tmp_path: Path) -> None:
    line, _ = refused(tmp_path, "derecho", lambda d: d["gpu"].update(cuda_arch=90),
                      "gpu.cuda_arch")
    assert "is not the compute capability of the NVIDIA A100" in line and "allowed: 80" in line


def test_cuda_arch_the_sites_cuda_cannot_build(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["gpu"]["cuda_arch"] = 100
        d["gpu"].pop("model", None)
        d["mpi"]["cuda_aware"] = False
        d["runtime"]["env"].pop("MPICH_GPU_SUPPORT_ENABLED", None)
    line, _ = refused(tmp_path, "derecho", edit, "gpu.cuda_arch")
    assert "needs CUDA 12.8 or newer" in line and "the site's CUDA is 12.2.1" in line


def test_compiler_version_from_a_module_name(tmp_path: Path) -> None:
    def edit(d: dict) -> None:  # NCAR's gcc 12.2.0 tree, version from a module `gcc/12.3`
        d["compilers"][0]["spec"] = "gcc@12.3.0"
        d["compilers"][0]["modules"] = ["ncarenv/23.09", "gcc/12.3"]
    line, text = refused(tmp_path, "derecho", edit, "compilers[0].spec")
    assert "gcc@12.3.0 (it looks taken from the module gcc/12.3) contradicts" in line
    assert "/opt/cray/pe/gcc/12.2.0/snos, a gcc 12.2.0" in line
    assert "allowed: the version `/opt/cray/pe/gcc/12.2.0/snos/bin/gcc -dumpfullversion`" in line
    assert "spec: gcc@12.3.0" in text

    def native(d: dict) -> None:  # /usr/bin/gcc-12 is no gcc 13
        d["compilers"][0]["spec"] = "gcc@13.2.0"
        d["compilers"][0]["modules"] = ["PrgEnv-gnu/8.5.0", "gcc-native/13.2"]
    line, _ = refused(tmp_path, "perlmutter", native, "compilers[0].spec")
    assert "looks taken from the module gcc-native/13.2" in line and "a gcc 12" in line


@pytest.mark.parametrize(("vendor", "archspec"), [
    ("grace", "neoverse_v2"), ("milan", "zen3"), ("AMD EPYC Genoa", "zen4"),
    ("sapphire-rapids", "sapphirerapids"),
])
def test_vendor_cpu_name_gets_its_archspec_name(tmp_path: Path, vendor: str,
                                                archspec: str) -> None:
    line, text = refused(tmp_path, "derecho", lambda d: d.update(target=vendor), "target")
    assert f"did you mean {archspec}?" in line and "a vendor's name" in line
    assert text.startswith("target:")


def test_vendor_cpu_name_on_a_compiler(tmp_path: Path) -> None:
    line, _ = refused(tmp_path, "alps-gh200", lambda d: d["compilers"][0].update(target="grace"),
                      "compilers[0].target")
    assert "did you mean neoverse_v2?" in line


def test_compiler_target_other_than_the_sites(tmp_path: Path) -> None:
    """docs/sites.md once suggested `target: aarch64`, which fails to solve."""
    line, text = refused(tmp_path, "alps-gh200",
                         lambda d: d["compilers"][0].update(target="aarch64"),
                         "compilers[0].target")
    assert "cannot match any known version" in line and "allowed: neoverse_v2" in line
    assert text.strip() == "target: aarch64"


def test_missing_required_key_at_the_key_that_requires_it(tmp_path: Path) -> None:
    """A Slingshot site without libfabric: at `fabric:`, not at the file's first key."""
    line, text = refused(tmp_path, "derecho", lambda d: d.pop("libfabric"), "libfabric")
    assert "missing required key 'libfabric'" in line
    assert text.startswith("fabric: slingshot"), text


def test_missing_nested_key_at_its_parent_mapping(tmp_path: Path) -> None:
    line, text = refused(tmp_path, "derecho", lambda d: d["gpu"].pop("cuda"), "gpu.cuda")
    assert "missing required key 'cuda'" in line and text.startswith("gpu:")
    line, text = refused(tmp_path, "derecho",
                         lambda d: d["compilers"][0]["languages"].pop("c"),
                         "compilers[0].languages.c")
    assert text.strip() == "languages:"


def test_docs_cross_cpu_compiler_example_validates(tmp_path: Path) -> None:
    text = (ROOT / "docs" / "sites.md").read_text()
    section = text.split("### `compilers` (required)", 1)[1]
    block = re.search(r"```yaml\n(.*?)```", section, re.DOTALL)
    assert block, "no yaml example in the compilers section"
    example = yaml.safe_load(block.group(1))["compilers"]
    site = edited_site(tmp_path, "alps-gh200", lambda d: d.update(compilers=example))
    assert site.data["compilers"][0]["target"] == site.data["target"]


#: A gcc Spack built at its standard install path: the built-by compiler's
#: directory, then ``<name>-<version>-<hash>`` (Spack's default projection
#: ``{architecture}/{compiler.name}-{compiler.version}/{name}-{version}-{hash}``,
#: spack/spack lib/spack/spack/directory_layout.py).
SPACK_GCC = ("/opt/spack/opt/spack/linux-rocky8-x86_64_v3/gcc-8.5.0/"
             "gcc-11.4.0-kqf4g7mo2fifpuwgxr5oyuzbbqkyxpzy")


def spack_built_gcc(version: str = "11.4.0", prefix: str = SPACK_GCC):
    def edit(d: dict) -> None:
        d["compilers"][0].update(spec=f"gcc@{version}", prefix=prefix, languages={
            lang: f"{prefix}/bin/{exe}"
            for lang, exe in (("c", "gcc"), ("cxx", "g++"), ("fortran", "gfortran"))})
    return edit


def test_compiler_spack_built_takes_the_innermost_name_version_hash(tmp_path: Path) -> None:
    """`.../gcc-8.5.0/gcc-11.4.0-<hash>` is a gcc 11.4.0 built by gcc 8.5.0, not a gcc 8.5.0."""
    site = edited_site(tmp_path, "generic-ib", spack_built_gcc())
    assert site.data["compilers"][0]["spec"] == "gcc@11.4.0"
    line, text = refused(tmp_path, "generic-ib", spack_built_gcc("8.5.0"), "compilers[0].spec")
    assert "a gcc 11.4.0" in line and "spec: gcc@8.5.0" in text


def test_compiler_path_check_override(tmp_path: Path) -> None:
    """A path whose gcc version is not the compiler's (a layout the rule misreads) passes
    with ``path_version: false``; without it, the contradiction is refused."""
    odd = "/apps/gcc/12.2.0/built-with/gcc/7.5.0"
    refused(tmp_path, "generic-ib", spack_built_gcc("12.2.0", odd), "compilers[0].spec")

    def edit(d: dict) -> None:
        spack_built_gcc("12.2.0", odd)(d)
        d["compilers"][0]["path_version"] = False
    site = edited_site(tmp_path, "generic-ib", edit)
    assert site.data["compilers"][0]["path_version"] is False


def a100_and_a40(archs):
    """generic-ib with two GPU models, A100 (sm_80) and A40 (sm_86)."""
    def edit(d: dict) -> None:
        d["gpu"].update(model="NVIDIA A100-SXM4-80GB and NVIDIA A40", cuda_arch=archs)
    return edit


@pytest.mark.parametrize("archs", [[80, 86], ["80", "86"], "80,86"])
def test_cuda_arch_several_gpu_models(tmp_path: Path, archs) -> None:
    """Spack takes ``cuda_arch=80,86``; so does a site file, as a list or as Spack writes it."""
    from torchmpi import reframe, spackenv

    site = edited_site(tmp_path, "generic-ib", a100_and_a40(archs))
    assert site.cuda_archs == ["80", "86"] and site.cuda_arch == "80,86"
    assert spackenv.roots(site)[0].startswith("py-torch-mpi +cuda cuda_arch=80,86 ")
    assert "sm_80,sm_86" in site.summary()
    config = reframe.configuration(site, env_from="", outdir=tmp_path, extra_prepare=[])
    devices = config["systems"][0]["partitions"][0]["devices"]
    assert devices[0]["arch"] == "sm_80,sm_86"


@pytest.mark.parametrize(("archs", "bad"), [([80, 81], "81"), ("80,81", "'81'"),
                                            ("80,,86", "''")])
def test_cuda_arch_list_with_a_wrong_item(tmp_path: Path, archs, bad: str) -> None:
    line, text = refused(tmp_path, "generic-ib", a100_and_a40(archs), "gpu.cuda_arch")
    assert f"{bad} is not a CUDA architecture; allowed: 50, 52" in line
    assert "or several: a list ([80, 86]) or as Spack writes them ('80,86')" in line
    assert text.strip().startswith("cuda_arch:")


def test_cuda_arch_list_is_checked_item_by_item(tmp_path: Path) -> None:
    """Each architecture of the list meets every rule a single one does."""
    line, _ = refused(tmp_path, "generic-ib", a100_and_a40([80, 90]), "gpu.cuda_arch")
    assert "'90' is not the compute capability of any GPU model of NVIDIA A100" in line
    assert "allowed: 80, 86" in line
    line, _ = refused(tmp_path, "generic-ib", a100_and_a40([80]), "gpu.cuda_arch")
    assert "the NVIDIA A40 in the model needs 86" in line

    def cray(d: dict) -> None:  # derecho's Cray MPICH has no GTL for 86
        d["gpu"].update(model="NVIDIA A100 and NVIDIA A40", cuda_arch="80,86")
    line, _ = refused(tmp_path, "derecho", cray, "gpu.cuda_arch")
    assert "'86': builtin cray-mpich has Cray's CUDA GTL only for" in line

    def old_cuda(d: dict) -> None:
        d["gpu"].update(model="NVIDIA A100 and NVIDIA H100", cuda_arch=[80, 90])
        d["gpu"]["cuda"]["spec"] = "cuda@11.4.0"
    line, _ = refused(tmp_path, "generic-ib", old_cuda, "gpu.cuda_arch")
    assert "'90' needs CUDA 12.0 or newer" in line


def test_cuda_arch_comma_pattern_is_the_enum() -> None:
    """The schema's ``'80,86'`` form names exactly the architectures its single form does."""
    import json

    schema = json.loads((ROOT / "wrapper/torchmpi/schema/site.schema.json").read_text())
    single = [a for a in schema["$defs"]["cuda_arch"]["enum"] if isinstance(a, str)]
    forms = schema["properties"]["gpu"]["oneOf"][1]["properties"]["cuda_arch"]["anyOf"]
    pattern = forms[2]["pattern"]
    alternatives = re.fullmatch(r"\^\(([^)]*)\)\(,\(([^)]*)\)\)\+\$", pattern)
    assert alternatives, pattern
    assert alternatives.group(1).split("|") == alternatives.group(2).split("|") == single


def mpich(version: str):
    """generic-ib with the centre's MPICH-based MPI declared as ``kind: mpich``."""
    def edit(d: dict) -> None:
        d["gpu"].pop("cuda_arch")
        d["gpu"]["cuda_arch"] = 80
        d["mpi"] = {"kind": "mpich", "version": version, "prefix": "/opt/mpi",
                    "cuda_aware": False}
        d.pop("container")  # no container stand-in for mpich (test_container_* below)
    return edit


def test_mpich_version_mpich_never_had(tmp_path: Path) -> None:
    """ParaStation MPI 5.10.0-1 (JSC's MPICH-based MPI) is no MPICH: MPICH's releases are
    3.0 to 3.4, 4.0 to 4.3 and 5.0 (builtin mpich), never 5.10, never a ``-1`` suffix."""
    line, text = refused(tmp_path, "generic-ib", mpich("5.10.0-1"), "mpi.version")
    assert "'5.10.0-1' is no MPICH release" in line and "ParaStation MPI" in line
    assert "allowed: an MPICH release: 3.0 to 3.4, 4.0 to 4.3, 5.0" in line
    assert text.strip() == "version: 5.10.0-1"
    refused(tmp_path, "generic-ib", mpich("5.10.0"), "mpi.version")
    refused(tmp_path, "generic-ib", mpich("2.1"), "mpi.version")  # MPICH2 1.x; then 3.0


@pytest.mark.parametrize("version", ["4.3.2", "3.4", "4.3.9", "5.0.1", "5.1.0", "6.0.0"])
def test_mpich_release_series_accepted(tmp_path: Path, version: str) -> None:
    """A release of a known series, a point release after the pin, or the next series."""
    assert edited_site(tmp_path, "generic-ib", mpich(version)).data["mpi"]["version"] == version


def centre_openmpi(variants: str | None = None, cuda_aware: bool | None = None):
    """generic-ib with the centre's own CUDA-aware Open MPI (EasyBuild, a module) declared
    under ``mpi:``, as an admin of an InfiniBand GH200 centre would."""
    def edit(d: dict) -> None:
        d["mpi"] = {"kind": "openmpi", "version": "5.0.5",
                    "prefix": "/apps/easybuild/software/OpenMPI/5.0.5-GCC-13.3.0",
                    "modules": ["OpenMPI/5.0.5"]}
        if variants is not None:
            d["mpi"]["variants"] = variants
        if cuda_aware is not None:
            d["mpi"]["cuda_aware"] = cuda_aware
    return edit


def test_centre_mpi_declared_cuda_aware_renders_once_with_its_variants(
        tmp_path: Path) -> None:
    """The fix for a solve that failed 197 s in with "py-torch +cuda_aware_mpi needs a
    CUDA-aware MPI": the variants go on the `mpi:` external, rendered once, under the
    centre's module name."""
    from torchmpi import spackenv

    site = edited_site(tmp_path, "generic-ib", centre_openmpi("+cuda fabrics=ucx"))
    _, data = spackenv.packages_yaml(site)
    pkgs = data["packages"]
    assert pkgs["mpi"] == {"require": ["openmpi@5.0.5"]}
    assert pkgs["openmpi:"]["externals"] == [{
        "spec": "openmpi@5.0.5 +cuda fabrics=ucx",
        "prefix": "/apps/easybuild/software/OpenMPI/5.0.5-GCC-13.3.0",
        "modules": ["OpenMPI/5.0.5"]}]
    assert pkgs["openmpi:"]["buildable"] is False
    assert [n for n in pkgs if "openmpi" in n] == ["openmpi:"]
    assert "+cuda_aware_mpi" in spackenv.roots(site)[0]
    from torchmpi import modules  # no module of the tree's own: the centre's is loaded

    lmod = modules.config(site)
    assert "openmpi@5.0.5" in lmod["exclude"]
    assert "OpenMPI/5.0.5" in lmod["py-torch-mpi"]["load"]


def test_centre_mpi_without_cuda_is_refused_before_the_solve(tmp_path: Path) -> None:
    line, text = refused(tmp_path, "generic-ib", centre_openmpi(), "mpi.variants")
    assert "py-torch +cuda_aware_mpi needs a CUDA-aware MPI" in line
    assert "allowed: variants: +cuda" in line and "or mpi.cuda_aware: false" in line
    assert text.startswith("mpi:")
    line, text = refused(tmp_path, "generic-ib", centre_openmpi("~cuda"), "mpi.variants")
    assert "allowed: variants: +cuda" in line and text.strip() == "variants: ~cuda"
    site = edited_site(tmp_path, "generic-ib", centre_openmpi(cuda_aware=False))
    assert site.data["mpi"]["cuda_aware"] is False


@pytest.mark.parametrize(("site_name", "edit", "words"), [
    ("derecho", lambda d: d["mpi"].update(variants="+cuda"),
     "cray-mpich's variants are the tool's"),
    ("generic-ib", lambda d: d["mpi"].update(variants="+cuda"),
     "variants describe the centre's MPI external"),
    ("generic-ib", centre_openmpi("+cuda cuda_arch=90 +cuda"), "names cuda twice"),
])
def test_mpi_variants_where_they_cannot_apply(tmp_path: Path, site_name: str, edit,
                                              words: str) -> None:
    line, _ = refused(tmp_path, site_name, edit, "mpi.variants")
    assert words in line


def test_mpi_variants_syntax(tmp_path: Path) -> None:
    line, _ = refused(tmp_path, "generic-ib", centre_openmpi("+cuda; rm -rf /"),
                      "mpi.variants")
    assert "allowed: Spack variants" in line


def _verbs(tmp_path: Path, path: Path, capsys) -> dict[str, tuple[int, str]]:
    """Exit status and stderr of each verb that loads a site file, on ``path``."""
    from torchmpi.cli import main

    out = {}
    for verb, argv in {
        "render": ["render", str(path), "-o", str(tmp_path / "env")],
        "container": ["container", str(path), "-o", str(tmp_path / "box")],
        "reframe": ["reframe", str(path), "-o", str(tmp_path / "rfm")],
        "bump-check": ["bump-check", str(path)],
    }.items():
        try:
            status = main(argv)
        except SystemExit as done:
            status = done.code
        out[verb] = (status, capsys.readouterr().err)
    return out


@pytest.mark.parametrize(("runtime", "kind"), [
    ("apptainer", "openmpi-cuda"), ("podman-hpc", "openmpi-cuda"), ("shifter", "openmpi-cuda"),
])
def test_container_runtime_refused_by_every_verb_at_load(tmp_path: Path, capsys,
                                                         runtime: str, kind: str) -> None:
    """apptainer/podman-hpc/shifter inject the host's Cray MPICH: with another MPI every
    verb refuses the file at load (render and concretize had accepted it, and only
    `container` refused it), at container.runtime, with the allowed runtimes."""
    def edit(d: dict) -> None:
        d["container"]["runtime"] = runtime
        d["mpi"]["kind"] = kind
    path = tmp_path / "generic-ib.yaml"
    with pytest.raises(UserError):
        edited_site(tmp_path, "generic-ib", edit)
    runs = _verbs(tmp_path, path, capsys)
    line_no = path.read_text().splitlines().index(f"  runtime: {runtime}") + 1
    for verb, (status, err) in runs.items():
        assert status == 2, (verb, err)
        assert f"generic-ib.yaml:{line_no}:" in err and ": container.runtime: " in err, (verb, err)
        assert f"mpi.kind is {kind}" in err and "allowed: podman" in err, (verb, err)
        assert "Traceback" not in err


def test_container_runtime_ce_off_slingshot_refused_at_load(tmp_path: Path) -> None:
    line, _ = refused(tmp_path, "generic-ib", lambda d: d["container"].update(runtime="ce"),
                      "container.runtime")
    assert "fabric is ib" in line and "allowed: podman" in line

    def mpich(d: dict) -> None:
        d["mpi"] = {"kind": "mpich", "cuda_aware": False}
    line, _ = refused(tmp_path, "generic-ib", mpich, "container.runtime")
    assert "mpich has no container stand-in" in line


def test_container_rule_and_container_agree() -> None:
    """The load-time rule and the container planner name the same injecting runtimes."""
    from torchmpi import container
    from torchmpi.checks import container as rule

    assert set(rule.INJECTS_CRAY) == set(container.INJECTS_CRAY)


@pytest.mark.parametrize("kind", ["openmpi", "cray-mpich"])
def test_podman_on_slingshot_is_refused(tmp_path: Path, capsys, kind: str) -> None:
    """Plain podman injects nothing: the image's libfabric has no cxi provider, yet its run
    script set NCCL_NET='AWS Libfabric' and the FI_CXI_* values without a word."""
    def edit(d: dict) -> None:
        d["container"] = {"runtime": "podman"}
        if kind == "openmpi":
            d["mpi"] = {"kind": "openmpi"}
            d["runtime"]["env"].pop("MPICH_GPU_SUPPORT_ENABLED")
            d["runtime"]["env"].pop("MPICH_OFI_NIC_POLICY")
    line, text = refused(tmp_path, "derecho", edit, "container.runtime")
    assert "no cxi provider" in line and "NCCL_NET" in line
    assert "allowed: apptainer or podman-hpc" in line and text.strip() == "runtime: podman"
    runs = _verbs(tmp_path, tmp_path / "derecho.yaml", capsys)
    assert {verb: status for verb, (status, _) in runs.items()} == dict.fromkeys(runs, 2)


def test_slurm_allocates_mpirun_launches(tmp_path: Path) -> None:
    """A centre whose Open MPI docs say "allocate with Slurm, start ranks with mpirun":
    ``launch: mpirun`` keeps ReFrame's Slurm scheduler and launches with mpirun."""
    from torchmpi import reframe

    site = edited_site(tmp_path, "generic-ib", lambda d: d.update(launch="mpirun"))
    config = reframe.configuration(site, env_from="", outdir=tmp_path, extra_prepare=[])
    partition = config["systems"][0]["partitions"][0]
    assert (partition["scheduler"], partition["launcher"]) == ("slurm", "mpirun")
    unchanged = edited_site(tmp_path, "generic-ib")
    assert reframe.launcher(unchanged) == "srun"


def test_launch_only_under_slurm(tmp_path: Path) -> None:
    line, text = refused(tmp_path, "derecho", lambda d: d.update(launch="mpirun"), "launch")
    assert "launcher is pbs" in line and "allowed: no launch key" in line
    assert text == "launch: mpirun"


def test_launch_mpirun_with_a_value_that_needs_an_srun_flag(tmp_path: Path) -> None:
    """HPE's alt_read needs `srun --network=disable_rdzv_get`: mpirun cannot pass it."""
    def edit(d: dict) -> None:
        d["launch"] = "mpirun"
        d["runtime"]["env"]["FI_CXI_RDZV_PROTO"] = "alt_read"
    line, _ = refused(tmp_path, "perlmutter", edit, "launch")
    assert "FI_CXI_RDZV_PROTO=alt_read" in line and "srun --network=disable_rdzv_get" in line


def test_infiniband_guidance_names_each_variable_with_its_source() -> None:
    """The ib fabric has no defaults (each value names a site's own interfaces), and
    docs/sites.md says when to set NCCL_SOCKET_IFNAME, NCCL_IB_HCA and UCX's, each cited."""
    from torchmpi import runtime

    text = (ROOT / "docs" / "sites.md").read_text()
    section = text.split("### InfiniBand (`fabric: ib`)", 1)[1].split("\n## ", 1)[0]
    rows = {row.split("|")[1].strip(" `"): row for row in section.splitlines()
            if row.startswith("| `")}
    for name, source in (("NCCL_SOCKET_IFNAME", "docs.nvidia.com/deeplearning/nccl"),
                         ("NCCL_IB_HCA", "same page"),
                         ("UCX_NET_DEVICES", "docs.open-mpi.org"),
                         ("UCX_TLS", "openucx")):
        assert source in rows[name], name
    fabric = (ROOT / "wrapper/torchmpi/data/fabrics/ib.yaml").read_text()
    assert yaml.safe_load(fabric)["env"] == {}
    for name in ("NCCL_SOCKET_IFNAME", "NCCL_IB_HCA", "UCX_NET_DEVICES"):
        assert name in fabric
    assert runtime.environment({"fabric": "ib"}) == {}


def test_old_libfabric_against_a_pair_vouched_with_2x_is_noted(tmp_path: Path, capsys) -> None:
    """A Slingshot site with libfabric 1.15 and no pin gets the newest pair run on
    Slingshot, vouched with libfabric 2.4.0: `render` says so, and names the pair run
    with a 1.x libfabric (NCAR's 2.21.5-1 + 1.6.0, libfabric 1.15.2.0)."""
    from torchmpi.cli import main

    def edit(d: dict) -> None:
        d["libfabric"]["spec"] = "libfabric@1.15.2.0 fabrics=cxi"
    site = edited_site(tmp_path, "perlmutter", edit)
    assert main(["render", str(site.path), "-o", str(tmp_path / "env")]) == 0
    err = capsys.readouterr().err
    assert "note: libfabric 1.15.2.0" in err and "with libfabric 2.4.0" in err, err
    assert "nccl: {version: 2.21.5-1, plugin: 1.6.0}" in err, err

    pinned = edited_site(tmp_path, "derecho")  # its pin was run with its own libfabric
    assert main(["render", str(pinned.path), "-o", str(tmp_path / "env2")]) == 0
    assert "note: libfabric" not in capsys.readouterr().err


def test_reframe_without_modules_root_or_prepare_is_noted(tmp_path: Path, capsys) -> None:
    """Without install.modules_root the jobs source runtime.sh only, which docs/users.md
    says is not enough to run: `torchmpi reframe` says so unless --prepare is given."""
    from torchmpi.cli import main

    site = edited_site(tmp_path, "generic-ib")
    assert main(["reframe", str(site.path), "-o", str(tmp_path / "a")]) == 0
    err = capsys.readouterr().err
    assert "install.modules_root" in err and "--prepare" in err and "runtime.sh" in err, err
    assert main(["reframe", str(site.path), "-o", str(tmp_path / "b"),
                 "--prepare", "spack load py-torch-mpi"]) == 0
    assert "note:" not in capsys.readouterr().err


def test_runtime_rules_hold_without_the_package_repositories(tmp_path: Path) -> None:
    """An installed tool's doctor loads site files without the build rules (no package
    repositories); the MPI-variant and container rules need none, so it refuses alike."""
    from torchmpi import site as sitemod

    with pytest.raises(UserError):
        edited_site(tmp_path, "generic-ib", lambda d: d["container"].update(runtime="apptainer"))
    with pytest.raises(UserError, match="container.runtime"):
        sitemod.load(str(tmp_path / "generic-ib.yaml"), build_rules=False)
    with pytest.raises(UserError):
        edited_site(tmp_path, "generic-ib", centre_openmpi())
    with pytest.raises(UserError, match="mpi.variants"):
        sitemod.load(str(tmp_path / "generic-ib.yaml"), build_rules=False)


# --- uenv: Alps' externals exist only inside CSCS's uenv ------------------------------------
#: The shipped Alps uenv (sites/alps-gh200.yaml, cited there).
ALPS_UENV = {"image": "pytorch/v2.9.1", "view": "default"}


def test_user_environment_prefixes_without_a_uenv_are_refused(tmp_path: Path) -> None:
    """/user-environment is empty until a uenv is mounted (cscs-docs
    docs/software/uenv/using.md), so prefixes there need the site's uenv."""
    def edit(d: dict) -> None:
        d.pop("uenv", None)
    line, text = refused(tmp_path, "alps-gh200", edit, "compilers[0].prefix")
    assert "/user-environment" in line and "no uenv" in line
    assert "allowed: uenv: {image: NAME/VERSION[:TAG], view: VIEW}" in line
    assert text.strip().startswith("prefix: /user-environment")


def test_a_uenv_on_a_site_with_nothing_under_user_environment_is_refused(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["uenv"] = dict(ALPS_UENV)
    line, text = refused(tmp_path, "derecho", edit, "uenv")
    assert "nothing in the site file lies under /user-environment" in line
    assert "allowed: no uenv key" in line
    assert text.strip().startswith("uenv:")


@pytest.mark.parametrize("image", ["pytorch", "/capstor/images/store.squashfs",
                                   "pytorch/v2.9.1:", "-pytorch/v2.9.1"])
def test_uenv_image_is_a_label_with_name_and_version(tmp_path: Path, image: str) -> None:
    """uenv labels are name/version:tag@system%uarch (cscs-docs
    docs/software/uenv/guides.md); the site pins name and version."""
    def edit(d: dict) -> None:
        d["uenv"]["image"] = image
    _line, text = refused(tmp_path, "alps-gh200", edit, "uenv.image")
    assert text.strip().startswith("image:")


def test_uenv_keys_are_image_and_view(tmp_path: Path) -> None:
    def edit(d: dict) -> None:
        d["uenv"]["mount"] = "/user-tools"
    line, _ = refused(tmp_path, "alps-gh200", edit, "uenv.mount")
    assert "allowed keys: image, view" in line


def test_shipped_alps_names_its_uenv() -> None:
    from torchmpi import site as sitemod
    assert sitemod.load("alps-gh200").data["uenv"] == ALPS_UENV


def test_gpu_auto_is_refused_outside_local(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "derecho", lambda d: d.update(gpu="auto"))
    message = str(err.value)
    assert "gpu" in message and "only for the local site" in message, message


# --- rules whose mutants survived the checks' own tests (they were caught only by the
# --- bad-input corpus, which runs every verb) ------------------------------------------


def test_openmpi_cuda_needs_a_gpu_section(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "generic-ib", lambda d: d.pop("gpu"))
    assert "openmpi-cuda is the CUDA-aware Open MPI: it needs a 'gpu' section" in str(err.value)


@pytest.mark.parametrize("fabric", ["tcp", "ib"])
def test_the_nccl_plugin_is_refused_off_slingshot(tmp_path: Path, fabric: str) -> None:
    """Every fabric but Slingshot, TCP as well as InfiniBand."""
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "alps-gh200", lambda d: d.update(fabric=fabric))
    assert ("the aws-ofi-nccl plugin is only built for fabric: slingshot"
            f" (this site says fabric: {fabric})") in str(err.value), str(err.value)


def test_a_stated_one_against_cuda_aware_false_is_refused(tmp_path: Path) -> None:
    """The site may state MPICH_GPU_SUPPORT_ENABLED only as the value its GTL linking
    needs: 1 with cuda_aware: false would abort MPI_Init (no GTL linked)."""
    def edit(d):
        d["mpi"]["cuda_aware"] = False
        d["runtime"] = {"source": "this test", "env": {"MPICH_GPU_SUPPORT_ENABLED": "1"}}
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "derecho", edit)
    assert "runtime.env.MPICH_GPU_SUPPORT_ENABLED: must be 0 here" in str(err.value)


def test_missing_top_level_key_at_the_start_of_the_file(tmp_path: Path) -> None:
    """A missing top-level key is reported at 1:1, not at the first key after the
    header comments (a message there reads as a problem with that key)."""
    path = write_site(tmp_path, "derecho", lambda d: d.pop("mpi"))
    path.write_text("# Derecho, NCAR\n# (a header)\n" + path.read_text())
    with pytest.raises(UserError, match=rf"{re.escape(str(path))}:1:1: mpi: missing required"):
        sitemod.load(str(path))


def test_a_dollar_in_a_path_list_is_refused_without_runtime_env(tmp_path: Path) -> None:
    """``runtime.prepend_path`` is checked also where the site sets no ``runtime.env``."""
    from torchmpi.checks import runtime as rule

    data = {"runtime": {"prepend_path": {"PATH": "$HOME/bin"}}}
    assert [key for key, _ in rule.problems(data, False)] == [("runtime", "prepend_path",
                                                               "PATH")]
    data = {"runtime": {"env": {}, "append_path": {"X": "/opt/x"}, "prepend_path": {"X": "/a"}}}
    assert rule.problems(data, False) == []
    data = {"runtime": {"env": {"X": "1"}, "prepend_path": {"X": "/a"}}}  # set and added to
    assert [key for key, _ in rule.problems(data, False)] == [("runtime", "prepend_path", "X")]


def _torch(*versions: str):
    def edit(data: dict) -> None:
        data.setdefault("torch", {})["versions"] = list(versions)
    return edit


def test_every_torch_release_is_checked_and_the_allowed_ones_load() -> None:
    """Each listed release is judged (one the site's CUDA cannot build does not hide the
    next); the releases a +cuda_aware_mpi refusal offers each pass the same rule."""
    from torchmpi.checks import torch_versions as rule
    from torchmpi.torches import site_cuda

    data = site_data("derecho", _torch("2.13.1", "2.12.0", "2.8.0"))
    assert site_cuda(data) == "12.2.1"  # below 2.12's cuda@12.6:
    got = rule.problems(data, True)
    assert [key for key, _ in got] == [("torch", "versions", i) for i in range(3)]
    assert got[0][1].startswith("'2.13.1' is no py-torch release of the pinned builtin")
    assert got[1][1].startswith("torch 2.12.0 needs cuda@12.6:")
    assert got[2][1].startswith("torch 2.8.0 cannot be built +cuda_aware_mpi")
    allowed = got[2][1].split("allowed: ", 1)[1].split(", or ")[0].split(", ")
    assert "2.12.0" in allowed and "2.6.0" in allowed and "2.8.0" not in allowed
    for version in allowed:
        msgs = [m for _, m in rule.problems(site_data("derecho", _torch(version)), True)]
        assert not [m for m in msgs if "cuda_aware_mpi" in m], (version, msgs)
    assert rule.problems(data, False) == []  # the package files are read for a build only


def test_auto_is_refused_on_every_site_but_the_local_one() -> None:
    """Whatever the site's name sorts like: only ``local`` may say ``auto``."""
    import copy

    from torchmpi import checks

    for name in ("derecho", "perlmutter"):
        data = copy.deepcopy(sitemod.load(name).data)
        data["target"] = "auto"
        auto = [m for key, m in checks.problems(data, False) if key == ("target",)]
        assert auto and "only for the local site" in auto[-1], (name, auto)


def test_a_libfabric_off_slingshot_needs_no_cxi() -> None:
    from torchmpi.checks import network

    data = site_data("generic-ib", lambda d: d.update(
        libfabric={"spec": "libfabric@1.15.2.0 fabrics=verbs"}))
    assert data["fabric"] != "slingshot"
    assert [k for k, _ in network.problems(data, True) if k[0] == "libfabric"] == []


def test_an_unvouched_plugin_is_shown_with_the_nccls_it_was_vouched_with() -> None:
    from torchmpi import pairs
    from torchmpi.checks import network

    table = pairs.vouched()
    nccl = "2.29.2-1"
    plugin = next(p.plugin for p in table if p.nccl != nccl
                  and p.plugin not in {q.plugin for q in table if q.nccl == nccl})
    data = site_data("perlmutter", lambda d: d.update(nccl={"version": nccl, "plugin": plugin}))
    msg = dict(network.problems(data, True))[("nccl", "plugin")]
    shown = msg.split(f"vouched with aws-ofi-nccl {plugin}: ", 1)[1]
    listed = [item.split(" (", 1)[0] for item in shown.split("; ")]
    assert listed == [p.nccl for p in table if p.plugin == plugin], msg


def test_a_misspelled_target_is_offered_three_close_names(tmp_path: Path) -> None:
    line, _ = refused(tmp_path, "derecho", lambda d: d.update(target="neoverse_v"), "target")
    assert "did you mean neoverse_v2, neoverse_v1, neoverse_v3ae?" in line


def test_a_path_that_is_the_uenv_mount_itself_needs_a_uenv(tmp_path: Path) -> None:
    """The mount point counts, not only paths below it (a value read from YAML)."""
    line, _ = refused(tmp_path, "derecho",
                      lambda d: d["runtime"].setdefault("prepend_path", {}).update(
                          PATH="/user-environment"),
                      "runtime.prepend_path.PATH")
    assert "lies under /user-environment" in line


def test_mpich_refusal_offers_the_next_series_after_the_pin() -> None:
    """The refusal names the next minor and next major series after the pin's newest;
    both are accepted."""
    from torchmpi.checks import mpi

    major, minor = mpi.mpich_series()[-1]

    def refused_version(version: str) -> list[str]:
        data = site_data("generic-ib", lambda d: d.update(
            mpi={"kind": "mpich", "version": version, "cuda_aware": True}))
        return [m for k, m in mpi.problems(data, True) if k == ("mpi", "version")]

    msg = refused_version("5.10.0-1")
    assert len(msg) == 1 and f"or {major}.{minor + 1} or {major + 1}.0 after the pin" in msg[0]
    assert refused_version(f"{major}.{minor + 1}") == []
    assert refused_version(f"{major + 1}.0") == []


def test_every_cuda_arch_of_a_list_is_held_against_a_single_model() -> None:
    """One model, two architectures: the one the model is not is named (not only the
    first of the list is compared)."""
    from torchmpi.checks import gpu

    def arch_problems(archs: list) -> list[str]:
        data = site_data("generic-ib", lambda d: d["gpu"].update(
            cuda_arch=archs, model="NVIDIA A100-SXM4"))
        return [m for k, m in gpu.problems(data, True) if k == ("gpu", "cuda_arch")]

    assert arch_problems([80]) == []
    got = arch_problems([80, 90])
    assert len(got) == 1 and got[0].startswith("'90' is not the compute capability of any")


def test_a_plugin_nobody_vouched_for_lists_no_nccls() -> None:
    from torchmpi.checks import network

    data = site_data("perlmutter", lambda d: d.update(
        nccl={"version": "2.29.2-1", "plugin": "9.9.9"}))
    msg = dict(network.problems(data, True))[("nccl", "plugin")]
    assert "vouched with aws-ofi-nccl 9.9.9: none (docs/design.md)" in msg
    assert ("allowed with NCCL 2.29.2-1: 1.18.0 (listed in AWS's release notes of the"
            " plugin); 1.17.2 (deployed on Slingshot by CSCS") in msg, msg


def test_the_pair_suggested_for_a_sites_libfabric_carries_its_own_label() -> None:
    """Perlmutter's libfabric 1.20 against a pair vouched with 2.4.0: the note names a
    pair vouched with a 1.x libfabric, and the label beside it is that pair's.  "Vouched",
    not "run": a pair's evidence is a job log for none of the rows (pairs.EVIDENCE)."""
    from torchmpi import pairs
    from torchmpi.checks import network

    # As render asks: the loaded site, the schema's defaults (gpu.vendor) filled in.
    notes = [n for n in network.notes(sitemod.load("perlmutter").data)
             if "a pair vouched with" in n]
    assert len(notes) == 1, notes
    found = re.search(r"nccl: \{version: (\S+), plugin: (\S+)\} \(([^)]*)\)", notes[0])
    assert found, notes[0]
    pair = next(p for p in pairs.vouched()
                if (p.nccl, p.plugin) == (found.group(1), found.group(2)))
    assert pair.libfabric.startswith("1.") and found.group(3) == pair.label
    assert " run " not in notes[0].replace(found.group(3), ""), notes[0]


@pytest.mark.parametrize(("version", "refused"), [("2.6.0", False), ("2.7.0", True),
                                                ("2.9.0", True), ("2.9.1", False)])
def test_the_cuda_aware_gap_holds_both_its_ends(version: str, refused: bool) -> None:
    """No +cuda_aware_mpi for torch 2.7.0 through 2.9.0, both ends (their ProcessGroupMPI
    text was never read); 2.6.0 and 2.9.1, on either side, pass every rule here."""
    from torchmpi.checks import torch_versions as rule

    msgs = [m for _, m in rule.problems(site_data("derecho", _torch(version)), True)]
    assert ([m.split(" (")[0] for m in msgs] ==
            [f"torch {version} cannot be built +cuda_aware_mpi"] if refused else msgs == []), msgs


def test_a_variable_reference_inside_a_runtime_value_is_refused() -> None:
    """A '$' anywhere in a value, not only at its start: runtime.sh, the modules and
    Spack's env_vars would each carry it differently (or literally)."""
    from torchmpi.checks import runtime as rule

    for value in ("$HOME/lib", "/opt/lib:$LD_LIBRARY_PATH"):
        data = site_data("derecho", lambda d, v=value: d["runtime"]["env"].update(
            MY_PATH=v))
        keys = [key for key, _ in rule.problems(data, True)]
        assert ("runtime", "env", "MY_PATH") in keys, (value, keys)


def test_a_release_after_one_without_cuda_aware_mpi_is_still_checked() -> None:
    """A site without +cuda_aware_mpi: the release after an allowed one is judged too."""
    import copy

    from torchmpi.checks import torch_versions as rule

    data = copy.deepcopy(sitemod.load("alps-gh200").data)  # mpi.cuda_aware: false
    data.setdefault("torch", {})["versions"] = ["2.11.0", "2.13.1"]
    assert [key for key, _ in rule.problems(data, True)] == [("torch", "versions", 1)]


def test_a_cuda_arch_is_held_against_both_ends_of_its_cuda_range() -> None:
    """sm_70 (V100) builds with CUDA 9.0 to 12.9 (builtin CudaPackage): 12.2 inside, the
    range's end 12.9.1 inside (an end takes its point releases), 13.0 outside."""
    from torchmpi.checks import gpu

    def arch_problems(cuda: str) -> list[str]:
        data = site_data("generic-ib", lambda d: d["gpu"].update(
            cuda_arch=70, cuda={"spec": f"cuda@{cuda}", "prefix": "/usr/local/cuda"}))
        return [m for k, m in gpu.problems(data, True) if k == ("gpu", "cuda_arch")]

    assert gpu.cuda_ranges()["70"] == ("9.0", "12.9")
    assert arch_problems("12.2.1") == [] and arch_problems("12.9.1") == []
    got = arch_problems("13.0.0")
    assert len(got) == 1 and got[0].startswith("'70' needs CUDA 9.0 to 12.9 (builtin")


def test_a_variant_named_twice_is_told_by_its_name_not_its_value() -> None:
    """``fabrics=ucx schedulers=ucx`` names two variants; ``fabrics=ucx fabrics=ofi`` one
    variant twice (JSC's Open MPI: ``+cuda fabrics=ucx``)."""
    import copy

    from torchmpi.checks import mpi

    def variant_problems(variants: str) -> list[str]:
        data = copy.deepcopy(sitemod.load("jupiter").data)
        data["mpi"]["variants"] = variants
        return [m for k, m in mpi.problems(data, False) if k == ("mpi", "variants")]

    assert variant_problems("+cuda fabrics=ucx schedulers=ucx") == []
    assert variant_problems("+cuda fabrics=ucx fabrics=ofi") == [
        "names fabrics twice; allowed: each variant once"]
