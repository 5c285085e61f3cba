"""AMD GPUs: a ROCm torch, the GPUs ROCm's tools list, RCCL's network plugin, GTL for HSA.

A ROCm build of PyTorch keeps NVIDIA's names: ``torch.version.hip`` is set
and ``torch.version.cuda`` is None, HIP devices are ``cuda`` devices and the
``torch.cuda`` API drives them ("PyTorch for HIP intentionally reuses the
existing torch.cuda interfaces", PyTorch 2.6.0 ``docs/source/notes/hip.rst``),
and the ``"nccl"`` backend is RCCL.  So the probes (one-rank all-reduce over
``nccl`` with a ``cuda`` tensor) and ``torchmpi allreduce`` run unchanged;
what differs is checked here:

* GPUs: ``amd-smi`` (ROCm 6 and later) or ``rocm-smi``, not ``nvidia-smi``.
  ``amd-smi static`` prints a ``GPU: <n>`` block per GPU with its ``DRIVER``
  (``NAME: amdgpu``, ``VERSION``) (ROCm/rocm-systems#2987); ``rocm-smi``
  prefixes every line with ``GPU[<n>]`` (ROCm/legacy-rocm-build#1886).
* RCCL's network plugin: with ``NCCL_NET_PLUGIN`` unset RCCL opens one name,
  which depends on the release: ``libnccl-net.so`` through rocm-3.8.0
  (ROCm/rccl ``src/init.cc``:73), ``librccl-net.so`` from rocm-3.9.0
  (ROCm/rccl#266; rocm-6.2.0 ``src/net.cc``:343-352; @0cbce2a
  ``src/net.cc``:405-408; on NCCL 2.26's loader @29e8452a ``src/plugin/net.cc``
  passes no name and ``src/plugin/plugin_open.cc`` composes <prefix>.so), and
  ``libnccl-net.so`` again on NCCL 2.27's loader (@0123763f ``src/plugin/net.cc``,
  defaultNetPlugin; RCCL 2.27.7, from ROCm 7.1.0), which OLCF links to
  ``librccl-net.so`` (olcf/olcf-user-docs ``software/analytics/pytorch_frontier.rst``
  :663-664) and for which ROCm 7.2 needs ``NCCL_NET_PLUGIN=<dir>/librccl-net.so``
  (HewlettPackard/shs-ccl-docs#6), and ``librccl-net.so`` once more after
  ROCm/rocm-systems#4201 (2.27.7 still): so from 2.27 the release does not tell
  the name, and a plugin found under one name only is a warning
  (:func:`check_rccl_plugin`); torchmpi's aws-ofi-nccl installs both.
  Set, the value itself (a path) and then ``librccl-net-<value>.so``
  (@0cbce2a ``src/net.cc``:386-410).  Never ``librccl-net-ofi.so`` unasked.
  aws-ofi-nccl built ``--with-rocm`` installs ``librccl-net-ofi.so`` and, unless
  configured ``--disable-nccl-net-library``, ``librccl-net.so`` (src/Makefile.am
  at v1.19.2), and prints the same ``NET/OFI`` provider line as for NCCL.
* Cray MPICH's GTL for AMD GPUs is ``libmpi_gtl_hsa`` (olcf/olcf-user-docs
  ``systems/frontier_user_guide.rst``, ``MPICH_GPU_SUPPORT_ENABLED``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from torchmpi.doctor import nccl, network
from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check, Runner, version_tuple

#: Cray MPICH's GPU Transport Layer for AMD GPUs.
GTL = "libmpi_gtl_hsa"
#: What RCCL opens without NCCL_NET_PLUGIN: one of these, by release (see the module
#: docstring).  Both are looked for; which one the job's RCCL opens is judged from its
#: release where that tells (:func:`_one_default_name`).
PLUGIN_LIBRARIES = ("librccl-net.so", "libnccl-net.so")
#: The first RCCL on NCCL 2.27's loader (RCCL 2.27.7, ROCm 7.1.0: ROCm/rocm-systems
#: ``projects/rccl/CHANGELOG.md``), whose default name may be either of
#: :data:`PLUGIN_LIBRARIES`; before it (from rocm-3.9.0) only librccl-net.so.
RCCL_EITHER_NAME = (2, 27)
#: RCCL's file name for one NCCL_NET_PLUGIN name is librccl-net-<name>.so (ROCm/rccl
#: ``src/plugin/plugin_open.cc``@145a0512, pluginPrefix), NCCL's libnccl-net-<name>.so.
PREFIX = "librccl-net"


@dataclass
class SmiInfo:
    """What ROCm's management tool says: GPUs, their names, the amdgpu driver."""

    gpus: int = 0
    tool: str = ""  # the tool that answered ("" when none ran)
    names: list[str] = field(default_factory=list)
    driver: str | None = None  # amdgpu driver version, when printed


