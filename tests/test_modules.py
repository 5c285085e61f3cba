"""Modules and runtime variables, with a real (fake-installed) Spack tree and real Lmod.

For ``local`` and ``derecho`` the rendered environment is concretized once,
fake-installed into a scratch store and turned into an Lmod tree; then a real
``bash`` with Lmod loads the MPI module and ``py-torch-mpi`` exactly as a user
would, and ``spack env activate`` is evaluated the same way.  What a job sees
must be the same on both paths (docs/admins.md, "Runtime variables").
Derecho is also deployed with two torch releases (site key ``torch``) beside
the first: two py-torch-mpi modules, each loading its own torch, swapped.
"""

from __future__ import annotations

import getpass
import json
import os
import shlex
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from support.solves import SiteSolves
from torchmpi import output, paths, runtime
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.lock import root_name

pytestmark = pytest.mark.spack

LMOD_INIT = Path(os.environ.get("TORCHMPI_LMOD_INIT", "/usr/share/lmod/lmod/init/bash"))
#: The sites deployed by ``make test``: the embedded local site, and a centre MPI
#: module of each writer: NCAR's Cray MPICH (Derecho), NCSA's Spack-built Open MPI
#: (Delta), JSC's EasyBuild CUDA-aware Open MPI under its own module name (JUPITER:
#: ``OpenMPI/5.0.5``, aarch64, a tree fake-installed for a target this host is not).
#: and both AMD sites: OLCF Frontier (ROCm modules, node-count values) and LUMI-G
#: (its whole ROCm as externals under the rocm module).  A deploy is about two
#: CPU-minutes; ``TORCHMPI_EXTRA_MODULE_SITES`` adds other sites by name (not run
#: by the suite).
SITES = ("local", "derecho", "delta", "jupiter", "frontier", "lumi",
         *os.environ.get("TORCHMPI_EXTRA_MODULE_SITES", "").split())
#: Sites whose MPI is the centre's own module (``mpi.modules``), read from the files
#: as written (no load: collection must not detect the local site's compilers).
CENTRE_SITES = tuple(
    n for n in SITES
    if (yaml.safe_load((paths.root() / "sites" / f"{n}.yaml").read_text())["mpi"]
        .get("modules")))
#: Variables the packages' own run environments set (aws-ofi-nccl, nccl-ss11, py-torch-mpi).
PACKAGE_VARS = ("NCCL_NET", "NCCL_CROSS_NIC", "NCCL_NET_GDR_LEVEL", "FI_CXI_DISABLE_HOST_REGISTER",
                "FI_MR_CACHE_MONITOR", "FI_CXI_DEFAULT_CQ_SIZE", "MPICH_GPU_SUPPORT_ENABLED")


@dataclass
class Deployed:
    """One site's fake-installed environment and its module tree."""

    site: sitemod.Site
    env_dir: Path
    store: Path
    modules_root: Path
    seconds: dict[str, float] = field(default_factory=dict)
    #: Stand-in for the centre's own module tree (site ``mpi.modules``), or None.
    centre: Path | None = None

    @property
    def overrides(self) -> list[str]:
        """Scratch store and module root instead of the site's (``spack -c``)."""
        return ["-c", f"config:install_tree:root:{self.store}",
                "-c", f"modules:default:roots:lmod:{self.modules_root}"]

    def core(self) -> Path:
        """The Lmod Core directory (``<root>/<arch>/Core``)."""
        found = sorted(self.modules_root.glob("*/Core"))
        assert len(found) == 1, f"expected one Core layer under {self.modules_root}: {found}"
        return found[0]


def _fix_fake_prefixes(spack, dep: Deployed) -> None:
    """Make fake prefixes good enough for module generation (see docs/admins.md).

    Spack asks python-venv's ``python3`` for its site-packages layout and puts
    an extension on PYTHONPATH only if that directory exists; intel-oneapi-mkl's
    module sources ``mkl/X.Y/env/vars.sh``.  Fake installs have none of these.
    """
    code = (
        "import sys\nfrom spack.environment import Environment\n"
        "for s in Environment(sys.argv[1]).all_specs():\n"
        "    if not s.external:\n"
        "        print(s.name, s.prefix, s.version.up_to(2))\n"
    )
    out = spack.run(*dep.overrides, "python", _script(dep.env_dir.parent, code),
                    str(dep.env_dir)).stdout
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for line in out.splitlines():
        name, prefix, version = line.split()
        if name == "python-venv":
            # Keep Spack's metadata (.spack/spec.json): a build cache needs it.
            meta = Path(prefix) / ".spack"
            keep = Path(prefix).parent / f".{Path(prefix).name}.spack"
            shutil.move(str(meta), str(keep))
            shutil.rmtree(prefix, ignore_errors=True)
            subprocess.run([sys.executable, "-m", "venv", "--without-pip", prefix], check=True)
            shutil.move(str(keep), str(meta))
        elif name == "py-torchmpi":
            # One source copy per site: the two sites deploy in parallel threads.
            _install_tool(Path(prefix), dep.env_dir.parent / f"tool-source-{dep.site.name}")
        elif name.startswith("py-"):
            (Path(prefix) / "lib" / pyver / "site-packages").mkdir(parents=True, exist_ok=True)
        elif name == "intel-oneapi-mkl":
            (Path(prefix) / "mkl" / version / "env").mkdir(parents=True, exist_ok=True)
            (Path(prefix) / "mkl" / version / "env" / "vars.sh").write_text("")


