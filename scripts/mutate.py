#!/usr/bin/env python3
"""``make mutate``: plant one-line bugs, run the tests of the mutated module, report survivors.

Two kinds of mutants, each run against the tests of the module it mutates --
for a wrapper module, the files ``tests/support/layout.py`` derives from the
test files' names (``wrapper/torchmpi/x.py`` -> ``tests/test_x.py``, ...):

* hand-written (``MUTANTS`` below): *realistic* bugs a reviewer would miss -- a
  dropped provider, a truthy "0", bytes counted for characters -- each a claim;
  the package mutants among them are killed only by real-Spack tests (``--spack``);
* generated (``--generated N``): cosmic-ray's operators over every wrapper module,
  ``N`` sampled per module and cut at ``--budget`` seconds
  (``scripts/mutate_generated.py``): the bugs nobody listed.

Each hand-written mutant is run in a scratch copy of the checkout (the working
tree is never touched; ``PYTHONPATH`` points the ``torchmpi`` import at the
copy).  A mutant of the patcher (``cuda_aware_mpi.py``) also gets its patch file
and ``PATCHER_PATCH_SHA256`` rewritten by ``as_patch.py``, as a developer does
after an edit, so that it is not "killed" merely by the patch-file test: only a
test of the patcher's behaviour can kill it.

Usage: scripts/mutate.py [--spack] [--jobs N] [--only AREA] [--match TEXT]... [--list]
       scripts/mutate.py --generated N [--budget S] [--seed K] [--head] [--module TEXT]...
                         [--match TEXT]...
Exit status: 0 when every measured hand-written mutant is killed or listed in
SURVIVORS_OK; the generated run reports its scores and exits 0.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT / "scripts"))

from support import layout  # noqa: E402  (the tests' layout: tests/ is not a package)

PATCHER = "spack_repo/torchmpi/packages/py_torch/cuda_aware_mpi.py"
TORCH_PACKAGE = "spack_repo/torchmpi/packages/py_torch/package.py"
TORCH_MPI = "spack_repo/torchmpi/packages/py_torch_mpi/package.py"
PLUGIN = "spack_repo/torchmpi/packages/aws_ofi_nccl/package.py"
NCCL_SS11 = "spack_repo/torchmpi/packages/nccl_ss11/package.py"
OPENMPI_CUDA = "spack_repo/torchmpi/packages/openmpi_cuda/package.py"


@dataclass(frozen=True)
class Mutant:
    area: str
    file: str
    old: str  # must occur exactly once in the file
    new: str
    #: Package files only: their tests.  A wrapper module's are derived from the test
    #: files' names (tests/support/layout.py), never listed here.
    package_tests: tuple[str, ...] = ()
    spack: bool = False  # only a real-Spack test can kill it

    @property
    def name(self) -> str:
        return f"{self.file}: {self.old.strip()[:60]!r}"

    @property
    def tests(self) -> tuple[str, ...]:
        """The test files of the mutated module."""
        return self.package_tests or layout.tests_for(self.file, ROOT / "tests")


PATCH = ("tests/test_cuda_aware_patch.py",)
PKG = ("tests/test_package_methods.py", "tests/test_packages.py")

MUTANTS: tuple[Mutant, ...] = (
    # --- site: loader, file reader, auto keys ------------------------------------
    Mutant("site", "wrapper/torchmpi/sitefile.py",
           'len(raw[start:err.start].decode("utf-8", "replace"))', "len(raw[start:err.start])"),
    Mutant("site", "wrapper/torchmpi/checks/__init__.py",
           '    if data.get("name") == LOCAL:\n        return []\n',
           "    if True:\n        return []\n"),
    Mutant("site", "wrapper/torchmpi/checks/mpi.py",
           'if kind == "openmpi-cuda" and data.get("gpu") is None:',
           'if kind == "openmpi-cuda" and data.get("gpu") == "none":'),
    Mutant("site", "wrapper/torchmpi/checks/network.py",
           'if nccl.get("plugin") and data.get("fabric") != "slingshot":',
           'if nccl.get("plugin") and data.get("fabric") == "ib":'),
    Mutant("site", "wrapper/torchmpi/checks/mpi.py",
           "if switch is not None and stated is not None and str(stated) != switch:",
           "if switch == \"1\" and stated is not None and str(stated) != switch:"),
    Mutant("site", "wrapper/torchmpi/autokeys.py",
           'AUTO_KEYS = ("target", "compilers", "gpu", "mpi.kind", "externals")',
           'AUTO_KEYS = ("target", "compilers", "mpi.kind", "gpu", "externals")'),
    Mutant("site", "wrapper/torchmpi/detect.py",
           '        data.pop("gpu")  # no GPU found',
           '        data["gpu"] = None  # no GPU found'),
    # --- runtime variables ---------------------------------------------------------
    Mutant("runtime", "wrapper/torchmpi/runtime.py", 'if cray_gpu_switch(data) == "1":',
           "if cray_gpu_switch(data):"),
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           ' or not isinstance(data.get("gpu"), dict):', ":"),
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           'return "1" if mpi["cuda_aware"] else "0"', 'return "1"'),
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           "        out.set.setdefault(GPU_SWITCH, \"1\")", "        out.set[GPU_SWITCH] = \"1\""),
    # the site's value must win over the fabric default it restates
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           '    out.set.update((k, str(v)) for k, v in (site.get("env") or {}).items())',
           '    out.set.update((k, str(v)) for k, v in (site.get("env") or {}).items()'
           ' if k not in out.set)'),
    # a '$' in the middle of a value is as unfaithful as one at the start
    Mutant("runtime", "wrapper/torchmpi/checks/runtime.py", '            if "$" in str(value):',
           '            if str(value).startswith("$"):'),
    # runtime.sh: an unset PATH-like variable must not gain an empty entry (= ".")
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           """{shlex.quote(value)}"${{{name}:+:${name}}}"')""",
           """{shlex.quote(value)}":${name}"')"""),
    # runtime.sh: a value with a space ("AWS Libfabric") must stay one word
    Mutant("runtime", "wrapper/torchmpi/runtime.py",
           '        lines.append(f"export {_name(key)}={shlex.quote(value)}")',
           '        lines.append(f"export {_name(key)}={value}")'),
    # --- container, reframe, venv ---------------------------------------------------
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/plan.py",
           '    cuda_aware = site.torch_cuda_aware', '    cuda_aware = bool(site.gpu)'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/site.py",
           'out = [f"{spec} target={target}" for spec in (root, *self.data["extra_specs"])]',
           'out = [f"{spec} target={target}" for spec in (root,)]'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/plan.py",
           '    if fabric == "slingshot":\n        # Where nothing injects',
           '    if fabric == "slingshot" and rt in INJECTS_PLUGIN:\n'
           '        # Where nothing injects'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/descriptors.py",
           'if devices and site.data["fabric"] == "ib":',
           'if devices and site.data["fabric"] == "infiniband":'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/descriptors.py",
           '    if site.torch_cuda_aware:', "    if site.gpu:"),
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/descriptors.py",
           """lines = ['inject=()', 'if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then']""",
           """lines = ['inject=()', 'if [ "${TORCHMPI_CONTAINER_INJECT:-0}" != 0 ]; then']"""),
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/descriptors.py",
           '        env[key] = f"{value}:${{{key}:-}}"', "        env[key] = value"),
    Mutant("container/reframe/venv", "wrapper/torchmpi/container/descriptors.py",
           "                                                append_path=rt.append_path))",
           "                                                ))"),
    Mutant("container/reframe/venv", "wrapper/torchmpi/checks/container.py",
           '    if rt == "shifter" and added:', '    if rt == "shifter" and not added:'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/reframe.py",
           '        elif site.data["launcher"] == "pbs":',
           '        elif site.data["launcher"] == "pbspro":'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/reframe.py",
           '    return cmds + [f". {shlex.quote(str(outdir.absolute() / RUNTIME))}"]',
           '    return [f". {shlex.quote(str(outdir.absolute() / RUNTIME))}"] + cmds'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/data/reframe/torchmpi_checks.py",
           'sn.assert_found(r"^# correctness: OK$", self.stdout),',
           'sn.assert_found(r"^# correctness: ", self.stdout),'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/data/reframe/torchmpi_checks.py",
           r'return sn.extractsingle(r"^# Avg bus bandwidth\s*:\s*(\S+)", self.stdout, 1, float)',
           r'return sn.extractsingle(r"^# peak busbw (\S+)", self.stdout, 1, float)'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/venv.py",
           "        if not _VERSION.match(node.version):", "        if False:"),
    Mutant("container/reframe/venv", "wrapper/torchmpi/venv.py",
           'if name.lower() not in ("pip", "setuptools", "wheel")}',
           'if name.lower() not in ("setuptools", "wheel")}'),
    Mutant("container/reframe/venv", "wrapper/torchmpi/venv.py",
           '                 "export PIP_CONSTRAINT\\n")', "                 )"),
    # --- rendering -------------------------------------------------------------------
    Mutant("render", "wrapper/torchmpi/output.py",
           'fd, tmp = tempfile.mkstemp(prefix=f".{dest.name}.", dir=dest.parent)',
           "tmp = str(dest); fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)"),
    Mutant("render", "wrapper/torchmpi/output.py",
           "    return hashlib.sha256(body.encode()).hexdigest() != match.group(1)",
           "    return False"),
    Mutant("render", "wrapper/torchmpi/output.py", "    if refusal and not force:",
           "    if refusal and force:"),
    Mutant("render", "wrapper/torchmpi/site.py",
           '            root += f" +cuda cuda_arch={self.cuda_arch}" + variant',
           '            root += f" +cuda cuda_arch={self.cuda_arch}" + " +cuda_aware_mpi"'),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           """        pins["aws-ofi-nccl"] = {"require": [f"@{nccl['plugin']}"]}""",
           "        pass"),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           "        specs = [f\"{spec} target={d['target']}\" for spec in specs]",
           "        pass"),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           'spec += f" +cuda cuda_arch={site.cuda_arch}" if site.gpu else " ~cuda"',
           'spec += " ~cuda"'),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           'entry["buildable"] = bool(ext.get("buildable", entry["buildable"]))',
           'entry["buildable"] = buildable'),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           '"unify": "when_possible" if several else True', '"unify": True'),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           '            item["modules"] = list(ext["modules"])', "            pass"),
    Mutant("render", "wrapper/torchmpi/spackenv.py",
           'chosen = pairs.choose(nccl) if d["fabric"] == "slingshot" and not site.rocm else None',
           "chosen = pairs.choose(nccl)"),
    # --- allreduce statistics ------------------------------------------------------
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py", '/ (world if how == "avg" else 1)',
           "/ 1"),
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py",
           '"max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN',
           '"max": dist.ReduceOp.MIN, "min": dist.ReduceOp.MAX'),
    Mutant("allreduce", "wrapper/torchmpi/allreduce_report.py",
           "sum(r.busbw_gbs for r in results)",
           "sum(r.algbw_gbs for r in results)"),
    Mutant("allreduce", "wrapper/torchmpi/allreduce.py",
           "return algbw * 2 * (world_size - 1) / world_size",
           "return algbw * (world_size - 1) / world_size"),
    # --- modules, pairs, torch releases, site rules ---------------------------------
    # An unpinned or NCCL-only Slingshot site gets a pair vouched for Slingshot, the newest one.
    Mutant("modules/pairs/torches", "wrapper/torchmpi/pairs.py",
           'if plugin is not None or pair.fabric == "slingshot":',
           'if version is not None or pair.fabric == "slingshot":'),
    Mutant("modules/pairs/torches", "wrapper/torchmpi/pairs.py",
           "(_key(p.nccl), _key(p.plugin)), reverse=True))",
           "(_key(p.nccl), _key(p.plugin)), reverse=False))"),
    # No +cuda_aware_mpi for torch 2.7.0-2.9.0 (both ends), nor when a GPU site is silent.
    Mutant("modules/pairs/torches", "wrapper/torchmpi/checks/torch_versions.py",
           "gap[0] <= vt <= gap[1]", "gap[0] <= vt < gap[1]"),
    Mutant("modules/pairs/torches", "wrapper/torchmpi/cudaaware.py",
           'return _gpu(data) and bool(data["mpi"]["cuda_aware"])', 'return _gpu(data) and True'),
    # The ProcessGroupMPI note on an Open MPI site, where the patch never runs.
    Mutant("modules/pairs/torches", "wrapper/torchmpi/torches.py",
           '    return (cudaaware.torch_variant(data)\n'
           '            and (data.get("mpi") or {}).get("kind") not in _UNPATCHED_KINDS)',
           '    return cudaaware.torch_variant(data)'),
    # Module names: py-torch-mpi named by its torch release, centre modules loaded.
    Mutant("modules/pairs/torches", "wrapper/torchmpi/modules.py",
           '"py-torch-mpi+cuda": "{name}/{^py-torch.version}-cuda{^cuda.version}"',
           '"py-torch-mpi+cuda": "{name}/{version}-cuda{^cuda.version}"'),
    Mutant("modules/pairs/torches", "wrapper/torchmpi/modules.py",
           '_spec_head(ext["spec"]).split("@")[0] == "python")',
           '"python" in ext["spec"])'),
    Mutant("modules/pairs/torches", "wrapper/torchmpi/modules.py",
           """if mpi.get("version") else ""), mpi, True)""",
           """if mpi.get("version") else ""), mpi, False)"""),
    # Site rules: Cray GTL archs unless cuda_aware is false; a CUDA range's end is a prefix.
    Mutant("modules/pairs/torches", "wrapper/torchmpi/checks/gpu.py",
           'if (mpi.get("kind") == "cray-mpich" and mpi["cuda_aware"]',
           'if (mpi.get("kind") == "cray-mpich"'),
    Mutant("modules/pairs/torches", "wrapper/torchmpi/checks/gpu.py",
           "too_new = hi and have[:len(vtuple(hi))] > vtuple(hi)",
           "too_new = hi and have > vtuple(hi)"),
    # Only a Slingshot site (nccl-ss11) is pinned to a vouched pair.
    Mutant("modules/pairs/torches", "wrapper/torchmpi/spackenv.py",
           'chosen = pairs.choose(nccl) if d["fabric"] == "slingshot" and not site.rocm else None',
           "chosen = pairs.choose(nccl)"),
    # --- doctor ------------------------------------------------------------------------
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/mpi.py",
           "    return Check(name, FAIL if gpu_count else WARN,",
           "    return Check(name, WARN,"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/mpi.py",
           'for text in (torch_ldd, env.get("LD_PRELOAD", ""), *loaded)',
           'for text in (torch_ldd, *loaded)'),
    # --- dist, doctor GPU/NCCL/probe paths, allreduce's CUDA waits ----------------------
    # the stream wait chosen for the run's device and backend ignored (MPI reads CUDA
    # buffers before the kernel that filled them has run)
    Mutant("dist/doctor", "wrapper/torchmpi/allreduce.py",
           "        ready = stream_wait(device, str(dist.get_backend()))",
           "        ready = no_wait"),
    # rendezvous: the job's first host on every node, loopback only when every rank is here
    Mutant("dist/doctor", "wrapper/torchmpi/dist.py",
           "if addr is None and launch.world_size in (1, launch.local_world_size):",
           "if addr is None and launch.local_world_size in (1, launch.world_size):"),
    Mutant("dist/doctor", "wrapper/torchmpi/dist.py",
           'for name in ("SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST"):',
           'for name in ("SLURM_JOB_NODELIST", "SLURM_STEP_NODELIST"):'),
    Mutant("dist/doctor", "wrapper/torchmpi/dist.py",
           'first = ranges.split(",")[0].split("-")[0]', 'first = ranges.split("-")[0]'),
    Mutant("dist/doctor", "wrapper/torchmpi/dist.py",
           "single_host = len(set(hosts)) == 1", "single_host = len(set(hosts)) < len(hosts)"),
    # allreduce: CUDA synchronisation (the statistics are the allreduce area's)
    Mutant("dist/doctor", "wrapper/torchmpi/allreduce.py",
           'return torch.cuda.synchronize if device == "cuda" else no_wait', "return no_wait"),
    Mutant("dist/doctor", "wrapper/torchmpi/allreduce.py",
           "    finish = clock_wait(device)", "    finish = ready"),
    Mutant("dist/doctor", "wrapper/torchmpi/allreduce.py",
           "            body()\n        finish()\n", "            body()\n"),
    Mutant("dist/doctor", "wrapper/torchmpi/allreduce.py",
           'if device == "cuda" and backend == "mpi":',
           'if device == "cuda" and backend == "nccl":'),
    # the doctor's probes: the tensor on the device, the wait before the collective
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/probe.py",
           "t = torch.full((4,), 3.0, device=device)", "t = torch.full((4,), 3.0)"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/probe.py",
           "    torch.cuda.synchronize()  # ProcessGroupMPI does not wait",
           "    pass  # ProcessGroupMPI does not wait"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/probe.py",
           'return device or ("cuda" if info.gpu_count else "cpu")', 'return device or "cpu"'),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/probe.py",
           'env.get(GPU_SWITCH) == "0"', 'env.get(GPU_SWITCH) != "1"'),
    # GPU, NCCL plugin and network, site variables, container, origin
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/gpu.py",
           "    if gpu_site or driver.gpus:", "    if gpu_site:"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/gpu.py",
           "        status = FAIL if info.gpu_count else WARN", "        status = WARN"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/nccl.py",
           "if any(plugin.libraries.get(lib) for n in names for lib in candidates(n)):",
           "if plugin.libraries:"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/nccl.py",
           "        if version >= first:", "        if version > first:"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/nccl.py",
           'startswith((*OWN_PREFIXES, os.path.basename(name)))]', 'startswith("")]'),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/nccl.py",
           "        status = WARN if nodes == 1 else FAIL",
           "        status = FAIL if (nodes or 0) > 1 else WARN"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/site_env.py",
           'if nodes == 1 and "NCCL_NET" in expected and "NCCL_NET" not in actual:',
           'if nodes == 1 and "NCCL_NET" in expected:'),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/origin.py",
           "        prefix = root.rstrip(\"/\") + \"/\"",
           "        prefix = root.rstrip(\"/\")"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/container.py",
           "        if _under(path, point) and len(point) > len(best):",
           "        if _under(path, point):"),
    Mutant("dist/doctor", "wrapper/torchmpi/doctor/container.py",
           "virtual = any(_under(best, top) for top in _VIRTUAL)",
           "virtual = best.startswith(_VIRTUAL)"),
    # --- lock and off-site ---------------------------------------------------------
    Mutant("lock/offsite", "wrapper/torchmpi/lock.py", "            elif node.name != wanted:",
           "            elif False:"),
    Mutant("lock/offsite", "wrapper/torchmpi/offsite.py",
           '[str(executable), "-dumpfullversion", "-dumpversion"]',
           '[str(executable), "-dumpversion"]'),
    Mutant("lock/offsite", "wrapper/torchmpi/lock.py",
           'for n in self.nodes.values() for _, h, v in n.deps if "mpi" in v}',
           'for n in self.nodes.values() for _, h, v in n.deps if v}'),
    Mutant("lock/offsite", "wrapper/torchmpi/lock.py",
           'return head.rsplit(".", 1)[-1]', 'return head.rsplit(".", 1)[0]'),
    Mutant("lock/offsite", "wrapper/torchmpi/lock.py",
           "        return [n for n in self.nodes.values() if not n.external]",
           "        return list(self.nodes.values())"),
    Mutant("lock/offsite", "wrapper/torchmpi/lock.py",
           '            if isinstance(target, dict):\n'
           '                target = target.get("name")\n',
           ""),
    Mutant("lock/offsite", "wrapper/torchmpi/offsite.py",
           "return bool(evidence(data)) and not missing(data)", "return not missing(data)"),
    Mutant("lock/offsite", "wrapper/torchmpi/offsite.py",
           "if any(h in compilers and _LANGUAGES & set(v) for _, h, v in node.deps)",
           "if any(h in compilers for _, h, v in node.deps)"),
    Mutant("lock/offsite", "wrapper/torchmpi/offsite.py",
           'if data.get("os") and oses != [data["os"]]:',
           'if data.get("os") and data["os"] not in oses:'),
    Mutant("lock/offsite", "wrapper/torchmpi/offsite.py",
           "elif site_libc and libcs != [site_libc]:",
           "elif site_libc and site_libc not in libcs:"),
    # --- the patcher (digest updated: only behaviour may kill it) -----------------------
    # Skipping a source that mentions MPICH (what the patcher did before it checked
    # the guard macro): a check with upstream's MPIX_GPU_SUPPORT_CUDA branch gets no fallback.
    Mutant("patcher", PATCHER, '    return MARKER in source', '    return "MPICH" in source',
           PATCH),
    Mutant("patcher", PATCHER,
           '    wanted = ("torchmpi-mpich", "upstream-mpich") if mpich_family else ("open-mpi",)',
           '    wanted = ("torchmpi-mpich", "upstream-mpich", "none") if mpich_family '
           'else ("open-mpi",)', PATCH),
    Mutant("patcher", PATCHER, '        elif word == "else" and depth == 1:',
           '        elif word == "else":', PATCH),
    Mutant("patcher", PATCHER, '    return std::string(enabled) == "1";',
           "    return true;", PATCH),
    Mutant("patcher", PATCHER, "    return supported != 0;", "    return true;", PATCH),
    Mutant("patcher", PATCHER, "    body = body[:at] + _BRANCH + body[at:]",
           "    body = body[:at] + body[at:]", PATCH),
    # --- packages (real Spack: --spack) --------------------------------------------------
    Mutant("packages", TORCH_PACKAGE,
           ') and not self.spec.satisfies("^[virtuals=mpi] openmpi-cuda")',
           ') and not self.spec.satisfies("^[virtuals=mpi] openmpi-cuda") '
           'and not self.spec.satisfies("^[virtuals=mpi] cray-mpich")', PKG, spack=True),
    Mutant("packages", TORCH_PACKAGE, '        env.set("MPI_HOME", self.spec["mpi"].prefix)',
           "        pass", PKG, spack=True),
    Mutant("packages", TORCH_PACKAGE, "        super().patch()\n", "", PKG, spack=True),
    Mutant("packages", "spack_repo/torchmpi/packages/py_mpi4py/package.py",
           '        if self.spec.satisfies("+cuda_aware_mpi"):',
           "        if False:", PKG, spack=True),
    # the plugin's name cut-off one release late: 1.13.0 registers "OFI" as well
    Mutant("packages", PLUGIN, 'if self.spec.satisfies("@:1.12") else "OFI"',
           'if self.spec.satisfies("@:1.13") else "OFI"', PKG, spack=True),
    # NCCL_NET set for every aws-ofi-nccl user with CUDA, not only on Slingshot
    Mutant("packages", PLUGIN, '        if self.spec.satisfies("+cxi"):',
           '        if self.spec.satisfies("+cuda"):', PKG, spack=True),
    # RCCL 2.27.7's default plugin name (libnccl-net.so) linked for every build, or never
    Mutant("packages", PLUGIN, '@run_after("install", when="+rocm +cxi")',
           '@run_after("install", when="+cxi")', ("tests/test_gtl_hsa_install.py",),
           spack=True),
    Mutant("packages", PLUGIN, '            symlink("librccl-net.so", link)',
           '            pass', ("tests/test_gtl_hsa_install.py",), spack=True),
    # the cxi provider no longer required of libfabric
    Mutant("packages", PLUGIN, 'depends_on("libfabric@1.11: fabrics=cxi", when="+cxi")',
           'depends_on("libfabric@1.11:", when="+cxi")', PKG, spack=True),
    # GPUDirect copies without gdrcopy
    Mutant("packages", OPENMPI_CUDA, 'depends_on("ucx +cuda +gdrcopy")',
           'depends_on("ucx +cuda")', PKG, spack=True),
    # one of HPE's Slingshot settings changed
    Mutant("packages", NCCL_SS11, '("NCCL_NET_GDR_LEVEL", "PHB")',
           '("NCCL_NET_GDR_LEVEL", "SYS")', PKG, spack=True),
    # the shutdown-ordering range ends one release early: 1.17.1 let through
    Mutant("packages", NCCL_SS11, '"^aws-ofi-nccl@1.16:1.17.1"', '"^aws-ofi-nccl@1.16:1.17.0"',
           PKG, spack=True),
    # only the newest vouched plugin allowed with an NCCL (CSCS's 1.17.2 refused)
    Mutant("packages", NCCL_SS11, "f\"^aws-ofi-nccl@{','.join(_plugins)}\"",
           'f"^aws-ofi-nccl@{_plugins[0]}"', PKG, spack=True),
    # the GPU switch for every Cray MPICH build, CUDA-aware or not
    Mutant("packages", TORCH_MPI,
           'if self.spec.satisfies("+cuda_aware_mpi ^[virtuals=mpi] cray-mpich"):',
           'if self.spec.satisfies("^[virtuals=mpi] cray-mpich"):', PKG, spack=True),
    # mpi4py's GTL asked on the wrong provider (mpich), so not on Cray
    Mutant("packages", TORCH_MPI,
           'when="+cuda_aware_mpi ^[virtuals=mpi] cray-mpich")',
           'when="+cuda_aware_mpi ^[virtuals=mpi] mpich")', PKG, spack=True),
    # InfiniBand sites get NCCL without verbs
    Mutant("packages", TORCH_MPI, 'depends_on("nccl fabrics=verbs", when="fabric=ib")',
           'depends_on("nccl fabrics=auto", when="fabric=ib")', PKG, spack=True),
    # torch built against a NCCL other than the DAG's
    Mutant("packages", TORCH_PACKAGE,
           '            env.set("NCCL_ROOT", self.spec["nccl"].prefix)',
           "            pass", PKG, spack=True),
    # the GTL file name cut one character short ("liblmpi_gtl_cuda.so")
    Mutant("packages", TORCH_PACKAGE, '"lib" + gtl["ldlibs"][0][2:] + ".so"',
           '"lib" + gtl["ldlibs"][0][1:] + ".so"', PKG, spack=True),
    # the unverified-release gap ends one release early: 2.9.0 let through
    Mutant("packages", TORCH_PACKAGE, '        "@2.7.0:2.9.0",', '        "@2.7.0:2.8",',
           PKG, spack=True),
)

