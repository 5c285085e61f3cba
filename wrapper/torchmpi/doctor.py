"""Checks that tell, on a compute node, whether PyTorch's MPI/NCCL stack is right.

Each check is a small function from explicit inputs (a :class:`TorchInfo`, an
environment mapping, a command runner, NCCL log text, interface names) to a
:class:`Check`, so the tests feed every failure mode in for real instead of
patching the machine.  :func:`gather` collects the inputs from the running
system and :func:`run_checks` applies all checks.

Imports nothing heavy at module level: the doctor must run without Spack and
report (not crash) when torch itself is missing or broken.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path

PASS, WARN, FAIL, SKIP = "PASS", "WARN", "FAIL", "SKIP"


@dataclass
class Check:
    """One line of the doctor's report."""

    name: str
    status: str
    detail: str
    fix: str = ""


@dataclass
class CommandResult:
    returncode: int
    stdout: str


#: Runs argv and returns its result, or ``None`` when the program does not exist.
Runner = Callable[[list], "CommandResult | None"]


def run_command(argv: list, timeout: float = 60, env: Mapping[str, str] | None = None
                ) -> CommandResult | None:
    """The real :data:`Runner`: stdout and stderr together, never raises."""
    try:
        proc = subprocess.run(argv, check=False, capture_output=True, text=True, timeout=timeout,
                              env=None if env is None else dict(env))
    except (FileNotFoundError, PermissionError):
        return None
    except subprocess.TimeoutExpired as err:
        out = err.stdout.decode() if isinstance(err.stdout, bytes) else (err.stdout or "")
        return CommandResult(124, out)
    return CommandResult(proc.returncode, proc.stdout + proc.stderr)


# --- torch -----------------------------------------------------------------


@dataclass
class TorchInfo:
    """What the doctor needs to know about the importable torch."""

    version: str | None = None
    import_error: str | None = None
    mpi: bool = False
    nccl: bool = False
    gloo: bool = False
    nccl_version: str | None = None
    cuda_build: str | None = None  # torch.version.cuda; None for a CPU-only build
    gpu_count: int = 0
    lib_dir: str | None = None


def probe_torch() -> TorchInfo:
    """Import torch here and describe it; a failed import is reported, not raised."""
    try:
        import torch
        import torch.distributed as dist
    except Exception as err:  # noqa: BLE001 -- any import failure is the finding
        return TorchInfo(import_error=f"{type(err).__name__}: {err}")
    info = TorchInfo(version=torch.__version__, cuda_build=torch.version.cuda,
                     lib_dir=str(Path(torch.__file__).parent / "lib"))
    info.mpi = dist.is_available() and dist.is_mpi_available()
    info.nccl = dist.is_available() and dist.is_nccl_available()
    info.gloo = dist.is_available() and dist.is_gloo_available()
    try:
        info.gpu_count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    except Exception:  # noqa: BLE001 -- a broken driver means "no usable GPU"
        info.gpu_count = 0
    if info.nccl:
        try:
            version = torch.cuda.nccl.version()
            info.nccl_version = (".".join(map(str, version)) if isinstance(version, tuple)
                                 else str(version))
        except Exception:  # noqa: BLE001
            info.nccl_version = None
    return info