def parse_amd_smi(text: str) -> SmiInfo:
    """``amd-smi static --asic --driver``: one ``GPU: <n>`` block per GPU."""
    gpus = len(set(re.findall(r"^GPU: (\d+)\s*$", text, re.MULTILINE)))
    names = re.findall(r"^\s+MARKET_NAME: (.+?)\s*$", text, re.MULTILINE)
    driver = re.search(r"^\s+DRIVER:\s*\n\s+NAME: amdgpu\s*\n\s+VERSION: (\S+)", text,
                       re.MULTILINE)
    return SmiInfo(gpus, "amd-smi", list(dict.fromkeys(names)),
                   driver.group(1) if driver else None)


def parse_rocm_smi(text: str) -> SmiInfo:
    """``rocm-smi --showproductname``: every line of a GPU starts ``GPU[<n>]``."""
    gpus = len(set(re.findall(r"^GPU\[(\d+)\]\s*:", text, re.MULTILINE)))
    names = re.findall(r"^GPU\[\d+\]\s*:\s*Card (?:series|Series):\s*(.+?)\s*$", text,
                       re.MULTILINE)
    return SmiInfo(gpus, "rocm-smi", list(dict.fromkeys(names)))


def probe_smi(runner: Runner) -> SmiInfo:
    """amd-smi if it runs, else rocm-smi (deprecated from ROCm 6 but still shipped)."""
    result = runner(["amd-smi", "static", "--asic", "--driver"])
    if result is not None and result.returncode == 0:
        return parse_amd_smi(result.stdout)
    result = runner(["rocm-smi", "--showproductname"])
    if result is not None and result.returncode == 0:
        return parse_rocm_smi(result.stdout)
    return SmiInfo()


def check_gpu(gpu_count: int, hip_build: str | None, smi: SmiInfo,
              gpu_site: bool = False) -> Check:
    """The ``gpu`` check for a ROCm torch: GPUs torch sees against what ROCm's tool lists."""
    name = "gpu"
    tool = (f"; {smi.tool} lists {smi.gpus}" + (f" ({', '.join(smi.names)})" if smi.names else "")
            + (f", amdgpu {smi.driver}" if smi.driver else "")) if smi.tool else ""
    if gpu_count:
        return Check(name, PASS, f"{gpu_count} AMD GPU(s) visible to torch (ROCm/HIP "
                                 f"{hip_build}){tool}")
    if gpu_site or smi.gpus:
        seen = (f"{smi.tool} lists {smi.gpus} GPU(s) but torch sees none" if smi.gpus
                else "this is a GPU site but no GPU is visible")
        return Check(name, FAIL, f"{seen} (ROCm/HIP {hip_build} build)",
                     "run on a GPU node inside the job (srun --gpus...); check "
                     "HIP_VISIBLE_DEVICES and ROCR_VISIBLE_DEVICES; the rocm module must "
                     "match the ROCm torch was built with")
    return Check(name, SKIP, "no AMD GPU visible and the site has none: GPU checks skipped")


def plugin_names(env: Mapping[str, str]) -> list[str]:
    """The libraries RCCL would dlopen as its net plugin, given NCCL_NET_PLUGIN.

    Read by NCCL's reader (:func:`nccl.requested_plugins`, :func:`nccl.candidates`)
    with RCCL's prefix: RCCL's loader on NCCL 2.27 is NCCL 2.27.7's but for the
    prefix (ROCm/rccl ``src/plugin/net.cc``@0123763f splits the value at commas with
    strtok_r; ``src/plugin/plugin_open.cc``@145a0512 tries a name as given, then
    ``librccl-net-<name>.so`` unless it is a path or a lib*.so name), so a list and
    "none" (no file of that name: no external plugin) mean what they mean to NCCL.
    Where RCCL differs:

    * unset: :data:`PLUGIN_LIBRARIES`, not NCCL's one name: which default a release
      opens differs (see the module docstring), so both are tried; librccl-net-ofi.so
      is loaded only to name the fix (:func:`nccl.alternatives`);
    * RCCL on NCCL 2.26's loader (ROCm/rccl ``src/plugin/net.cc``@29e8452a passes the
      whole value to one open) reads a list as one name that no file has; the doctor
      knows no RCCL release to tell the two loaders apart, so it reads a list as 2.27's
      does, and a job on the older one logs ``Could not find`` for the whole value.
    """
    if not nccl.plugin_setting(env):
        return list(PLUGIN_LIBRARIES)
    names = [name for plugin in nccl.requested_plugins(env)
             for name in nccl.candidates(plugin, PREFIX)]
    return list(dict.fromkeys(names))