def _install_tool(prefix: Path, source: Path) -> None:
    """Install the torchmpi tool for real into its fake prefix, as Spack's
    PythonPackage does (``pip install --no-deps --no-build-isolation
    --prefix``), from a copy of the committed and working files (the build
    must not write into the checkout), so the installed tool can be run."""
    if not source.exists():
        files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], check=True,
                               cwd=paths.root(), capture_output=True, text=True).stdout
        for rel in files.splitlines():
            src = paths.root() / rel
            if src.is_symlink() or src.is_file():
                (source / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(src, source / rel, follow_symlinks=False)
    # --ignore-installed: without it pip uninstalls the venv's own (editable)
    # torchmpi before installing into the other prefix.
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--ignore-installed", "--no-index", "--no-build-isolation",
                    "--no-warn-script-location", f"--prefix={prefix}", str(source)],
                   check=True, capture_output=True)


def _script(where: Path, code: str) -> str:
    path = where / "spack-script.py"
    path.write_text(code)
    return str(path)


#: Another version of the centre's MPI module beside the site's (a user may have
#: loaded it), by module name.
OLDER_CENTRE_MPI = {"cray-mpich": "8.1.25", "openmpi": "4.1.5", "OpenMPI": "4.1.6"}


def _centre_mpi_variable(module: str, prefix: str) -> tuple[str, str]:
    """The variable the centre's own MPI module sets, by who writes that module.

    Cray PE's ``cray-mpich`` modulefile sets ``CRAY_MPICH_DIR`` (NCAR's login
    default); an EasyBuild module (JSC's ``OpenMPI``) sets ``EBROOT<NAME>`` to
    its prefix (EasyBuild's module generator, ``EBROOT`` + the upper-cased name);
    a Spack-built ``openmpi`` module (NCSA's) carries builtin openmpi's run
    environment, ``MPICC=<prefix>/bin/mpicc`` (``setup_run_environment``).
    """
    if module == "cray-mpich":
        return "CRAY_MPICH_DIR", prefix
    if module == "openmpi":
        return "MPICC", f"{prefix}/bin/mpicc"
    return f"EBROOT{module.upper()}", prefix


def _centre_mpi_prefix(site: sitemod.Site) -> str:
    """The prefix the centre's MPI module points at: the site file's, or for a
    module-only external (OLCF's ``cray-mpich/9.1.0``, no prefix stated) a
    marker naming the module, so the value still says which file was loaded."""
    mpi = site.data["mpi"]
    return mpi.get("prefix") or f"<prefix of {mpi['modules'][0]}>"


def _centre_tree(root: Path, site: sitemod.Site) -> Path | None:
    """A stand-in for the centre's own module tree, for a site whose MPI is a
    centre module (``mpi.modules``, e.g. NCAR's ``cray-mpich/8.1.27``, its
    login default): that module, the default of its name, sets the variable
    the centre's module sets (:func:`_centre_mpi_variable`); an older version
    sits beside it."""
    modules = site.data["mpi"].get("modules") or []
    if not modules:
        return None
    prefix = _centre_mpi_prefix(site)
    for module in modules:
        name, _, version = module.partition("/")
        for ver in (version, OLDER_CENTRE_MPI[name]):
            var, value = _centre_mpi_variable(name, prefix if ver == version else ver)
            path = root / name / f"{ver}.lua"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f'whatis("stand-in for the centre\'s {name}/{ver}")\n'
                            f'setenv("{var}", "{value}")\n')
        (root / name / "default").symlink_to(f"{version}.lua")
    stubs = _centre_gpu_modules(site)
    # The other externals' centre modules, empty as the accelerator target module is:
    # LUMI's libfabric is its default `libfabric` module (no prefix stated), which
    # py-torch-mpi's module loads (Lumi-supercomputer/LUMI-SoftwareStack@5c375a6
    # scripts/lumitools/make_CPE.py:133 links Cray's libfabric modules).
    others = [site.data.get("libfabric") or {}]
    if isinstance(site.data.get("externals"), list):
        others += site.data["externals"]
    for ext in others:
        stubs.update((m, "") for m in ext.get("modules") or [] if m not in stubs)
    for module, body in stubs.items():
        path = root / f"{module}.lua"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f'whatis("stand-in for the centre\'s {module}")\n{body}')
    return root


def _centre_gpu_modules(site: sitemod.Site) -> dict[str, str]:
    """Stand-ins for the centre's CUDA and cuDNN modules (``gpu.cuda.modules``,
    ``gpu.cudnn.modules``), each with a variable NCAR's own module sets
    (NCAR/spack-derecho config/modules.yaml: cuda sets ``CRAY_CUDATOOLKIT_DIR``
    to its prefix, cudnn prepends ``<prefix>/lib`` to ``LD_LIBRARY_PATH``)."""
    out: dict[str, str] = {}
    for key in ("cuda", "cudnn"):
        ext = (site.gpu or {}).get(key) or {}
        prefix = ext.get("prefix", "")
        body = (f'setenv("CRAY_CUDATOOLKIT_DIR", "{prefix}")\n' if key == "cuda"
                else f'prepend_path("LD_LIBRARY_PATH", "{prefix}/lib")\n')
        out.update((m, body) for m in ext.get("modules") or [])
    # An AMD site's ROCm module sets ROCM_PATH: OLCF builds the plugin against
    # ${ROCM_PATH} after `module load rocm/<version>` (olcf/olcf-user-docs@f0571fe
    # software/analytics/pytorch_frontier.rst:642,657); Cray's accelerator target
    # module beside it is a stub here.
    rocm = (site.gpu or {}).get("rocm") or {}
    for i, module in enumerate(rocm.get("modules") or []):
        out[module] = f'setenv("ROCM_PATH", "{rocm["prefix"]}")\n' if i == 0 else ""
    return out


