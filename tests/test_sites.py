"""Unit tests for site files, rendering and detection (no Spack needed).

Each bad input must give one precise message (file, line, key path,
what is allowed), a non-zero exit, and write nothing.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
import yaml
from support.host_tools import load_site, path_without
from torchmpi import detect, output, paths
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.autokeys import auto_keys
from torchmpi.checks import schema
from torchmpi.cli import main
from torchmpi.errors import UserError

#: The site files as the directory has them (sites/ is the only list of sites).
SHIPPED = sorted(p.stem for p in paths.sites_dir().glob("*.yaml"))
#: Those with a committed environment: all but the host-detected one(s).  Read from
#: the files, not loaded: loading `local` detects this host, which may lack a tool.
COMMITTED = [n for n in SHIPPED
             if not auto_keys(yaml.safe_load((paths.sites_dir() / f"{n}.yaml").read_text()))]


@pytest.fixture
def derecho_text() -> str:
    return (paths.sites_dir() / "derecho.yaml").read_text()


def write_site(tmp_path: Path, text: str, name: str = "derecho") -> Path:
    path = tmp_path / f"{name}.yaml"
    path.write_text(text)
    return path


def mutate(tmp_path: Path, text: str, edit) -> Path:
    data = yaml.safe_load(text)
    edit(data)
    return write_site(tmp_path, yaml.safe_dump(data, sort_keys=False), data.get("name", "x"))


def cli_error(capsys, *argv: str) -> str:
    rc = main(list(argv))
    err = capsys.readouterr().err
    assert rc != 0, err
    return err


# --- the shipped sites ------------------------------------------------------


def test_every_shipped_site_is_valid() -> None:
    """Every site loads; a host-detected one may instead say what this host lacks."""
    assert sitemod.available() == SHIPPED
    assert "local" in SHIPPED and "local" not in COMMITTED  # the embedded default
    for name in SHIPPED:
        try:
            site = sitemod.load(name)
        except detect.HostLacks as err:
            assert name not in COMMITTED and "install" in str(err), err
            continue
        assert site.name == name


@pytest.fixture
def no_gfortran(tmp_path: Path, monkeypatch) -> None:
    """This host's PATH without gfortran (the H200 of docs/performance.md had none)."""
    monkeypatch.setenv("PATH", path_without(tmp_path / "bin", "gfortran"))


def test_local_without_gfortran_says_what_to_install_first(no_gfortran, tmp_path, capsys):
    """Before any slow step (Spack is not started), with the line of the key."""
    out = tmp_path / "env"
    started = time.monotonic()
    err = cli_error(capsys, "render", "local", "-o", str(out))
    assert time.monotonic() - started < 20, "the refusal must come before any slow step"
    assert err.startswith("torchmpi render: error: "), err
    local = paths.sites_dir() / "local.yaml"
    line = next(i for i, text in enumerate(local.read_text().splitlines(), 1)
                if text.startswith("compilers:"))
    assert f"{local}:{line}: compilers: auto" in err
    assert "lacks gfortran" in err and "apt-get install gfortran" in err, err
    assert "dnf install gcc-gfortran" in err and not out.exists()