def resolve_plugin(env: Mapping[str, str], runner: Runner) -> dict[str, nccl.Mapped]:
    """Load every RCCL plugin name in its own child, as the NCCL check does."""
    return nccl.resolve_names(plugin_names(env), nccl.alternatives(env, PREFIX), env, runner)


def _rccl(check: Check) -> Check:
    """An NCCL check's text in RCCL's file names (the logic is the same)."""
    def text(value: str | None) -> str | None:
        return (value.replace("libnccl-net.so", "librccl-net.so")
                .replace("NCCL uses TCP sockets", "RCCL uses TCP sockets") if value else value)
    return replace(check, detail=text(check.detail), fix=text(check.fix))


def _one_default_name(plugin: nccl.PluginInfo, rccl_version: str | None) -> Check | None:
    """With NCCL_NET_PLUGIN unset, a plugin found under one of RCCL's two default names
    only: FAIL when the release is known to open the other (before 2.27: librccl-net.so),
    WARN when it may (2.27 on, or a release not known)."""
    found = [name for name in PLUGIN_LIBRARIES if name in plugin.libraries]
    if len(found) != 1:
        return None
    have, other = found[0], next(n for n in PLUGIN_LIBRARIES if n != found[0])
    release = version_tuple(rccl_version) or ()
    known_old = len(release) > 1 and release < RCCL_EITHER_NAME
    if known_old and have == "librccl-net.so":
        return None
    path, shown = plugin.libraries[have], f"RCCL {rccl_version or '(release unknown)'}"
    opens = (f"{shown} opens {other} only (librccl-net.so from rocm-3.9.0 until NCCL "
             "2.27's loader)" if known_old else
             f"{shown} may open {other} instead (RCCL 2.27.7 from ROCm 7.1.0 opens "
             "libnccl-net.so, earlier releases and those after ROCm/rocm-systems#4201 "
             "librccl-net.so)")
    return Check("nccl.plugin", FAIL if known_old else WARN,
                 f"NCCL_NET_PLUGIN is unset and only {have} ({path}) loads, not {other}: "
                 f"{opens}; without it RCCL uses sockets between nodes, or stops where "
                 "NCCL_NET names the plugin",
                 f"export NCCL_NET_PLUGIN={path} (OLCF's form; every RCCL opens a path "
                 f"as given), or link {other} to it in its directory")


def check_rccl_plugin(env: Mapping[str, str], plugin: nccl.PluginInfo, slingshot: bool,
                      nodes: int | None, has_nccl: bool = True,
                      rccl_version: str | None = None) -> Check:
    """The RCCL plugin: NCCL_NET_PLUGIN against the files RCCL opens, then the NCCL
    check's rules (plugin releases, NCCL_NET, Slingshot) in RCCL's names.
    ``rccl_version`` (torch's RCCL, as its NCCL version) tells which default name an
    RCCL before 2.27 opens."""
    wanted, names = nccl.plugin_setting(env), plugin_names(env)
    if has_nccl and wanted and names and not plugin.libraries:
        tried = " or ".join(names)
        broken = "; ".join(f"{lib}: {err}" for lib, err in plugin.errors.items())
        return Check("nccl.plugin", FAIL,
                     f"NCCL_NET_PLUGIN={wanted} but RCCL finds no {tried}"
                     + (f" ({broken})" if broken else "")
                     + ": RCCL logs 'NET/Plugin: ... No plugin found' and uses sockets",
                     "set NCCL_NET_PLUGIN to the full path of the aws-ofi-nccl ROCm "
                     "build's lib/librccl-net.so (Frontier: module load rccl-net-plugin)")
    # "none" stays for the NCCL check, which says what it means (no external plugin)
    rest = {k: v for k, v in env.items() if k != "NCCL_NET_PLUGIN" or not names}
    check = _rccl(nccl.check_nccl_plugin(rest, plugin, slingshot, nodes, has_nccl))
    if wanted and check.status == PASS:
        check = replace(check, detail=check.detail.replace(
            "NCCL_NET_PLUGIN=(unset)", f"NCCL_NET_PLUGIN={wanted}"))
    elif check.status == PASS and slingshot and nodes != 1:
        check = _one_default_name(plugin, rccl_version) or check
    return check


def check_rccl_network(log_text: str | None, slingshot: bool, nodes: int | None = None
                       ) -> Check:
    """Which network RCCL chose: the NCCL log check (RCCL prints NCCL's lines)."""
    return _rccl(network.check_nccl_network(log_text, slingshot, nodes))