def _stand_in_for_absent_python(env_dir: Path, tree: Path) -> None:
    """Point an external python whose prefix is not on this host at a stand-in.

    Spack runs an external python's interpreter to write the module files of
    Python extensions; Derecho's (NCAR's python under /glade) does not exist
    here, and creating /glade is not allowed.  The stand-in prefix, in the test
    tree, holds a ``python3`` that is this interpreter.  Only the prefix
    changes; the spec (version, variants) stays the site's.
    """
    path = env_dir / "packages.yaml"
    data = yaml.safe_load(path.read_text())
    for key, entry in data["packages"].items():
        if key.rstrip(":") != "python":
            continue
        for ext in entry.get("externals", []):
            if ext.get("prefix") and not Path(ext["prefix"]).exists():
                prefix = tree / "stand-in-python"
                (prefix / "bin").mkdir(parents=True, exist_ok=True)
                for exe in ("python3", "python"):
                    link = prefix / "bin" / exe
                    if not link.exists():
                        link.symlink_to(sys.executable)
                ext["prefix"] = str(prefix)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


def _stand_in_in_lock(env_dir: Path, tree: Path) -> None:
    """The same stand-in for a lock solved with the site's own python prefix.

    The lock comes from the run's shared solve (:mod:`support.solves`), done
    on the committed packages.yaml; Spack keeps each node's hash as the lock
    records it, so only the external's prefix changes, as above.
    """
    _stand_in_for_absent_python(env_dir, tree)
    path = env_dir / "spack.lock"
    lock = json.loads(path.read_text())
    for node in lock["concrete_specs"].values():
        external = node.get("external") or {}
        if node["name"] == "python" and external.get("path") \
                and not Path(external["path"]).exists():
            external["path"] = str(tree / "stand-in-python")
    path.write_text(json.dumps(lock, indent=1))


def _deploy(spack, solves: SiteSolves, tree: Path, name: str) -> Deployed:
    site = sitemod.load(name)
    # The run's one solve of this site, copied beside it (the develop path,
    # hence every hash, stays the same): no second solve of the same site.
    env_dir = solves.copy(name, f"{name}--modules")
    _stand_in_in_lock(env_dir, tree)
    dep = Deployed(site, env_dir, tree / f"store-{name}", tree / f"modules-{name}",
                   centre=_centre_tree(tree / f"centre-{name}", site))
    env = ["-e", str(env_dir)]

    def timed(step: str, *args: str) -> None:
        start = time.monotonic()
        spack.run(*args, timeout=1800)
        dep.seconds[step] = round(time.monotonic() - start, 1)

    dep.seconds["concretize"] = solves.get(name).seconds  # done once per run
    timed("install --fake", *dep.overrides, "-c", "modules:default:enable::[]", *env,
          "install", "--fake")
    _fix_fake_prefixes(spack, dep)
    timed("lmod refresh", *dep.overrides, *env, "module", "lmod", "refresh", "-y",
          "--delete-tree")
    return dep


@pytest.fixture(scope="module")
def deployed(spack, tmp_path_factory) -> dict[str, Deployed]:
    if not LMOD_INIT.is_file():
        pytest.skip(f"Lmod not installed ({LMOD_INIT}; apt install lmod, or make setup)")
    tree = tmp_path_factory.mktemp("modules-checkout")
    # The committed relative repo path (../../spack_repo/torchmpi) must resolve.
    (tree / "spack_repo").symlink_to(paths.root() / "spack_repo")
    absent_before = [p for p in map(_site_install_top, SITES) if p and not p.exists()]
    solves = SiteSolves(spack, tmp_path_factory)
    solves.get_all(SITES)  # beside the other worker, which may solve the same sites
    with ThreadPoolExecutor(max_workers=2) as pool:
        done = dict(zip(SITES, pool.map(lambda n: _deploy(spack, solves, tree, n), SITES)))
    for name, dep in done.items():
        print(f"modules {name}: {dep.seconds}")
    done_paths["absent_before"] = absent_before
    return done


#: Shared between the fixture and the host-path test (module scope).
done_paths: dict[str, list[Path]] = {}


def _site_install_top(name: str) -> Path | None:
    """The top directory of a site's install tree (/glade for Derecho), as Spack
    would expand it here, or None when the site names none."""
    root = (sitemod.load(name).data.get("install") or {}).get("root")
    if not root:
        return None
    user = getpass.getuser()
    expanded = os.path.expandvars(root.replace("$user", user))
    parts = Path(expanded).parts
    return Path(*parts[:2]) if len(parts) > 1 and "$" not in expanded else None


def test_deploying_creates_no_site_path_on_this_host(deployed) -> None:
    """Every Spack call on a site environment uses the test store: a site's
    install tree (/glade/work/...) must not appear on the test machine."""
    created = [p for p in done_paths["absent_before"] if p.exists()]
    assert not created, f"created on this host: {created}"