def test_sites_lists_a_site_this_host_cannot_load(no_gfortran, capsys) -> None:
    """Every site listed; `local` marked with why; exit 0, as --help says
    (exit 1 is for an invalid site file, which `local` is not)."""
    assert main(["sites"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.splitlines()}
    assert sorted(lines) == SHIPPED
    assert "UNAVAILABLE here" in lines["local"] and "gfortran" in lines["local"]
    assert all("UNAVAILABLE" not in lines[n] for n in COMMITTED)
    assert main(["sites", "--json"]) == 0
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert entries["local"]["valid"] is True and entries["local"]["loadable"] is False
    assert "gfortran" in entries["local"]["error"]
    assert all(entries[n]["loadable"] for n in COMMITTED)


@pytest.mark.parametrize("argv", [
    ["render", "local", "-o", "{tmp}/env"], ["container", "local", "-o", "{tmp}/c"],
    ["concretize", "local"], ["reframe", "local", "-o", "{tmp}/r"],
    ["venv", "--site", "local", "{tmp}/v"], ["doctor", "--site", "local", "--no-probe"],
    ["bump-check", "local"],
], ids=lambda argv: argv[0])
def test_every_error_names_its_own_verb(no_gfortran, tmp_path, capsys, argv) -> None:
    """The site-loading error of each verb carries that verb's name (a GPU node once showed a
    `torchmpi container: error:` line where another verb ran)."""
    err = cli_error(capsys, *(a.format(tmp=tmp_path) for a in argv))
    assert err.startswith(f"torchmpi {argv[0]}: error: "), err
    assert err.count("torchmpi ") == 1 and "gfortran" in err, err


@pytest.fixture
def broken_checkout(tmp_path, monkeypatch, derecho_text) -> Path:
    """A checkout (TORCHMPI_ROOT) whose sites/ holds derecho and ``broken``, a copy
    without its launcher; returns the broken file."""
    for item in paths.root().iterdir():  # the checkout but its sites/
        if item.name != "sites":
            (tmp_path / item.name).symlink_to(item)
    sites = tmp_path / "sites"
    sites.mkdir()
    (sites / "derecho.yaml").write_text(derecho_text)
    (sites / "broken.yaml").write_text(derecho_text.replace("\nlauncher: pbs\n", "\n"))
    monkeypatch.setenv("TORCHMPI_ROOT", str(tmp_path))
    return sites / "broken.yaml"


def test_sites_json_marks_an_invalid_file_neither_valid_nor_loadable(
        broken_checkout, capsys) -> None:
    """The copy is invalid, so not loadable either, and the exit status is 1."""
    assert main(["sites", "--json"]) == 1
    entries = {e["name"]: e for e in json.loads(capsys.readouterr().out)}
    assert (entries["broken"]["valid"], entries["broken"]["loadable"]) == (False, False)
    assert "launcher" in entries["broken"]["error"]
    assert (entries["derecho"]["valid"], entries["derecho"]["loadable"]) == (True, True)


def test_sites_text_gives_the_last_line_of_an_invalid_files_error(
        broken_checkout, capsys) -> None:
    """Its last line names the file, line and key (what a one-line listing needs)."""
    with pytest.raises(UserError) as info:
        sitemod.load("broken")
    assert main(["sites"]) == 1
    lines = {line.split()[0]: line for line in capsys.readouterr().out.splitlines()}
    assert lines["broken"] == f"broken   INVALID: {str(info.value).splitlines()[-1].strip()}"
    assert f"{broken_checkout}:1:1: launcher: missing required key" in lines["broken"]


def test_sites_lists_each_site(capsys) -> None:
    assert main(["sites"]) == 0
    out = capsys.readouterr().out
    for name in SHIPPED:
        assert name in out
    assert "cray-mpich@8.1.27" in out


@pytest.mark.parametrize("name", COMMITTED)
def test_committed_environment_is_up_to_date(name: str, capsys) -> None:
    """What CI runs: `torchmpi render --check SITE` for every committed site."""
    assert main(["render", "--check", name]) == 0, capsys.readouterr()


@pytest.mark.parametrize("name", SHIPPED)
def test_render_is_deterministic(name: str, tmp_path: Path) -> None:
    site = load_site(name, tmp_path)
    first = renderer.render(site, tmp_path / "env")
    output.write(tmp_path / "env", first)
    before = {p.name: p.read_bytes() for p in (tmp_path / "env").iterdir()}
    second = renderer.render(load_site(name, tmp_path), tmp_path / "env")
    assert first == second
    assert output.write(tmp_path / "env", second).written == []
    assert {p.name: p.read_bytes() for p in (tmp_path / "env").iterdir()} == before


def test_header_records_version_pins_and_site_hash() -> None:
    site = sitemod.load("derecho")
    text = renderer.render(site, paths.environments_dir() / "derecho")["spack.yaml"]
    pins = paths.pins()
    assert "torchmpi 0.1.0" in text
    assert pins["TORCHMPI_SPACK_TAG"] in text and pins["TORCHMPI_SPACK_PACKAGES_TAG"] in text
    assert f"site-sha256: {site.sha256}" in text
    assert not output.hand_edited(text)


def test_environment_finds_the_repo_relatively() -> None:
    data = yaml.safe_load((paths.environments_dir() / "derecho" / "spack.yaml").read_text())
    rel = data["spack"]["repos"]["torchmpi"]
    assert not os.path.isabs(rel)
    assert (paths.environments_dir() / "derecho" / rel / "repo.yaml").is_file()


@pytest.mark.parametrize("name", SHIPPED)
def test_rendered_environment_turns_the_concretization_cache_off(
    name: str, tmp_path: Path
) -> None:
    """Spack 1.1's cache can answer with a stale solve after a package edit
    (spack/spack#51553): every rendered environment says enable: false."""
    files = renderer.render(load_site(name, tmp_path), tmp_path)
    concretizer = yaml.safe_load(files["spack.yaml"])["spack"]["concretizer"]
    assert concretizer["concretization_cache"] == {"enable": False}


@pytest.mark.parametrize("name", SHIPPED)
def test_rendered_environment_prunes_what_the_requirements_rule_out(
    name: str, tmp_path: Path
) -> None:
    """``static_analysis``, as in the container environment: the solver leaves out
    providers and conditional dependencies the requirements exclude (the same
    hashes: Spack's test_static_analysis_in_environments; about 10 % less solver
    time, docs/performance.md).  Not ``duplicates: none``: Frontier's DAG has two
    py-setuptools."""
    files = renderer.render(load_site(name, tmp_path), tmp_path)
    concretizer = yaml.safe_load(files["spack.yaml"])["spack"]["concretizer"]
    assert concretizer["static_analysis"] is True
    assert "duplicates" not in concretizer


def test_requirements_not_variants() -> None:
    for name in COMMITTED:
        for fname in ("spack.yaml", "packages.yaml"):
            data = yaml.safe_load((paths.environments_dir() / name / fname).read_text())
            text = yaml.safe_dump(data)
            assert "variants:" not in text, (name, fname)


def test_rendered_yaml_parses_and_runtime_quotes(tmp_path: Path) -> None:
    files = renderer.render(sitemod.load("derecho"), tmp_path)
    for name in ("spack.yaml", "packages.yaml", "modules.yaml"):
        yaml.safe_load(files[name])
    assert "export NCCL_NET='AWS Libfabric'" in files["runtime.sh"]
    pkgs = yaml.safe_load(files["packages.yaml"])["packages"]
    assert pkgs["mpi"]["require"] == ["cray-mpich@8.1.27"]
    # `name::` (PyYAML reads the key as "name:"): replaces lower-scope config.
    assert pkgs["cray-mpich:"]["externals"][0]["spec"] == "cray-mpich@8.1.27 +cuda cuda_arch=80"
    assert pkgs["libfabric:"]["buildable"] is False
    assert pkgs["gcc:"]["buildable"] is False


# --- --check and hand edits --------------------------------------------------


def test_check_catches_drift(tmp_path: Path, capsys) -> None:
    out = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(out)]) == 0
    assert main(["render", "--check", "derecho", "-o", str(out)]) == 0
    site_copy = write_site(tmp_path, (paths.sites_dir() / "derecho.yaml").read_text()
                           .replace("8.1.27", "8.1.29"))
    capsys.readouterr()
    assert main(["render", "--check", str(site_copy), "-o", str(out)]) == 1
    captured = capsys.readouterr()
    assert "-    - cray-mpich@8.1.27\n" in captured.out
    assert "+    - cray-mpich@8.1.29\n" in captured.out
    assert "differs from a fresh render" in captured.err