#: Survivors left on purpose: mutant name -> why (docs/testing.md repeats these).
SURVIVORS_OK: dict[str, str] = {
    "wrapper/torchmpi/runtime.py: 'out.set.setdefault(GPU_SWITCH, \"1\")'":
        "equivalent: validation admits a stated switch only when it equals the implied"
        " value, so setting 1 over a stated 1 changes nothing (not even the order)",
}


#: ``--head``: mutate copies of the last commit (what others' unfinished edits cannot break).
FROM_HEAD = False


def _copy_checkout(dest: Path) -> None:
    """The working tree as git sees it (tracked and untracked, not ignored) at ``dest``,
    or the last commit with ``--head``."""
    if FROM_HEAD:
        archive = subprocess.run(["git", "archive", "HEAD"], cwd=ROOT, capture_output=True,
                                 check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    names = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=ROOT,
                           capture_output=True, check=True).stdout.split(b"\0")
    for raw in filter(None, names):
        rel = raw.decode()
        src = ROOT / rel
        if src.is_symlink():  # a link git tracks (wrapper/torchmpi/sites): kept a link
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            os.symlink(os.readlink(src), dest / rel)
            continue
        if not src.is_file():
            continue
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(src, dest / rel)


def _apply(tree: Path, m: Mutant) -> None:
    path = tree / m.file
    text = path.read_text()
    if text.count(m.old) != 1:
        raise SystemExit(f"mutate: {m.name}: the line occurs {text.count(m.old)} times "
                         f"in {m.file} (the code moved on: update scripts/mutate.py)")
    path.write_text(text.replace(m.old, m.new))
    if m.file == PATCHER:  # the patch file and its sha256 follow, as after an edit
        subprocess.run([sys.executable, str(tree / Path(PATCHER).parent / "as_patch.py")],
                       check=True, capture_output=True)