def _bash(spack, script: str, check: bool = True) -> subprocess.CompletedProcess:
    """A login-like bash with Lmod initialised, as a user's shell on a login node."""
    env = dict(spack.env, PATH=f"{spack.root / 'bin'}{os.pathsep}{spack.env['PATH']}")
    for key in [k for k in env if k.startswith(("LMOD", "MODULE", "_ModuleTable", "__LMOD"))]:
        del env[key]
    env.pop("MODULEPATH", None)
    full = f"source {shlex.quote(str(LMOD_INIT))}\nset -e\n{script}"
    proc = subprocess.run(["bash", "--noprofile", "--norc", "-c", full], env=env, check=False,
                          capture_output=True, text=True, timeout=300)
    if check and proc.returncode != 0:
        pytest.fail(f"bash exited {proc.returncode}\n--- script ---\n{script}\n--- stdout ---\n"
                    f"{proc.stdout[-4000:]}\n--- stderr ---\n{proc.stderr[-4000:]}")
    return proc


def _env_after(spack, script: str) -> dict[str, str]:
    """The environment at the end of ``script`` (NUL-separated, so values may hold anything)."""
    out = _bash(spack, script + "\nenv -0\n").stdout
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def _mpi_module(dep: Deployed) -> str:
    """The module that opens the MPI layer: the site's MPI by name and version."""
    mpis = sorted(p for p in dep.core().glob("*/*.lua")
                  if p.parent.name in ("cray-mpich", "openmpi", "openmpi-cuda", "mpich"))
    assert len(mpis) == 1, f"expected one MPI module in Core: {mpis}"
    return f"{mpis[0].parent.name}/{mpis[0].stem}"


def _login(dep: Deployed) -> str:
    """A login shell: on a centre with its own MPI module, that module is
    loaded by default (NCAR's util/localinit.sh loads cray-mpich)."""
    if not dep.centre:
        return ""
    names = sorted({m.split("/")[0] for m in dep.site.data["mpi"]["modules"]})
    return f"module use {dep.centre}\nmodule load {' '.join(names)}\n"


def _user_steps(dep: Deployed) -> str:
    """docs/users.md's steps: ``module use`` the tree, then the MPI module
    where the tree has one (the centre's is already loaded), then py-torch-mpi."""
    mpi = "" if dep.centre else f"module load {_mpi_module(dep)}\n"
    return f"{_login(dep)}module use {dep.core()}\n{mpi}module load py-torch-mpi\n"


def _module_env(spack, dep: Deployed) -> dict[str, str]:
    return _env_after(spack, _user_steps(dep))


def _activate_env(spack, dep: Deployed) -> dict[str, str]:
    overrides = " ".join(shlex.quote(a) for a in dep.overrides)
    return _env_after(spack, f"eval \"$(spack {overrides} env activate --sh {dep.env_dir})\"\n")


def _module_values(site: sitemod.Site) -> tuple[dict[str, str], set[str]]:
    """The runtime values a module sets, and the names it leaves to the job.

    What depends on the job's node count (OLCF: ``NCCL_NET=OFI`` only across
    nodes) is runtime.sh's to set, per job: the module leaves it unset."""
    by_nodes = set(runtime.resolve(site.data).by_nodes)
    return ({k: v for k, v in runtime.environment(site.data).items() if k not in by_nodes},
            by_nodes)


@pytest.mark.parametrize("name", SITES)
def test_module_load_gives_the_site_runtime_and_python_path(spack, deployed, name) -> None:
    dep = deployed[name]
    got = _module_env(spack, dep)
    expected, by_nodes = _module_values(dep.site)
    assert {k: got.get(k) for k in expected} == expected
    # The plugin module does not set them either.
    assert {k: got.get(k) for k in by_nodes} == dict.fromkeys(by_nodes)
    if dep.site.data["fabric"] == "slingshot":
        assert "NCCL_NET" in by_nodes or got["NCCL_NET"]
        assert got["FI_CXI_DISABLE_HOST_REGISTER"] == "1"
        plugin = [d for d in got["LD_LIBRARY_PATH"].split(":") if "aws-ofi-nccl" in d]
        assert plugin and all(Path(d).is_dir() for d in plugin), got["LD_LIBRARY_PATH"]
        assert "NCCL_NET_PLUGIN" not in got  # breaks plugin loading (docs/troubleshooting.md)
        # The site wins: the autoloaded plugin module sets its own default first.
        plugin_mod = next(dep.core().parent.rglob("aws-ofi-nccl/*.lua")).read_text()
        if 'setenv("NCCL_NET", "OFI")' in plugin_mod and expected.get("NCCL_NET"):
            assert got["NCCL_NET"] == expected["NCCL_NET"] != "OFI"
    else:
        assert not any(k.startswith(("FI_CXI_", "NCCL_NET")) for k in got)
    pythonpath = got.get("PYTHONPATH", "").split(":")
    for pkg in ("py-torch-mpi", "py-torch"):
        dirs = [d for d in pythonpath if f"/{pkg}-" in d and "site-packages" in d]
        assert dirs, f"{pkg} site-packages not on PYTHONPATH: {pythonpath}"


@pytest.mark.parametrize("name", SITES)
def test_spack_env_activate_gives_the_same_values(spack, deployed, name) -> None:
    dep = deployed[name]
    module, activated = _module_env(spack, dep), _activate_env(spack, dep)
    names = set(runtime.environment(dep.site.data)) | set(PACKAGE_VARS)
    assert {k: activated.get(k) for k in names} == {k: module.get(k) for k in names}