def test_check_on_missing_environment(tmp_path: Path, capsys) -> None:
    assert main(["render", "--check", "derecho", "-o", str(tmp_path / "nope")]) == 1
    assert not (tmp_path / "nope").exists()


def test_hand_edited_environment_is_refused(tmp_path: Path, capsys) -> None:
    out = tmp_path / "env"
    assert main(["render", "derecho", "-o", str(out)]) == 0
    pkgs = out / "packages.yaml"
    pkgs.write_text(pkgs.read_text().replace("zen3", "zen4"))
    edited = pkgs.read_text()
    site_copy = write_site(tmp_path, (paths.sites_dir() / "derecho.yaml").read_text()
                           .replace("8.1.27", "8.1.29"))
    before = {p.name: p.read_text() for p in out.iterdir()}
    err = cli_error(capsys, "render", str(site_copy), "-o", str(out))
    assert "packages.yaml edited by hand" in err and "--force" in err
    assert {p.name: p.read_text() for p in out.iterdir()} == before  # nothing written
    assert main(["render", str(site_copy), "-o", str(out), "--force"]) == 0
    assert pkgs.read_text() != edited and "8.1.29" in pkgs.read_text()


def test_foreign_file_counts_as_hand_edited(tmp_path: Path, capsys) -> None:
    out = tmp_path / "env"
    out.mkdir()
    (out / "spack.yaml").write_text("spack:\n  specs: [zlib]\n")
    err = cli_error(capsys, "render", "derecho", "-o", str(out))
    assert "spack.yaml edited by hand" in err
    assert not (out / "packages.yaml").exists()


