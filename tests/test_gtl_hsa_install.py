"""GTL for HSA written by the install step of an AMD site's own DAG, then loaded on a node.

tests/test_gtl_hsa_package.py reads the conditions from the package classes and
tests/test_gtl_hsa.py loads a preload rendered by hand; this file joins them: the
shipped Frontier environment's concretized ``py-torch`` and ``py-mpi4py`` (the run's
shared solve, :mod:`support.solves`: no solve of its own) run their own post-install
step (``load_gtl_at_import``) with the spec's patches applied in the stage as Spack
applies them, on the Cray EX stand-in's ``amd-gpu`` node.  What the site cannot give
here is pointed at the stand-in, and only that: the ``cray-mpich`` external (a
module on Frontier, no prefix in the site file) at the stand-in's Cray MPICH prefix
whose ``gtl/lib`` has GTL for HSA in 8.1.31's form (``libamdhip64.so.6`` NEEDED,
the newest form on record: tests/fixtures/cray_ex/manifest.yaml), the ROCm externals
(``/opt/rocm-7.1.1`` on Frontier) at the node's ROCm, and the C++ compiler
(Frontier's ``/usr/bin/g++-14``) at this host's ``g++``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest
from support import cray_ex, gtl_preload
from support.solves import SiteSolves

pytestmark = [pytest.mark.spack, pytest.mark.concretize]

#: The stand-in's Cray MPICH with GTL for HSA: builtin cray-mpich's ``gtl_lib`` looks
#: in ``<prefix>/../../../gtl/lib`` (its package.py), here 8.1.31/gtl/lib.
MPICH_PREFIX = "/opt/cray/pe/mpich/8.1.31/ofi/gnu/9.1"
#: The node's ROCm (manifest: OLCF's ``module load rocm`` path).
ROCM = "/opt/rocm-6.2.0"

#: Run in ``spack python`` inside the copied environment: argv is the stand-in
#: cray-mpich prefix, the ROCm prefix, the C++ compiler, the package and its module.
INSTALL_STEP = """\
import os, shutil, sys
import spack.environment as ev
import spack.patch
from spack.error import InstallError
mpich, rocm, cxx, name, package = sys.argv[1:6]
env = ev.active_environment()
spec = next(s for s in env.all_specs() if s.name == name)
for node in spec.traverse():
    if node.name == "cray-mpich":
        node.set_prefix(mpich)
    elif node.name in ("hsa-rocr-dev", "hip"):
        node.set_prefix(rocm)
    elif node.external and "cxx" in node.extra_attributes.get("compilers", {}):
        node.extra_attributes["compilers"]["cxx"] = cxx
print("VARIANTS", spec.format("{variants}"))
site = os.path.join(spec.prefix, "lib", "python3", "site-packages", package)
os.makedirs(site, exist_ok=True)
with open(os.path.join(site, "__init__.py"), "w") as f:
    f.write('\"\"\"stand-in\"\"\"\\nVERSION = 1\\n')
source = spec.package.stage.source_path
shutil.rmtree(source, ignore_errors=True)
os.makedirs(source)
try:
    spec.package.load_gtl_at_import()
except InstallError as error:
    print("UNPATCHED", error)
for patch in spec.patches:  # torchmpi's (builtin's, some by URL, target the real source)
    if "/torchmpi/packages/" in (patch.path or ""):
        spack.patch.apply_patch(source, patch.path, patch.level, patch.working_dir)
spec.package.load_gtl_at_import()
spec.package.stage.destroy()
print("SITE", site)
"""


@pytest.fixture(scope="module")
def node(tmp_path_factory) -> cray_ex.Node:
    """The ``amd-gpu`` node with a libtorch stand-in that NEEDs its libmpi, and the
    Cray MPICH prefix Spack's external points at (``mpi.h``, ``lib/libmpi.so``)."""
    built = cray_ex.build(tmp_path_factory.mktemp("amd-gpu"), "amd-gpu")
    prefix = built.at(MPICH_PREFIX)
    (prefix / "include").mkdir(parents=True)
    (prefix / "include" / "mpi.h").write_text('#define MPICH_VERSION "3.4a2"\n')
    lib = built.root / gtl_preload.TORCH_DIR
    lib.mkdir(parents=True)
    gtl_preload.libtorch(built, lib, "libtorch.so")
    return built