def test_cray_gpu_switch_is_set_with_gtl(deployed) -> None:
    """Derecho: +cuda_aware_mpi loads GTL, so the switch is 1 on both paths."""
    assert runtime.environment(deployed["derecho"].site.data)["MPICH_GPU_SUPPORT_ENABLED"] == "1"


@pytest.mark.parametrize("name", SITES)
def test_module_avail_shows_only_what_a_user_picks(spack, deployed, name) -> None:
    dep = deployed[name]
    mpi = dep.site.data["mpi"]["modules"][0] if dep.centre else _mpi_module(dep)
    load = "" if dep.centre else f"module load {mpi}\n"
    script = f"{_login(dep)}module use {dep.core()}\n{load}module -t avail 2>&1\n"
    out = _bash(spack, script).stdout
    # Terse output: one "name/" line per module name, then its "name/version" lines.
    names = sorted(line.strip() for line in out.splitlines() if line.strip()
                   and not line.startswith("/") and ":" not in line and not line.endswith("/"))
    visible = {n.split("/")[0] for n in names}
    expected = {mpi.split("/")[0], "py-torch-mpi"} | {
        root_name(s) for s in dep.site.data.get("extra_specs", [])}
    if dep.centre:  # the stand-in centre tree is in MODULEPATH too
        expected |= {p.name.removesuffix(".lua") for p in dep.centre.iterdir()}
    assert visible == expected, out
    torch = [n for n in names if n.startswith("py-torch-mpi/")]
    assert len(torch) == 1 and torch[0].count("/") == 1, names
    if dep.site.gpu:  # readable: torch version and CUDA (or ROCm) version, no hash
        version = torch[0].split("/")[1]
        rocm = dep.site.gpu.get("rocm")
        kit, kit_version = (("rocm", rocm["version"]) if rocm
                            else ("cuda", dep.site.gpu["cuda"]["spec"].split("@")[1]))
        assert f"-{kit}" in version and version.endswith(kit_version), version


@pytest.mark.parametrize("name", CENTRE_SITES)
def test_the_centres_mpi_module_stays_loaded(spack, deployed, name) -> None:
    """NCAR loads its cray-mpich/8.1.27 by default and excludes cray-mpich from
    its own Spack modules: after docs/users.md's steps the centre's module is
    the one loaded (the tree has none of that name), and py-torch-mpi's module
    is loaded with the site's runtime variables."""
    dep = deployed[name]
    mpi = dep.site.data["mpi"]
    module, _, version = mpi["modules"][0].partition("/")
    own = [p for p in dep.modules_root.rglob("*.lua")
           if p.parent.name.lower() in (mpi["kind"], module.lower())]
    assert not own, f"the tree shadows the centre's {module}: {own}"
    got = _module_env(spack, dep)
    loaded = got.get("LOADEDMODULES", "").split(":")
    assert [m for m in loaded if m.startswith(module + "/")] == mpi["modules"], loaded
    files = got.get("_LMFILES_", "").split(":")
    assert str(dep.centre / module / f"{version}.lua") in files, files
    var, value = _centre_mpi_variable(module, _centre_mpi_prefix(dep.site))
    assert got.get(var) == value
    assert any(m.startswith("py-torch-mpi/") for m in loaded), loaded
    expected, _ = _module_values(dep.site)
    assert {k: got.get(k) for k in expected} == expected


@pytest.mark.parametrize("name", CENTRE_SITES)
def test_py_torch_mpi_loads_the_centres_mpi_itself(spack, deployed, name) -> None:
    """Nothing loaded: py-torch-mpi loads the centre's MPI module (the version it
    was built with); another version loaded: Lmod swaps it for that one; the
    centre's tree absent: the load fails and names the module it needs."""
    dep = deployed[name]
    want = dep.site.data["mpi"]["modules"][0]
    name = want.split("/")[0]
    base = f"module use {dep.centre}\nmodule use {dep.core()}\n"
    var, value = _centre_mpi_variable(name, _centre_mpi_prefix(dep.site))
    for before in ("", f"module load {name}/{OLDER_CENTRE_MPI[name]}\n"):
        got = _env_after(spack, base + before + "module load py-torch-mpi\n")
        loaded = got.get("LOADEDMODULES", "").split(":")
        assert [m for m in loaded if m.startswith(name + "/")] == [want], (before, loaded)
        assert got.get(var) == value
    proc = _bash(spack, f"module use {dep.core()}\nmodule load py-torch-mpi\n", check=False)
    assert proc.returncode != 0
    assert want in " ".join((proc.stdout + proc.stderr).split()), proc.stderr


@pytest.mark.parametrize("name", [n for n in SITES if n not in CENTRE_SITES])
def test_py_torch_mpi_needs_its_mpi_module_first(spack, deployed, name) -> None:
    dep = deployed[name]
    proc = _bash(spack, f"module use {dep.core()}\nmodule load py-torch-mpi\n", check=False)
    assert proc.returncode != 0
    msg = " ".join((proc.stdout + proc.stderr).split())  # Lmod wraps lines
    assert "exist but cannot be loaded as requested" in msg, msg
    assert 'module spider py-torch-mpi' in msg, msg