def test_unwritable_output_directory(tmp_path: Path, capsys) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    err = cli_error(capsys, "render", "derecho", "-o", str(blocker / "env"))
    assert "-o/--output" in err and "cannot create it" in err and "is not a directory" in err


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores directory permissions")
def test_read_only_output_directory(tmp_path: Path, capsys) -> None:
    out = tmp_path / "ro"
    out.mkdir()
    out.chmod(stat.S_IRUSR | stat.S_IXUSR)
    try:
        err = cli_error(capsys, "render", "derecho", "-o", str(out))
        assert "not writable" in err
    finally:
        out.chmod(0o755)


def test_atomic_write_leaves_no_temp_files(tmp_path: Path) -> None:
    out = tmp_path / "env"
    output.write(out, renderer.render(sitemod.load("derecho"), out))
    assert sorted(p.name for p in out.iterdir()) == sorted(renderer.FILES)


# --- bad input ------------------------------------------------------------------


def test_unknown_site_suggests_close_names(capsys, tmp_path: Path) -> None:
    err = cli_error(capsys, "render", "derecko", "-o", str(tmp_path / "e"))
    assert "unknown site 'derecko'" in err and "did you mean derecho" in err
    assert not (tmp_path / "e").exists()


def test_yaml_syntax_error_names_the_line(tmp_path: Path, capsys, derecho_text: str) -> None:
    lines = derecho_text.splitlines()
    idx = next(i for i, line in enumerate(lines) if line.startswith("target:"))
    lines[idx] = "target: [zen3"
    path = write_site(tmp_path, "\n".join(lines) + "\n")
    err = cli_error(capsys, "render", str(path), "-o", str(tmp_path / "e"))
    assert f"{path}:" in err and "YAML syntax error" in err
    assert not (tmp_path / "e").exists()


def _bad(tmp_path, capsys, text, edit) -> str:
    path = mutate(tmp_path, text, edit)
    err = cli_error(capsys, "render", str(path), "-o", str(tmp_path / "e"))
    assert str(path) in err
    assert not (tmp_path / "e").exists()
    return err


def test_unknown_key(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d.update(fabrik="slingshot"))
    assert "fabrik: unknown key 'fabrik' (did you mean 'fabric'?)" in err
    assert "allowed keys:" in err


def test_unknown_nested_key_has_line_and_path(tmp_path, capsys, derecho_text) -> None:
    path = write_site(tmp_path, derecho_text.replace("  cuda_aware: true", "  cuda_awre: true"))
    err = cli_error(capsys, "render", str(path), "-o", str(tmp_path / "e"))
    line = next(i for i, s in enumerate(derecho_text.splitlines(), 1)
                if s.startswith("  cuda_aware:"))
    assert f"{path}:{line}:3: mpi.cuda_awre: unknown key" in err


def test_wrong_type(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d.update(compilers="gcc"))
    assert "compilers:" in err
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d["mpi"].update(cuda_aware="yes"))
    assert "mpi.cuda_aware: expected true or false, got str 'yes'" in err


def test_gpu_without_cuda_arch(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d["gpu"].pop("cuda_arch"))
    assert "gpu.cuda_arch: missing required key 'cuda_arch'" in err


def test_cuda_arch_not_a_cuda_arch(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d["gpu"].update(cuda_arch=81))
    assert "gpu.cuda_arch: 81 is not a CUDA architecture; allowed: 50, 52" in err
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d["gpu"].update(cuda_arch="sm_80"))
    assert "'sm_80' is not a CUDA architecture" in err


def test_slingshot_without_libfabric(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d.pop("libfabric"))
    assert "libfabric: missing required key 'libfabric' (required when fabric is slingshot" in err