def mutant_env(tree: Path, outer: dict[str, str]) -> dict[str, str]:
    """The environment a mutant's tests run under, in the scratch copy ``tree``.

    ``TORCHMPI_ROOT`` must name the copy: ``setup-env.sh`` (which ``make mutate``
    sources) exports it as the checkout, ``paths.root()`` prefers it, and the
    Spack fixture builds its repos.yaml from it -- inherited, every package
    mutant's tests read the unmutated checkout (tests/test_mutate.py).
    """
    return dict(outer, PYTHONPATH=str(tree / "wrapper"), PYTHONDONTWRITEBYTECODE="1",
                TORCHMPI_ROOT=str(tree))


def _run(m: Mutant) -> tuple[Mutant, str, float]:
    """'killed', 'survived' or 'error: ...' for one mutant, in a fresh copy.

    Only a package mutant runs its files' real-Spack tests: ``--spack`` selects
    those mutants, it does not add minutes of solves to the wrapper's."""
    start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="torchmpi-mutant-") as tmp:
        tree = Path(tmp)
        _copy_checkout(tree)
        _apply(tree, m)
        marks = [] if m.spack else ["-m", "not spack and not concretize"]
        env = mutant_env(tree, dict(os.environ))
        tests = [f for f in m.tests if (tree / f).exists()]  # --head: the commit's files
        if not tests:  # never the whole suite
            return m, "error: no test file in the copy", time.monotonic() - start
        proc = subprocess.run([sys.executable, "-m", "pytest", *tests, "-x", "-q",
                               "-p", "no:cacheprovider", *marks], cwd=tree, env=env,
                              capture_output=True, text=True, check=False)
    # pytest: 0 all passed, 1 a test failed, 5 nothing collected, others: an error.
    verdict = {0: "survived", 1: "killed"}.get(proc.returncode,
                                               f"error: pytest exit {proc.returncode}")
    return m, verdict, time.monotonic() - start


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--spack", action="store_true",
                    help="also run the package mutants with the real-Spack tests (slow)")
    ap.add_argument("--jobs", type=int, default=2, help="mutants run at once (default 2)")
    ap.add_argument("--only", help="only this area")
    ap.add_argument("--match", action="append", default=[], metavar="TEXT",
                    help="only mutants whose name (file: line) contains TEXT (repeatable; "
                         "with --generated: of the sample drawn)")
    ap.add_argument("--list", action="store_true", help="list the mutants and check they apply")
    gen = ap.add_argument_group("generated mutants (cosmic-ray)")
    gen.add_argument("--generated", type=int, metavar="N",
                     help="run N cosmic-ray mutants per wrapper module instead")
    gen.add_argument("--budget", type=float, default=3600,
                     help="stop starting mutants after this many seconds (default 3600)")
    gen.add_argument("--seed", type=int, default=1, help="the sample's seed (default 1)")
    gen.add_argument("--head", action="store_true",
                     help="mutate a copy of the last commit, not of the working tree")
    gen.add_argument("--module", action="append", default=[], metavar="TEXT",
                     help="only modules whose path contains TEXT (repeatable)")
    gen.add_argument("--timeout", type=int, default=900,
                     help="seconds one mutant's tests may run (a timeout counts as killed)")
    gen.add_argument("--record", type=Path, help="write the results as JSON here")
    args = ap.parse_args(argv)
    global FROM_HEAD
    FROM_HEAD = args.head
    if args.generated is not None:
        import mutate_generated

        return mutate_generated.run(args.generated, args.seed, args.budget, args.jobs,
                                    args.head, args.module, args.timeout, args.record,
                                    args.match)
    chosen = [m for m in MUTANTS if args.only in (None, m.area)
              and (not args.match or any(t in m.name for t in args.match))]
    for m in chosen:  # every mutant's line must still be in the code, and have tests
        text = (subprocess.run(["git", "show", f"HEAD:{m.file}"], cwd=ROOT, capture_output=True,
                               text=True, check=False).stdout if FROM_HEAD
                else (ROOT / m.file).read_text())
        if text.count(m.old) != 1:
            raise SystemExit(f"mutate: {m.name}: line not found once; update scripts/mutate.py")
        if not m.tests:
            raise SystemExit(f"mutate: {m.name}: {m.file} has no tests "
                             "(tests/support/layout.py: tests/test_<key>.py)")
    if args.list:
        for m in chosen:
            print(f"{m.area:12} {m.name}  -> {', '.join(m.tests)}")
        return 0
    measured = [m for m in chosen if args.spack or not m.spack]
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        results = list(pool.map(_run, measured))
    areas: dict[str, list[str]] = {}
    bad = 0
    for m, verdict, seconds in results:
        equivalent = verdict == "survived" and m.name in SURVIVORS_OK
        areas.setdefault(m.area, []).append("equivalent" if equivalent else verdict)
        flag = verdict
        if verdict != "killed":
            flag += f" (left on purpose: {SURVIVORS_OK[m.name]})" if m.name in SURVIVORS_OK else ""
            bad += m.name not in SURVIVORS_OK
        print(f"{flag:10} {seconds:6.0f} s  {m.area:12} {m.name}")
    print("\n" + score_table(areas, [m.area for m in chosen]))
    return 1 if bad else 0


def score_table(areas: dict[str, list[str]], order: list[str]) -> str:
    """Killed out of the non-equivalent mutants measured, per area.

    The usual mutation score: an equivalent mutant (listed in SURVIVORS_OK with
    the reason no behaviour can differ) has no bug for a test to find, so it is
    counted apart, neither killed nor a survivor.
    """
    lines = [f"{'area':22} killed / measured (equivalent)  score"]
    for area in dict.fromkeys(order):
        got = areas.get(area, [])
        if not got:
            lines.append(f"{area:22} not measured (real-Spack mutants: "
                         "make mutate MUTATE_ARGS=--spack)")
            continue
        killed, equivalent = got.count("killed"), got.count("equivalent")
        counted = len(got) - equivalent
        score = f"{100 * killed // counted} %" if counted else "-"
        lines.append(f"{area:22} {killed} / {counted}"
                     + (f" ({equivalent} equivalent)" if equivalent else "")
                     + f"  {score}")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(main())