def test_installed_doctor_compares_the_job_with_its_site(spack, deployed, tmp_path) -> None:
    """docs/users.md's job: load the modules, then ``torchmpi doctor --site
    derecho`` with the installed tool (not this checkout) gives a verdict on
    ``site.env``, which needs the site file inside the install."""
    dep = deployed["derecho"]
    probe = ("import sys, torchmpi\n"
             "from torchmpi import cli\n"
             "print('TOOL', torchmpi.__file__)\n"
             "sys.argv = ['torchmpi', 'doctor', '--site', 'derecho', '--json']\n"
             "try:\n    cli.main()\nexcept SystemExit:\n    pass\n")
    (tmp_path / "probe.py").write_text(probe)
    # The venv's Python stands in for the site's (the fake install has no
    # working python-venv with the tool's dependencies); the module's
    # PYTHONPATH comes first, so the installed torchmpi is the one imported.
    script = (f"{_user_steps(dep)}cd {tmp_path}\n"
              f"env -u TORCHMPI_ROOT {sys.executable} probe.py\n")
    out = _bash(spack, script, check=False).stdout
    tool = next((line.split(" ", 1)[1] for line in out.splitlines()
                 if line.startswith("TOOL ")), "")
    assert tool.startswith(str(dep.store)), f"not the installed tool: {tool!r}\n{out[-3000:]}"
    report = json.loads(out[out.index("{"):] if "{" in out else "null") or {}
    checks = {c["name"]: c for c in report.get("checks", [])}
    assert checks.get("site.env", {}).get("status") in ("PASS", "FAIL"), out[-3000:]
    assert checks["site.env"]["status"] == "PASS", checks["site.env"]


def test_buildcache_push_and_list(spack, deployed, tmp_path) -> None:
    """The admin's binary mirror (docs/admins.md §5), on the fake derecho tree."""
    dep = deployed["derecho"]
    mirror = tmp_path / "mirror"
    pkgs = ("aws-ofi-nccl", "nccl-ss11", "py-torch-mpi")
    spack.run(*dep.overrides, "-e", str(dep.env_dir), "buildcache", "push", "--unsigned",
              "--update-index", "--only", "package", str(mirror), *pkgs)
    out = spack.run("-c", f"mirrors:torchmpi-cache:{mirror}", "buildcache", "list",
                    "--allarch").stdout
    listed = {line.split("@")[0] for line in out.splitlines() if "@" in line
              and not line.startswith("--")}
    assert set(pkgs) <= listed, out
    # --only package: no built dependency came along (externals are listed as
    # records, docs/admins.md §5).
    assert not listed & {"nccl", "py-torch", "py-torchvision"}, out


def test_buildcache_round_trip_into_a_fresh_store(spack, deployed, tmp_path) -> None:
    """Build once, install many (docs/admins.md §5): push the whole environment
    to a directory build cache, install it ``--cache-only`` into a fresh store
    with a fresh user scope, generate its modules and load py-torch-mpi there."""
    from support.spack import Spack

    dep = deployed["derecho"]
    mirror = tmp_path / "mirror"
    # --private: a site's own mirror may hold packages whose licence forbids
    # public binaries (intel-oneapi-mkl); Spack skips them without it.
    spack.run(*dep.overrides, "-e", str(dep.env_dir), "buildcache", "push", "--unsigned",
              "--private", "--update-index", str(mirror), timeout=1800)
    fresh_scope = tmp_path / "fresh-user-config"
    fresh_scope.mkdir()
    for name in ("repos.yaml", "concretizer.yaml"):
        shutil.copy(spack.config_dir / name, fresh_scope / name)
    fresh = Spack(spack.root, spack.builtin, fresh_scope, spack.cache_dir)
    other = Deployed(dep.site, dep.env_dir, tmp_path / "fresh-store", tmp_path / "fresh-modules",
                     centre=dep.centre)
    mirror_arg = ["-c", f"mirrors:site-cache:{mirror}"]
    fresh.run(*other.overrides, *mirror_arg, "-c", "modules:default:enable::[]",
              "-e", str(dep.env_dir), "install", "--cache-only", "--no-check-signature",
              timeout=1800)
    installed = fresh.run(*other.overrides, "-e", str(dep.env_dir), "find", "--format",
                          "{name}").stdout.split()
    assert "py-torch-mpi" in installed and "py-torch" in installed, installed
    built_here = list((tmp_path / "fresh-store").rglob("spack-build-out.txt"))
    assert not built_here, "installed from the cache, nothing built: " + str(built_here[:3])
    fresh.run(*other.overrides, "-e", str(dep.env_dir), "module", "lmod", "refresh", "-y",
              "--delete-tree")
    got = _module_env(fresh, other)
    expected, _ = _module_values(dep.site)
    assert {k: got.get(k) for k in expected} == expected
    assert any("/py-torch-mpi-" in d for d in got.get("PYTHONPATH", "").split(":")), got



# --- two torch releases side by side (site key ``torch: {versions: [...]}``) -----