def test_external_without_prefix_or_modules(tmp_path, capsys, derecho_text) -> None:
    def edit(d):
        d["gpu"]["cuda"].pop("prefix")
        d["gpu"]["cuda"].pop("modules")
    err = _bad(tmp_path, capsys, derecho_text, edit)
    assert "gpu.cuda: an external needs 'prefix' or 'modules'" in err
    err = _bad(tmp_path, capsys, derecho_text,
               lambda d: [d["mpi"].pop("prefix"), d["mpi"].pop("modules")])
    assert "mpi: an external cray-mpich needs 'prefix' or 'modules'" in err


def test_unknown_mpi_kind(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d["mpi"].update(kind="intel-mpi"))
    assert "mpi.kind: 'intel-mpi' is not allowed; allowed: cray-mpich, openmpi-cuda" in err


def test_auto_only_for_local(tmp_path, capsys, derecho_text) -> None:
    err = _bad(tmp_path, capsys, derecho_text, lambda d: d.update(target="auto"))
    assert "target: 'auto' (host detection) is only for the local site" in err


def test_name_must_match_file(tmp_path, capsys, derecho_text) -> None:
    path = write_site(tmp_path, derecho_text, name="other")
    err = cli_error(capsys, "render", str(path), "-o", str(tmp_path / "e"))
    assert "name 'derecho' differs from the file name 'other'" in err


def test_not_a_mapping(tmp_path, capsys) -> None:
    path = write_site(tmp_path, "- a\n- b\n")
    assert "is a YAML mapping" in cli_error(capsys, "render", str(path))


def test_load_raises_user_error_for_all_problems(tmp_path, derecho_text) -> None:
    def edit(d):
        d["fabrik"] = 1
        d["gpu"]["cuda_arch"] = 81
    with pytest.raises(UserError) as info:
        sitemod.load(str(mutate(tmp_path, derecho_text, edit)))
    assert "fabrik" in str(info.value) and "cuda_arch" in str(info.value)


# --- detection -------------------------------------------------------------------


def _fake_tool(bindir: Path, name: str, script: str) -> None:
    bindir.mkdir(exist_ok=True)
    tool = bindir / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)


def test_detect_cpu_only(monkeypatch, tmp_path) -> None:
    import archspec.cpu

    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    assert detect.gpus() == []
    assert detect.target() == archspec.cpu.host().name
    site = sitemod.Site("local", Path("local.yaml"), {"target": "auto", "gpu": "auto",
                        "compilers": [{"spec": "gcc@1"}], "mpi": {"kind": "auto"}}, b"")
    detect.fill_in(site)
    assert "gpu" not in site.data
    assert site.data["mpi"] == {"kind": "openmpi"}
    assert site.data["target"] == archspec.cpu.host().name


def test_detect_gpu_with_fake_nvidia_smi(monkeypatch, tmp_path) -> None:
    bindir = tmp_path / "bin"
    _fake_tool(bindir, "nvidia-smi", 'echo "NVIDIA A100-SXM4-40GB, 8.0"\n'
                                     'echo "NVIDIA A100-SXM4-40GB, 8.0"\n')
    _fake_tool(bindir, "nvcc", 'echo "Cuda compilation tools, release 12.4, V12.4.131"\n')
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    assert detect.gpus()[0] == {"name": "NVIDIA A100-SXM4-40GB", "cuda_arch": "80"}
    assert detect.cuda_toolkit() == {"version": "12.4.131", "prefix": str(tmp_path)}
    site = load_site("local", tmp_path)
    assert site.cuda_arch == "80"
    assert site.data["mpi"]["kind"] == "openmpi-cuda"
    files = renderer.render(site, tmp_path / "env")
    assert "py-torch-mpi +cuda cuda_arch=80 +cuda_aware_mpi fabric=tcp" in files["spack.yaml"]
    assert "cuda@12.4.131" in files["packages.yaml"]


def test_detect_command(capsys) -> None:
    assert main(["detect"]) == 0
    assert "target (archspec)" in capsys.readouterr().out
    assert main(["detect", "--json"]) == 0
    assert '"target"' in capsys.readouterr().out