@pytest.fixture(scope="module")
def frontier(spack, tmp_path_factory) -> tuple[Path, Path]:
    """A copy of the run's Frontier solve (the shared one is left as it is) and the
    scratch install tree its install step writes to: never the site's."""
    solves = SiteSolves(spack, tmp_path_factory)
    env = solves.copy("frontier", f"frontier-gtl-hsa-{tmp_path_factory.getbasetemp().name}")
    return env, solves.store("frontier-gtl-hsa")


def _install_step(spack, frontier, node: cray_ex.Node, name: str, package: str) -> dict:
    env, store = frontier
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(INSTALL_STEP)
    try:
        proc = spack.run("-c", f"config:install_tree:root:{store}", "-e", str(env), "python",
                         script.name, str(node.at(MPICH_PREFIX)), str(node.at(ROCM)),
                         shutil.which("g++") or "g++", name, package)
    finally:
        Path(script.name).unlink()
    out = {}
    for line in proc.stdout.splitlines():
        key, _, value = line.partition(" ")
        if key in ("VARIANTS", "UNPATCHED", "SITE"):
            out[key] = value
    return out


@pytest.mark.parametrize("name,package", [("py-torch", "torch"), ("py-mpi4py", "mpi4py")])
def test_frontier_install_writes_the_hsa_preload_that_loads_on_its_node(
        spack, frontier, node: cray_ex.Node, tmp_path: Path, name: str, package: str) -> None:
    """Frontier's py-torch (+rocm +cuda_aware_mpi) and py-mpi4py (+cuda_aware_mpi) on
    cray-mpich +rocm: without the staged patch the install stops naming it; with it the
    package imports ``_torchmpi_gtl`` first, which names the DAG's GTL for HSA and
    records the HSA and HIP runtimes of the DAG's ROCm, in that order.  That installed
    preload, over the node's libtorch, imports and lets MPI_Init find GTL with
    ``MPICH_GPU_SUPPORT_ENABLED=1``; the same package without it does not."""
    out = _install_step(spack, frontier, node, name, package)
    assert "cuda_aware_mpi" in out["VARIANTS"] and "~cuda_aware_mpi" not in out["VARIANTS"]
    assert "torchmpi-gtl-preload.patch was not applied" in out["UNPATCHED"], out
    site = Path(out["SITE"])
    lines = (site / "__init__.py").read_text().splitlines()
    assert lines[1].startswith(f"from {package} import _torchmpi_gtl"), lines
    preload = (site / "_torchmpi_gtl.py").read_text()
    gtl = node.at("/opt/cray/pe/mpich/8.1.31/gtl/lib/libmpi_gtl_hsa.so")
    assert f"GTL = {str(gtl)!r}" in preload, preload[-600:]
    assert "\nVENDOR = 'hsa'\n" in preload
    needs = next(line for line in preload.splitlines() if line.startswith("NEEDS: tuple = "))
    recorded = eval(needs.partition(" = ")[2])  # a tuple literal render() wrote
    assert [Path(n).name for n in recorded] == [
        "libstdc++.so.6", "libhsa-runtime64.so.1", "libamdhip64.so.6"], recorded
    assert recorded[1:] == (str(node.path("libhsa-runtime64")), str(node.path("libamdhip64")))

    # The installed preload on the node: the written package over the node's libtorch.
    torch = gtl_preload.torch_package(tmp_path / "installed", gtl_preload.plain_libtorch(node),
                                      None)
    shutil.copy2(site / "_torchmpi_gtl.py", torch / "torch" / "_torchmpi_gtl.py")
    init = torch / "torch" / "__init__.py"
    text = init.read_text().splitlines(keepends=True)  # docstring, __future__, then ours
    text.insert(2, lines[1].replace(f"from {package} ", "from torch ", 1) + "\n")
    init.write_text("".join(text))
    loaded = gtl_preload.run(torch, node, "1")
    assert loaded.returncode == 0 and "imported" in loaded.stdout, loaded.stderr
    plain = gtl_preload.run(gtl_preload.torch_package(tmp_path / "plain",
                                                      gtl_preload.plain_libtorch(node), None),
                            node, "1")
    assert plain.returncode == 1 and "GTL library is not linked" in plain.stderr, plain.stderr