#: ``spack python`` in the two-release environment: its lock, without a solve.
#: The solved release's roots are derecho's (the ``deployed`` solve); the
#: other release's py-torch-mpi is the same DAG with py-torch's version
#: changed through Spack's Spec API, hashes recomputed by Spack.  What is
#: under test is what comes after a solve -- Spack's module generation from
#: the rendered modules.yaml, and Lmod -- which reads concrete specs only.  A
#: real solve of Derecho with 2.11.0 and 2.10.0 took 8 min (167 s CPU) on the
#: loaded 2-core test machine, against well under a minute for this; its two
#: py-torch-mpi DAGs (82 nodes each) differed only in py-torch and gloo (py-torch
#: pins gloo per release), and no module name here depends on gloo's version.
#: Argv: the solved environment, the other release, where to write the other
#: release's py-torch-mpi (a spec file for ``spack install``).
_SECOND_RELEASE = """\
import sys
import spack.environment as ev
import spack.version as vn

solved, other, out = ev.Environment(sys.argv[1]), sys.argv[2], sys.argv[3]
roots = {s.name: s for s in solved.concrete_roots()}
derived = roots["py-torch-mpi"].copy()
derived["py-torch"].versions = vn.VersionList([vn.StandardVersion.from_string(other)])
for node in derived.traverse():  # py-torch and every node built on it
    if any(dep.name == "py-torch" for dep in node.traverse()):
        node.clear_caches(ignore=("_package_hash",))
env = ev.active_environment()
for user in env.user_specs:
    if user.name == "py-torch-mpi":
        concrete = next(c for c in (roots[user.name], derived) if c.satisfies(user))
    else:
        concrete = roots[user.name]
    env._add_concrete_spec(user, concrete)
env.write(regenerate=False)
with open(out, "w") as fh:
    fh.write(derived.to_json())
for root in (roots["py-torch-mpi"], derived):
    print(root["py-torch"].version, root["py-torch"].prefix, root.prefix)
"""


@dataclass
class TwoReleases:
    """Derecho with two torch releases, fake-installed, and its module tree."""

    dep: Deployed
    #: torch release -> (py-torch prefix, py-torch-mpi prefix); the solved one first.
    prefixes: dict[str, tuple[str, str]]


def _previous_release(solved: str) -> str:
    """The release a centre keeps beside ``solved``: the newest current one before it."""
    from torchmpi import torches

    current = [v for v, old in torches.builtin_releases().items() if not old]
    older = sorted((v for v in current if torches._vt(v) < torches._vt(solved)),
                   key=torches._vt)
    return older[-1] if older else torches.VERIFIED[0]


@pytest.fixture(scope="module")
def two_releases(spack, deployed, tmp_path_factory) -> TwoReleases:
    """The rendered two-release environment of Derecho, its lock (see
    _SECOND_RELEASE), ``spack install --fake`` of the second release into
    derecho's store and ``spack module lmod refresh`` of the whole environment."""
    from support.sites import edited_site

    base = deployed["derecho"]
    tree = base.env_dir.parent.parent  # the shared solves' checkout: the same develop path
    lock = json.loads((base.env_dir / "spack.lock").read_text())
    solved = next(s["version"] for s in lock["concrete_specs"].values()
                  if s["name"] == "py-torch")
    versions = [solved, _previous_release(solved)]
    site = edited_site(tmp_path_factory.mktemp("two-releases-site"), "derecho",
                       lambda d: d.update(torch={"versions": versions}))
    env_dir = tree / "environments" / "derecho-two-releases"
    output.write(env_dir, renderer.render(site, env_dir))
    _stand_in_for_absent_python(env_dir, base.store.parent)
    dep = Deployed(site, env_dir, base.store, base.store.parent / "modules-derecho-two-releases",
                   centre=base.centre)
    spec_file = env_dir / "second-release.json"

    def timed(step: str, *args: str) -> str:
        start = time.monotonic()
        out = spack.run(*args).stdout
        dep.seconds[step] = round(time.monotonic() - start, 1)
        return out

    out = timed("lock", *dep.overrides, "-e", str(env_dir), "python",
                _script(env_dir, _SECOND_RELEASE), str(base.env_dir), versions[1],
                str(spec_file))
    prefixes = {v: (t, m) for v, t, m in (line.split() for line in out.splitlines())}
    assert list(prefixes) == versions, out
    # Not `spack -e ... install`: it would reinstall the develop spec
    # (py-torchmpi, its sources newer than its record) and its dependents,
    # and with them derecho's tree that the other tests read.
    timed("install --fake", *dep.overrides, "-c", "modules:default:enable::[]", "install",
          "--fake", str(spec_file))
    pyver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    for torch, mpi in prefixes.values():  # as _fix_fake_prefixes does for py-* packages
        for prefix in (torch, mpi):
            (Path(prefix) / "lib" / pyver / "site-packages").mkdir(parents=True, exist_ok=True)
    timed("lmod refresh", *dep.overrides, "-e", str(env_dir), "module", "lmod", "refresh",
          "-y", "--delete-tree")
    print(f"modules derecho, two torch releases: {dep.seconds}")
    return TwoReleases(dep, prefixes)


def _torch_module(two: TwoReleases, version: str) -> str:
    """py-torch-mpi's module name for a torch release, as modules.yaml projects it."""
    cuda = two.dep.site.gpu["cuda"]["spec"].split("@")[1]
    return f"py-torch-mpi/{version}-cuda{cuda}"