def test_detect_skips_nvidia_smi_lines_that_name_no_gpu(monkeypatch, tmp_path) -> None:
    """A line of the query's output that is no ``name, compute_cap`` row (a driver
    warning, say) is skipped, and the GPU after it still counts."""
    bindir = tmp_path / "bin"
    _fake_tool(bindir, "nvidia-smi", 'echo "WARNING: infoROM is corrupted at gpu 0000:41:00.0"\n'
                                     'echo "NVIDIA H100 80GB HBM3, 9.0"\n')
    monkeypatch.setenv("PATH", str(bindir))
    assert detect.gpus() == [{"name": "NVIDIA H100 80GB HBM3", "cuda_arch": "90"}]


def _stand_in_spack(root: Path, script: str) -> None:
    """A ``spack`` on TORCHMPI_SPACK_ROOT that runs ``script`` (shell builtins only:
    the test's PATH may hold nothing else) and records its arguments in ``argv``."""
    root.mkdir(parents=True, exist_ok=True)
    _fake_tool(root / "bin", "spack", f'printf "%s\\n" "$@" > "{root}/argv"\n' + script)


#: What `spack external find --scope user` writes to the user scope's packages.yaml
#: (Spack's docs, "Automatically Find External Packages"): one entry per package with
#: its spec and prefix; Spack 1.x writes a compiler's languages into the spec.
FOUND = ("packages:\n"
         "  binutils:\n    externals:\n    - spec: binutils@2.42\n      prefix: /usr\n"
         "  cmake:\n    externals:\n    - spec: cmake@3.28.3\n      prefix: /usr\n"
         "  gcc:\n    externals:\n    - spec: gcc@13.2.0 languages:='c,c++'\n"
         "      prefix: /usr\n")


@pytest.fixture
def found_externals(monkeypatch, tmp_path) -> Path:
    """A stand-in Spack whose external find reports :data:`FOUND` (binutils too, as if
    ``--exclude`` had not held); ``detect.build_tools``' cache is cleared around it."""
    root = tmp_path / "spack"
    _stand_in_spack(root, f"printf '%s' \"{FOUND}\" > \"$SPACK_USER_CONFIG_PATH/packages.yaml\"\n")
    monkeypatch.setenv("TORCHMPI_SPACK_ROOT", str(root))
    detect.build_tools.cache_clear()
    yield root
    detect.build_tools.cache_clear()


def test_build_tools_drop_the_excluded_and_keep_the_rest(found_externals) -> None:
    assert detect.build_tools() == (
        {"spec": "cmake@3.28.3", "prefix": "/usr"},
        {"spec": "gcc@13.2.0 languages:='c,c++'", "prefix": "/usr"})
    argv = (found_externals / "argv").read_text().split()
    assert argv == ["external", "find", "--scope", "user",
                    "--exclude=python", "--exclude=binutils"]


@pytest.mark.parametrize("stream", ["stderr", "stdout"])
def test_a_failed_external_find_quotes_the_last_2000_characters(
        monkeypatch, tmp_path, stream) -> None:
    """The end of Spack's output says why; the start of a long traceback does not."""
    root = tmp_path / "spack"
    tail = "".join(f"{i:04d}" for i in range(625))  # 2500 characters, none repeated
    redirect = " >&2" if stream == "stderr" else ""
    _stand_in_spack(root, f"printf '%s' '{tail}'{redirect}\nexit 1\n")
    monkeypatch.setenv("TORCHMPI_SPACK_ROOT", str(root))
    detect.build_tools.cache_clear()
    try:
        with pytest.raises(UserError) as info:
            detect.build_tools()
    finally:
        detect.build_tools.cache_clear()
    assert str(info.value) == "externals: auto: `spack external find` failed:\n" + tail[-2000:]


def _host_with_everything(monkeypatch, tmp_path) -> Path:
    """A PATH of stand-in tools: a GPU, nvcc, Open MPI's mpirun and gcc/g++/gfortran."""
    bindir = tmp_path / "host" / "bin"
    bindir.parent.mkdir()
    _fake_tool(bindir, "nvidia-smi", 'echo "NVIDIA A100-SXM4-40GB, 8.0"\n')
    _fake_tool(bindir, "nvcc", 'echo "Cuda compilation tools, release 12.4, V12.4.131"\n')
    _fake_tool(bindir, "mpirun", 'echo "mpirun (Open MPI) 4.1.6"\n')
    for exe in ("gcc", "g++", "gfortran"):
        _fake_tool(bindir, exe, 'echo "13.2.0"\n')
    monkeypatch.setenv("PATH", str(bindir))
    monkeypatch.setenv("CRAYPE_VERSION", "2.7.30")
    return bindir