def check_torch(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("torch", FAIL, f"import torch failed: {info.import_error}",
                     "load the site's py-torch-mpi module (or activate its environment)")
    build = f"CUDA {info.cuda_build}" if info.cuda_build else "CPU-only build"
    return Check("torch", PASS, f"torch {info.version} ({build})")


def check_backend_mpi(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("backend.mpi", SKIP, "torch does not import")
    if info.mpi:
        return Check("backend.mpi", PASS, "torch.distributed.is_mpi_available() is True")
    return Check(
        "backend.mpi", FAIL,
        "this PyTorch has no MPI backend (built without MPI: 'Not compiling with MPI')",
        "use the site's py-torch-mpi build (pip/conda wheels never have it); "
        "see docs/troubleshooting.md#mpi-backend-missing",
    )


def check_backend_nccl(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("backend.nccl", SKIP, "torch does not import")
    if info.nccl:
        return Check("backend.nccl", PASS, "torch.distributed.is_nccl_available() is True")
    if not info.cuda_build:
        status = FAIL if info.gpu_count else WARN
        return Check("backend.nccl", status, "CPU-only PyTorch: no NCCL backend",
                     "on GPU nodes use the +cuda build of py-torch-mpi")
    return Check("backend.nccl", FAIL, f"CUDA {info.cuda_build} build without NCCL",
                 "rebuild py-torch with +nccl (the site environment does this)")


def check_backend_gloo(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("backend.gloo", SKIP, "torch does not import")
    if info.gloo:
        return Check("backend.gloo", PASS, "torch.distributed.is_gloo_available() is True")
    return Check("backend.gloo", FAIL, "no gloo backend (torch built without distributed?)",
                 "rebuild py-torch with +distributed")


#: aws/aws-ofi-nccl#1055: this NCCL deadlocks with the OFI plugin.
_BAD_NCCL = {"2.28.9": "NCCL 2.28.9 deadlocks with the aws-ofi-nccl plugin (aws-ofi-nccl#1055)"}


def check_nccl_version(info: TorchInfo) -> Check:
    if not info.nccl:
        return Check("nccl.version", SKIP, "no NCCL backend")
    if not info.nccl_version:
        return Check("nccl.version", WARN, "torch.cuda.nccl.version() failed",
                     "check that libnccl.so loads (ldd libtorch_cuda.so)")
    if info.nccl_version in _BAD_NCCL:
        return Check("nccl.version", WARN, _BAD_NCCL[info.nccl_version],
                     "use another NCCL version (e.g. 2.27.7-1)")
    return Check("nccl.version", PASS, f"NCCL {info.nccl_version}")


def check_gpu(info: TorchInfo) -> Check:
    if info.import_error:
        return Check("gpu", SKIP, "torch does not import")
    if info.gpu_count:
        return Check("gpu", PASS, f"{info.gpu_count} GPU(s) visible to torch")
    return Check("gpu", SKIP, "no GPU visible: GPU checks skipped")


# --- MPI -------------------------------------------------------------------


@dataclass
class MpiInfo:
    kind: str | None  # openmpi | mpich | cray-mpich | None
    version: str = ""
    source: str = ""  # how we found out


def _linked_mpi(ldd_text: str) -> str | None:
    if "libmpi_cray" in ldd_text:
        return "cray-mpich"
    if re.search(r"libmpich\S*\.so", ldd_text):
        return "mpich"
    if "libopen-pal" in ldd_text or "libopen-rte" in ldd_text or "libmpi.so.40" in ldd_text:
        return "openmpi"
    if re.search(r"libmpi\.so\.12\b", ldd_text):
        return "mpich"
    return None


def identify_mpi(runner: Runner, env: Mapping[str, str], torch_ldd: str = "") -> MpiInfo:
    """Which MPI: the one linked into torch first, then Cray's module, then the PATH tools."""
    linked = _linked_mpi(torch_ldd)
    if linked is None and (env.get("CRAY_MPICH_VERSION") or env.get("CRAY_MPICH_DIR")):
        linked = "cray-mpich"
    if linked == "cray-mpich":
        return MpiInfo("cray-mpich", env.get("CRAY_MPICH_VERSION", ""),
                       "libmpi_cray / cray-mpich module")
    ompi = runner(["ompi_info", "--version"]) if linked in (None, "openmpi") else None
    if ompi is not None and ompi.returncode == 0:
        match = re.search(r"Open MPI v?(\S+)", ompi.stdout)
        return MpiInfo("openmpi", match.group(1) if match else "", "ompi_info")
    mpich = runner(["mpichversion"]) if linked in (None, "mpich") else None
    if mpich is not None and mpich.returncode == 0:
        match = re.search(r"MPICH Version:\s*(\S+)", mpich.stdout)
        return MpiInfo("mpich", match.group(1) if match else "", "mpichversion")
    if linked:
        return MpiInfo(linked, "", "linked into libtorch_cpu.so")
    return MpiInfo(None)


def check_mpi_implementation(mpi: MpiInfo) -> Check:
    if mpi.kind is None:
        return Check("mpi.implementation", FAIL,
                     "no MPI found (not linked into torch; no ompi_info/mpichversion on PATH)",
                     "load the site's MPI module (the one py-torch-mpi was built with)")
    names = {"openmpi": "Open MPI", "mpich": "MPICH", "cray-mpich": "Cray MPICH"}
    version = f" {mpi.version}" if mpi.version else ""
    return Check("mpi.implementation", PASS, f"{names[mpi.kind]}{version} (from {mpi.source})")


_CUDA_SUPPORT = re.compile(
    r"^mca:(?:mpi|opal):base:param:(?:mpi|opal)_built_with_cuda_support:value:(\w+)",
    re.MULTILINE)


def openmpi_cuda_support(ompi_info_all: str) -> bool | None:
    """``ompi_info --parsable --all`` -> whether Open MPI was built with CUDA support."""
    match = _CUDA_SUPPORT.search(ompi_info_all)
    return None if match is None else match.group(1) == "true"


def check_openmpi_cuda_aware(mpi: MpiInfo, runner: Runner, gpu_count: int) -> Check:
    name = "mpi.cuda_aware"
    if mpi.kind != "openmpi":
        return Check(name, SKIP, "not Open MPI (see mpi.cray_gpu for Cray MPICH)")
    result = runner(["ompi_info", "--parsable", "--all"])
    aware = openmpi_cuda_support(result.stdout) if result is not None else None
    if aware is None:
        return Check(name, WARN, "could not read mpi_built_with_cuda_support from ompi_info",
                     "run: ompi_info --parsable --all | grep mpi_built_with_cuda_support")
    if aware:
        return Check(name, PASS, "Open MPI is CUDA-aware (mpi_built_with_cuda_support=true)")
    detail = ("Open MPI is not CUDA-aware (mpi_built_with_cuda_support=false): "
              "CUDA tensors over the MPI backend will be rejected")
    fix = "use the site's openmpi-cuda (Open MPI +cuda), or NCCL for CUDA tensors"
    return Check(name, FAIL if gpu_count else WARN,
                 detail if gpu_count else detail + "; fine for CPU tensors", fix)


def gtl_linked(torch_ldd: str, env: Mapping[str, str]) -> bool:
    """Is Cray's GPU transport layer in the process: linked into torch or preloaded?"""
    return "libmpi_gtl_cuda" in torch_ldd or "libmpi_gtl_cuda" in env.get("LD_PRELOAD", "")


def check_cray_gpu_support(mpi: MpiInfo, env: Mapping[str, str], torch_ldd: str) -> Check:
    """Cray MPICH needs GTL linked *and* MPICH_GPU_SUPPORT_ENABLED=1, or neither."""
    name = "mpi.cray_gpu"
    value = env.get("MPICH_GPU_SUPPORT_ENABLED")
    if mpi.kind != "cray-mpich" and value is None:
        return Check(name, SKIP, "not Cray MPICH")
    enabled = value == "1"
    gtl = gtl_linked(torch_ldd, env)
    if enabled and not gtl:
        return Check(
            name, FAIL,
            "MPICH_GPU_SUPPORT_ENABLED=1 but libmpi_gtl_cuda is not linked into torch nor in "
            "LD_PRELOAD: MPI_Init aborts ('GTL library is not linked')",
            "use the py-torch-mpi build linked with GTL, or LD_PRELOAD "
            "$CRAY_MPICH_ROOTDIR/gtl/lib/libmpi_gtl_cuda.so, or set MPICH_GPU_SUPPORT_ENABLED=0",
        )
    if gtl and not enabled:
        return Check(name, FAIL,
                     "libmpi_gtl_cuda is linked but MPICH_GPU_SUPPORT_ENABLED is not 1: "
                     "CUDA buffers passed to MPI segfault without a message",
                     "export MPICH_GPU_SUPPORT_ENABLED=1 (or 0 and pass only CPU tensors to MPI)")
    if enabled:
        return Check(name, PASS, "GPU-aware Cray MPICH: GTL linked and "
                                 "MPICH_GPU_SUPPORT_ENABLED=1")
    return Check(name, PASS, "GPU support off (no GTL, MPICH_GPU_SUPPORT_ENABLED unset/0): "
                             "MPI carries CPU tensors, NCCL the CUDA ones")


# --- NCCL network ----------------------------------------------------------


def check_nccl_env(env: Mapping[str, str]) -> Check:
    """NCCL_NET_PLUGIN together with NCCL_NET broke plugin loading at CSCS."""
    plugin, net = env.get("NCCL_NET_PLUGIN"), env.get("NCCL_NET")
    if plugin and net:
        return Check("nccl.env", FAIL,
                     f"NCCL_NET_PLUGIN={plugin} and NCCL_NET={net} are both set: the plugin "
                     "may not load ('NET/Plugin: Could not find ...')",
                     "unset NCCL_NET_PLUGIN; keep NCCL_NET and put the plugin's lib dir on "
                     "LD_LIBRARY_PATH")
    return Check("nccl.env", PASS, f"NCCL_NET={net or '(unset)'}, "
                                   f"NCCL_NET_PLUGIN={plugin or '(unset)'}")


def parse_ifname(spec: str) -> tuple[bool, bool, list[str]]:
    """``NCCL_SOCKET_IFNAME`` -> (exclude, exact, names); ``^`` excludes, ``=`` is exact."""
    spec = spec.strip()
    exclude = spec.startswith("^")
    spec = spec.lstrip("^")
    exact = spec.startswith("=")
    spec = spec.lstrip("=")
    return exclude, exact, [n.strip() for n in spec.split(",") if n.strip()]


def _matches(iface: str, names: list[str], exact: bool) -> bool:
    return any(iface == n if exact else iface.startswith(n) for n in names)


def check_socket_ifname(env: Mapping[str, str], interfaces: list[str]) -> Check:
    """A NCCL_SOCKET_IFNAME that selects no interface gives 'unhandled system error'."""
    name = "nccl.socket_ifname"
    spec = env.get("NCCL_SOCKET_IFNAME")
    if not spec:
        return Check(name, PASS, "NCCL_SOCKET_IFNAME unset (NCCL skips docker*/lo itself)")
    exclude, exact, names = parse_ifname(spec)
    chosen = [i for i in interfaces if _matches(i, names, exact) != exclude]
    if exclude:
        chosen = [i for i in chosen if i != "lo" and not i.startswith("docker")] or chosen
    if not chosen:
        return Check(name, FAIL,
                     f"NCCL_SOCKET_IFNAME={spec} matches none of this node's interfaces "
                     f"({', '.join(interfaces) or 'none'}): NCCL fails with "
                     "'unhandled system error'",
                     "set it to the fabric's interface prefix (e.g. hsn on Slingshot, ib0) or "
                     "^docker0,lo")
    return Check(name, PASS, f"NCCL_SOCKET_IFNAME={spec} selects {', '.join(chosen)}")


def local_interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


@dataclass
class NcclLog:
    """What an ``NCCL_DEBUG=INFO`` log says about network selection."""

    network: str | None = None  # "Using network X"
    plugin_loaded: str | None = None
    plugin_missing: str | None = None  # "Could not find: ..." / "No plugin found ..."
    network_not_found: str | None = None
    socket_interfaces: list[str] = field(default_factory=list)
    system_error: bool = False


def parse_nccl_log(text: str) -> NcclLog:
    log = NcclLog()
    for line in text.splitlines():
        if m := re.search(r"Using network (.+?)\s*$", line):
            log.network = m.group(1)
        elif m := re.search(r"Loaded net plugin (.+?)(?:\s*\(v\d+\))?\s*$", line):
            log.plugin_loaded = m.group(1)
        elif m := re.search(r"NET/Plugin\s*:\s*(Could not find:.*?|No plugin found.*?)\s*$",
                            line):
            log.plugin_missing = log.plugin_missing or m.group(1)
        elif m := re.search(r"[Nn]etwork (.+?) not found", line):
            log.network_not_found = m.group(1)
        if "NET/Socket" in line and "Using" in line:
            log.socket_interfaces += re.findall(r"\[\d+\]([^:\s<]+):", line)
        if "unhandled system error" in line:
            log.system_error = True
    return log


_PLUGIN_NETS = ("AWS Libfabric", "Libfabric", "OFI")


def check_nccl_network(log_text: str | None, slingshot: bool) -> Check:
    """Which network NCCL chose; sockets on Slingshot are ~20x slower than the plugin."""
    name = "nccl.network"
    if log_text is None:
        return Check(name, SKIP, "no NCCL_DEBUG=INFO log (no GPU, or pass --nccl-log FILE)")
    log = parse_nccl_log(log_text)
    if log.network_not_found:
        why = f" after '{log.plugin_missing}'" if log.plugin_missing else ""
        return Check(name, FAIL, f"network {log.network_not_found} not found{why}",
                     "put the aws-ofi-nccl lib dir on LD_LIBRARY_PATH and unset NCCL_NET_PLUGIN")
    if log.system_error:
        return Check(name, FAIL, "NCCL reported 'unhandled system error'",
                     "check NCCL_SOCKET_IFNAME names a real interface (see nccl.socket_ifname)")
    if log.network is None:
        return Check(name, WARN, "the log does not say which network NCCL used",
                     "rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS=INIT,NET)")
    if log.network == "Socket":
        missing = f" ({log.plugin_missing})" if log.plugin_missing else ""
        if slingshot:
            return Check(name, FAIL, f"NCCL fell back to sockets on Slingshot{missing}",
                         "load aws-ofi-nccl (libnccl-net.so on LD_LIBRARY_PATH) and set "
                         "NCCL_NET='AWS Libfabric' for multi-node jobs")
        return Check(name, WARN, f"NCCL uses TCP sockets{missing}",
                     "fine for one node or Ethernet; on IB/Slingshot load the network plugin")
    if log.network in _PLUGIN_NETS or log.plugin_loaded:
        return Check(name, PASS, f"NCCL uses network {log.network} "
                                 f"(plugin {log.plugin_loaded or 'loaded'})")
    if slingshot:
        return Check(name, WARN, f"NCCL uses network {log.network}, not the OFI plugin",
                     "on Slingshot set NCCL_NET='AWS Libfabric'")
    return Check(name, PASS, f"NCCL uses network {log.network}")


def check_nccl_interfaces(log_text: str | None) -> Check:
    """NCCL on docker0 or loopback cannot reach other nodes."""
    name = "nccl.interfaces"
    if log_text is None:
        return Check(name, SKIP, "no NCCL_DEBUG=INFO log")
    chosen = parse_nccl_log(log_text).socket_interfaces
    if not chosen:
        return Check(name, PASS, "no socket interfaces in use")
    fix = "set NCCL_SOCKET_IFNAME to the fabric interface (e.g. hsn, ib0) or ^docker0,lo"
    if any(i.startswith("docker") for i in chosen):
        return Check(name, FAIL, f"NCCL sockets use {', '.join(chosen)} (docker bridge)", fix)
    if "lo" in chosen:
        return Check(name, WARN, f"NCCL sockets use {', '.join(chosen)}: loopback reaches no "
                                 "other node", fix)
    return Check(name, PASS, f"NCCL sockets use {', '.join(chosen)}")


def on_slingshot(site: Mapping | None, interfaces: list[str]) -> bool:
    """Slingshot when the site says so or the node has hsn* interfaces."""
    if site and site.get("fabric") == "slingshot":
        return True
    return any(i.startswith("hsn") for i in interfaces)


_NCCL_PROBE = """
import os, torch, torch.distributed as dist
dist.init_process_group('nccl', init_method='tcp://127.0.0.1:%d' % int(os.environ['PORT']),
                        rank=0, world_size=1)
t = torch.ones(1, device='cuda'); dist.all_reduce(t); torch.cuda.synchronize()
dist.destroy_process_group()
"""


def probe_nccl_log(runner: Runner, env: Mapping[str, str]) -> str | None:
    """Run a one-rank NCCL all-reduce with NCCL_DEBUG=INFO and return its log."""
    from torchmpi.dist import _free_port

    probe_env = dict(env, NCCL_DEBUG="INFO", NCCL_DEBUG_SUBSYS="INIT,NET",
                     PORT=str(_free_port()))
    result = runner([sys.executable, "-c", _NCCL_PROBE], env=probe_env)
    return None if result is None else result.stdout


# --- site variables ----------------------------------------------------------


@dataclass
class EnvDiff:
    name: str
    expected: str
    actual: str | None  # None: not set


def compare_env(expected: Mapping[str, object], actual: Mapping[str, str]) -> list[EnvDiff]:
    """Variables that are missing or differ from what the site expects."""
    diffs = []
    for name, want in expected.items():
        want = str(want)
        have = actual.get(name)
        if have != want:
            diffs.append(EnvDiff(name, want, have))
    return diffs


def check_site_env(expected: Mapping[str, object] | None, actual: Mapping[str, str],
                   site_name: str = "site") -> Check:
    name = "site.env"
    if expected is None:
        return Check(name, SKIP, "no site given (--site NAME or FILE)")
    diffs = compare_env(expected, actual)
    if not diffs:
        return Check(name, PASS, f"all {len(expected)} runtime variables of {site_name} set")
    parts = [f"{d.name} unset (want {d.expected})" if d.actual is None
             else f"{d.name}={d.actual} (want {d.expected})" for d in diffs]
    return Check(name, FAIL, f"{len(diffs)} of {len(expected)} differ: " + "; ".join(parts),
                 f"source the site's runtime.sh (torchmpi render {site_name}) or load its module")


def _sites_dir() -> Path:
    root = os.environ.get("TORCHMPI_ROOT")
    if root and (Path(root) / "sites").is_dir():
        return Path(root) / "sites"
    return Path(__file__).resolve().parents[2] / "sites"


def load_site(name_or_path: str) -> tuple[str, dict]:
    """A site file (path or name under sites/) as a mapping; plain YAML or JSON."""
    path = Path(name_or_path)
    if not path.is_file():
        path = _sites_dir() / f"{name_or_path}.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"no site file {name_or_path!r} (nor {path})")
    text = path.read_text()
    try:
        import yaml

        data = yaml.safe_load(text)
    except ImportError:
        data = json.loads(text)
    if not isinstance(data, dict):
        raise TypeError(f"{path}: expected a mapping at the top level")
    return data.get("name", path.stem), data


def expected_env(site: Mapping) -> dict:
    """The runtime variables of a site: ``runtime.env``, else ``runtime_env`` or ``env``."""
    runtime = site.get("runtime")
    if isinstance(runtime, Mapping) and isinstance(runtime.get("env"), Mapping):
        return dict(runtime["env"])
    for key in ("runtime_env", "env"):
        if isinstance(site.get(key), Mapping):
            return dict(site[key])
    return {}


# --- putting it together ---------------------------------------------------


@dataclass
class Inputs:
    """Everything the checks look at, gathered once (or built by a test)."""

    torch: TorchInfo
    env: Mapping[str, str]
    runner: Runner
    interfaces: list[str]
    torch_ldd: str = ""
    nccl_log: str | None = None
    site: Mapping | None = None
    site_name: str = "site"


def torch_ldd(info: TorchInfo, runner: Runner) -> str:
    if not info.lib_dir:
        return ""
    result = runner(["ldd", str(Path(info.lib_dir) / "libtorch_cpu.so")])
    return result.stdout if result is not None else ""


def gather(site: str | None = None, nccl_log: str | None = None, probe_nccl: bool = True,
           runner: Runner = run_command) -> Inputs:
    """Collect the inputs from this process and machine."""
    info = probe_torch()
    env = dict(os.environ)
    inputs = Inputs(torch=info, env=env, runner=runner, interfaces=local_interfaces(),
                    torch_ldd=torch_ldd(info, runner))
    if site:
        inputs.site_name, inputs.site = load_site(site)
    if nccl_log is not None:
        inputs.nccl_log = Path(nccl_log).read_text(errors="replace")
    elif probe_nccl and info.nccl and info.gpu_count:
        inputs.nccl_log = probe_nccl_log(runner, env)
    return inputs


def run_checks(inputs: Inputs) -> list[Check]:
    info, env = inputs.torch, inputs.env
    mpi = identify_mpi(inputs.runner, env, inputs.torch_ldd)
    return [
        check_torch(info),
        check_backend_mpi(info),
        check_backend_nccl(info),
        check_backend_gloo(info),
        check_nccl_version(info),
        check_gpu(info),
        check_mpi_implementation(mpi),
        check_openmpi_cuda_aware(mpi, inputs.runner, info.gpu_count),
        check_cray_gpu_support(mpi, env, inputs.torch_ldd),
        check_nccl_env(env),
        check_socket_ifname(env, inputs.interfaces),
        check_nccl_network(inputs.nccl_log, on_slingshot(inputs.site, inputs.interfaces)),
        check_nccl_interfaces(inputs.nccl_log),
        check_site_env(expected_env(inputs.site) if inputs.site is not None else None, env,
                       inputs.site_name),
    ]


def format_table(checks: list[Check]) -> str:
    width = max(len(c.name) for c in checks)
    lines = []
    for c in checks:
        lines.append(f"{c.status:<5} {c.name:<{width}}  {c.detail}")
        if c.fix and c.status in (FAIL, WARN):
            lines.append(f"{'':<5} {'':<{width}}  fix: {c.fix}")
    counts = {s: sum(c.status == s for c in checks) for s in (PASS, WARN, FAIL, SKIP)}
    lines.append(", ".join(f"{n} {s}" for s, n in counts.items()))
    return "\n".join(lines)


def to_json(checks: list[Check]) -> str:
    return json.dumps({"ok": exit_status(checks) == 0,
                       "checks": [asdict(c) for c in checks]}, indent=2)


def exit_status(checks: list[Check]) -> int:
    return 1 if any(c.status == FAIL for c in checks) else 0