def test_two_torch_releases_are_two_modules(spack, two_releases) -> None:
    """``module avail`` shows one py-torch-mpi module per release of the site
    file, named by its torch release; py-torchvision (built on the solved
    release) says which torch it goes with."""
    dep = two_releases.dep
    script = f"{_login(dep)}module use {dep.core()}\nmodule -t avail 2>&1\n"
    out = _bash(spack, script).stdout
    names = {line.strip() for line in out.splitlines() if line.strip()
             and not line.startswith("/") and ":" not in line and not line.endswith("/")}
    torch = sorted(n for n in names if n.startswith("py-torch-mpi/"))
    versions = list(two_releases.prefixes)
    assert torch == sorted(_torch_module(two_releases, v) for v in versions), out
    vision = [n for n in names if n.startswith("py-torchvision/")]
    assert len(vision) == 1 and vision[0].endswith(f"-torch{versions[0]}"), out


def _torch_dirs(got: dict[str, str], two: TwoReleases) -> dict[str, bool]:
    """For each release: whether its py-torch site-packages is on PYTHONPATH."""
    path = got.get("PYTHONPATH", "").split(":")
    return {v: any(d.startswith(torch + "/") for d in path)
            for v, (torch, _) in two.prefixes.items()}


@pytest.mark.parametrize("which", [0, 1])
def test_each_release_module_loads_its_own_torch(spack, two_releases, which) -> None:
    two = two_releases
    version = list(two.prefixes)[which]
    got = _env_after(spack, f"{_login(two.dep)}module use {two.dep.core()}\n"
                     f"module load {_torch_module(two, version)}\n")
    assert _torch_dirs(got, two) == {v: v == version for v in two.prefixes}, got["PYTHONPATH"]
    mpi = two.prefixes[version][1]
    assert any(d.startswith(mpi + "/") for d in got["PYTHONPATH"].split(":")), mpi
    loaded = got.get("LOADEDMODULES", "").split(":")
    assert _torch_module(two, version) in loaded, loaded
    expected = runtime.environment(two.dep.site.data)
    assert {k: got.get(k) for k in expected} == expected


def test_module_swap_changes_the_torch_release(spack, two_releases) -> None:
    """A user on the current release swaps to the previous one: afterwards
    only the previous release's torch is on PYTHONPATH, and the site's
    runtime variables are still set."""
    two = two_releases
    new, old = (_torch_module(two, v) for v in two.prefixes)
    got = _env_after(spack, f"{_login(two.dep)}module use {two.dep.core()}\n"
                     f"module load {new}\nmodule swap {new} {old}\n")
    assert _torch_dirs(got, two) == {v: i == 1 for i, v in enumerate(two.prefixes)}, got
    loaded = got.get("LOADEDMODULES", "").split(":")
    assert old in loaded and new not in loaded, loaded
    expected = runtime.environment(two.dep.site.data)
    assert {k: got.get(k) for k in expected} == expected


def _centre_module_names(site: sitemod.Site) -> set[str]:
    """Names of every centre module the site file declares for something Spack
    takes as an external: MPI, CUDA, cuDNN, libfabric, compilers, ``externals``."""
    d = site.data
    entries = [d["mpi"], d.get("libfabric") or {}, *d["compilers"],
               *[(site.gpu or {}).get(k) or {} for k in ("cuda", "cudnn")]]
    if isinstance(d.get("externals"), list):
        entries += d["externals"]
    return {m.split("/")[0] for e in entries for m in e.get("modules") or []}


def test_no_module_of_the_tree_shadows_a_centre_module(spack, deployed) -> None:
    """Derecho's file names centre modules for cray-mpich, CUDA and cuDNN (and
    its compiler): the tree, hidden modules included, has none of those names,
    or `module load cuda/12.2.1` would find this tree's file before NCAR's."""
    dep = deployed["derecho"]
    centre = _centre_module_names(dep.site)
    assert {"cray-mpich", "cuda", "cudnn"} <= centre, centre
    out = _bash(spack, f"module use {dep.core()}\nmodule --show_hidden -t avail 2>&1\n").stdout
    names = {line.strip().split("/")[0] for line in out.splitlines() if line.strip()
             and not line.startswith("/") and ":" not in line}
    assert "py-torch" in names, out  # hidden modules are listed
    assert not names & centre, f"the tree shadows the centre's {sorted(names & centre)}"
    files = {p.parent.name for p in dep.modules_root.rglob("*.lua")}
    assert not files & centre, sorted(files & centre)


def test_py_torch_mpi_loads_the_centres_cuda_and_cudnn(spack, deployed) -> None:
    """py-torch-mpi's module loads the centre's CUDA and cuDNN modules (the
    files of the stand-in centre tree, not modules of this tree), after a
    login as on Derecho (cray-mpich loaded) and from nothing loaded."""
    dep = deployed["derecho"]
    gpu = dep.site.gpu
    want = [m for k in ("cuda", "cudnn") for m in gpu[k]["modules"]]
    base = f"module use {dep.centre}\nmodule use {dep.core()}\nmodule load py-torch-mpi\n"
    for script in (_user_steps(dep), base):
        got = _env_after(spack, script)
        loaded = got.get("LOADEDMODULES", "").split(":")
        assert set(want) <= set(loaded), loaded
        files = got.get("_LMFILES_", "").split(":")
        for module in want:
            assert str(dep.centre / f"{module}.lua") in files, files
        assert got.get("CRAY_CUDATOOLKIT_DIR") == gpu["cuda"]["prefix"]
        assert f"{gpu['cudnn']['prefix']}/lib" in got.get("LD_LIBRARY_PATH", "").split(":")
        assert any(m.startswith("py-torch-mpi/") for m in loaded), loaded