def test_detect_command_prints_each_fact(monkeypatch, tmp_path, capsys,
                                         found_externals) -> None:
    bindir = _host_with_everything(monkeypatch, tmp_path)
    assert main(["detect", "--externals"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert rows[1:] == [
        "GPUs               NVIDIA A100-SXM4-40GB (sm_80)",
        "cuda_arch          80",
        f"CUDA toolkit       12.4.131 at {bindir.parent}",
        "Cray PE            2.7.30",
        f"MPI on PATH        {bindir}/mpirun: mpirun (Open MPI) 4.1.6",
        f"compiler           gcc@13.2.0 at {bindir.parent}",
        "externals          2 found by `spack external find` (excluded: python, binutils)",
        "                   cmake@3.28.3 at /usr",
        "                   gcc@13.2.0 at /usr",
    ]
    assert rows[0].startswith("target (archspec)  ")


def test_detect_json_is_indented_and_sorted(monkeypatch, tmp_path, capsys) -> None:
    _host_with_everything(monkeypatch, tmp_path)
    assert main(["detect", "--json"]) == 0
    out = capsys.readouterr().out
    facts = json.loads(out)
    assert out == json.dumps(facts, indent=2, sort_keys=True) + "\n"
    assert out.startswith('{\n  "cray_pe": "2.7.30",\n')


def test_nccl_pin_renders_as_requirements(tmp_path: Path) -> None:
    files = renderer.render(sitemod.load("derecho"), tmp_path)
    pkgs = yaml.safe_load(files["packages.yaml"])["packages"]
    assert pkgs["nccl"]["require"] == ["@2.21.5-1"]
    assert pkgs["aws-ofi-nccl"]["require"] == ["@1.6.0"]


def test_nccl_plugin_pin_needs_slingshot(tmp_path, capsys, derecho_text) -> None:
    def edit(d):
        d["fabric"] = "tcp"
        d.pop("libfabric")
    err = _bad(tmp_path, capsys, derecho_text, edit)
    assert "nccl.plugin: the aws-ofi-nccl plugin is only built for fabric: slingshot" in err


# --- one answer to "which keys may be auto" ---------------------------------------


def test_auto_keys_have_one_home() -> None:
    """autokeys.AUTO_KEYS is the list (site re-exports it); detection fills exactly
    those keys, in that order."""
    from torchmpi import autokeys

    assert sitemod.AUTO_KEYS is autokeys.AUTO_KEYS and sitemod.auto_keys is autokeys.auto_keys
    assert tuple(detect.FILLERS) == autokeys.AUTO_KEYS == sitemod.Site.auto_keys
    local = yaml.safe_load((paths.sites_dir() / "local.yaml").read_text())
    assert sitemod.auto_keys(local) == list(sitemod.AUTO_KEYS)
    assert sitemod.auto_keys({"target": "zen3", "mpi": {"kind": "auto"}}) == ["mpi.kind"]


def test_is_local(tmp_path) -> None:
    assert load_site("local", tmp_path).is_local
    assert not sitemod.load("derecho").is_local


def test_schema_pattern_dollar_means_end_of_input() -> None:
    """JSON schema's `$` is ECMA-262's (end of input); Python's also matches before a
    final newline, which let "derecho\\n" through."""
    validator = schema.Validator({"type": "string", "pattern": "^[a-z]+$"})
    assert validator.is_valid("derecho")
    assert not validator.is_valid("derecho\n")
    assert schema.ecma_anchor(r"^a\$") == r"^a\$"  # an escaped dollar is a character


def test_cross_family(tmp_path) -> None:
    """alps-gh200 (neoverse_v2, aarch64) is cross-family from an x86_64 host, derecho not."""
    import archspec.cpu

    host = archspec.cpu.host().family.name
    assert sitemod.load("alps-gh200").cross_family == (host != "aarch64")
    assert sitemod.load("derecho").cross_family == (host != "x86_64")
    assert not load_site("local", tmp_path).cross_family