#: Run in ``spack python`` inside the copied Frontier environment: argv is the scratch
#: prefix the DAG's aws-ofi-nccl is pointed at.  The install phase's run_after callbacks
#: are taken as Spack's builder selects them (their ``when`` against the spec), and only
#: torchmpi's is run; its registered ``when``, as the builder tests it, against other
#: variants shows where it is not selected.
PLUGIN_STEP = """\
import sys
import spack.builder
import spack.environment as ev
import spack.phase_callbacks
import spack.spec

OURS = "link_rccl_default_name"
env = ev.active_environment()
spec = next(s for s in env.all_specs() if s.name == "aws-ofi-nccl")
print("VARIANTS", spec.format("{variants}"))
spec.set_prefix(sys.argv[1])
builder = spack.builder.create(spec.package)
phase = next(p for p in builder if p.name == "install")
callbacks = [cb for cb in phase.run_after if cb.__name__ == OURS]
print("SELECTED", len(callbacks))
for callback in callbacks:
    callback(builder)
registered = getattr(builder, spack.phase_callbacks._RUN_AFTER.attribute_name)
when = [cond for (name, cond), fn in registered if fn.__name__ == OURS and name == "install"]
for variants in ("+cuda ~rocm +cxi", "~cuda +rocm ~cxi"):
    other = spack.spec.Spec(f"aws-ofi-nccl {variants}")
    print("OTHER", variants.replace(" ", ""), sum(other.satisfies(c) for c in when), len(when))
"""


def test_frontier_plugin_install_gives_rccl_its_nccl_2_27_default_name(
        spack, frontier, tmp_path: Path) -> None:
    """Frontier's aws-ofi-nccl (+rocm +cxi) installs only librccl-net.so (and -ofi); RCCL
    2.27.7 on its rocm/7.1.1 opens libnccl-net.so when NCCL_NET_PLUGIN is unset.  The
    install step links the one to the other (OLCF's build does the same), so the doctor's
    loader, dlopen()ing that name as RCCL does, maps the plugin; before the step it
    cannot.  A CUDA build, and a ROCm build not asked for Slingshot, get no link."""
    from torchmpi.doctor import nccl
    from torchmpi.doctor.core import run_command

    prefix = tmp_path / "aws-ofi-nccl"
    lib = prefix / "lib"
    lib.mkdir(parents=True)
    src = tmp_path / "plugin.c"
    src.write_text("int ncclNetPlugin_v9 = 9;\n")
    subprocess.run(["gcc", "-shared", "-fPIC", "-o", str(lib / "librccl-net.so"), str(src)],
                   check=True)
    env = {**os.environ, "LD_LIBRARY_PATH": str(lib)}
    before = nccl.load_in_child("libnccl-net.so", env, run_command)
    assert not before.paths and "libnccl-net.so" in before.error, before

    envdir, store = frontier
    with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as script:
        script.write(PLUGIN_STEP)
    try:
        proc = spack.run("-c", f"config:install_tree:root:{store}", "-e", str(envdir),
                         "python", script.name, str(prefix))
    finally:
        Path(script.name).unlink()
    out = dict(line.partition(" ")[::2] for line in proc.stdout.splitlines()
               if line.startswith(("VARIANTS ", "SELECTED ", "OTHER ")))
    others = [line for line in proc.stdout.splitlines() if line.startswith("OTHER ")]
    assert "+rocm" in out["VARIANTS"] and "+cxi" in out["VARIANTS"], out
    assert out["SELECTED"] == "1", proc.stdout
    assert others == ["OTHER +cuda~rocm+cxi 0 1", "OTHER ~cuda+rocm~cxi 0 1"], proc.stdout
    assert os.readlink(lib / "libnccl-net.so") == "librccl-net.so"
    after = nccl.load_in_child("libnccl-net.so", env, run_command)
    assert after.paths == [str(lib / "librccl-net.so")] and not after.error, after
