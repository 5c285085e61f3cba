"""NCCL's network: the interfaces it picks and what its ``NCCL_DEBUG=INFO`` log says.

A ``NCCL_SOCKET_IFNAME`` that selects nothing fails with "unhandled system
error"; a bootstrap or socket interface that no other node reaches (loopback, a
bridge with the same address on every node) hangs or fails a multi-node job;
sockets where the fabric's plugin should run are about 20x slower on Slingshot.
Only combinations known to fail are FAIL; what is merely untested is a WARN.
(Which plugin a job loads: :mod:`torchmpi.doctor.nccl`.)
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check

#: The NCCL_DEBUG_SUBSYS the doctor's probe, the ReFrame network check and every
#: "rerun with" advice use.  BOOTSTRAP because from NCCL 2.23 the "Bootstrap : Using
#: <if>" line is logged under it, not INIT (src/bootstrap.cc at v2.23.4-1:119; INIT at
#: v2.22.3-1:56): without it the bootstrap interface is not in the log.  The keyword
#: is read from 2.21.5 (src/debug.cc at v2.21.5-1:82); older releases skip unknown
#: keywords (src/debug.cc at v2.20.5-1:85, "if (mask)") and log the line under INIT.
NCCL_DEBUG_SUBSYS = "INIT,BOOTSTRAP,NET"
#: NCCL_NET names no network NCCL initialized: NCCL up to 2.26 logs
#: "Error: network %s not found." (src/plugin/net.cc at v2.26.6-1:232, src/net.cc at
#: v2.21.5-1:579); 2.27 rewrote the loader and logs this line, without the name
#: (src/plugin/net.cc at v2.27.7-1:278, v2.29.2-1:402).
NO_NET_PLUGIN = "Failed to initialize any NET plugin"


def not_found_words(net: str) -> str:
    """NCCL's error for an ``NCCL_NET`` it does not find, in both releases' words."""
    return f"'Error: network {net} not found' (NCCL <= 2.26) or '{NO_NET_PLUGIN}' (2.27 on)"

# --- interfaces --------------------------------------------------------------


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
                     + socket_exclude())
    return Check(name, PASS, f"NCCL_SOCKET_IFNAME={spec} selects {', '.join(chosen)}")


def local_interfaces() -> list[str]:
    try:
        return [name for _, name in socket.if_nameindex()]
    except OSError:
        return []


#: Interfaces that exist with the same address on every node, or only locally.
_BAD_IFACES = (("lo", "loopback"), ("docker", "docker bridge"), ("virbr", "libvirt bridge"),
               ("lxcbr", "LXC bridge"), ("cni", "container bridge"),
               ("podman", "container bridge"), ("veth", "container link"), ("br", "bridge"))


def socket_exclude() -> str:
    """``NCCL_SOCKET_IFNAME`` value that keeps NCCL off every interface of
    ``_BAD_IFACES`` (``^`` excludes by prefix: NCCL user guide, "Environment
    Variables").  The one home of the rule: the doctor's checks and fixes use
    it, and a site file that excludes interfaces states this value
    (``sites/generic-ib.yaml``; tests/test_doctor_network.py holds them equal)."""
    return "^" + ",".join(prefix for prefix, _ in _BAD_IFACES)


def bad_interface(iface: str) -> str | None:
    """Why NCCL must not use ``iface`` between nodes, or None when it may."""
    for prefix, why in _BAD_IFACES:
        if iface == prefix or (prefix != "lo" and iface.startswith(prefix)):
            return why
    return None


@dataclass
class NcclLog:
    """What an ``NCCL_DEBUG=INFO`` log says about network selection."""

    network: str | None = None  # "Using network X"
    plugin_loaded: str | None = None
    plugin_missing: str | None = None  # "Could not find: ..." / "No plugin found ..."
    network_not_found: str | None = None  # "network X not found" (NCCL <= 2.26)
    no_net_plugin: bool = False  # NO_NET_PLUGIN (NCCL >= 2.27): the name is NCCL_NET's
    bootstrap: list[str] = field(default_factory=list)  # "Bootstrap : Using <if>:..."
    socket_interfaces: list[str] = field(default_factory=list)  # "NET/Socket : Using [0]<if>"
    system_error: bool = False
    provider: str | None = None  # aws-ofi-nccl's "Selected provider is <p>"


#: aws-ofi-nccl's provider line: "NET/OFI Selected Provider is %s (found %d nics)" through
#: v1.13.x (src/nccl_ofi_net.c at v1.6.0, v1.13.0-aws), "NET/OFI Selected provider is %s,
#: fabric is %s (found %d nics)" from v1.14.0 (commit 06e8db33; src/nccl_ofi_net.cpp).
_PROVIDER_LINE = re.compile(r"NET/OFI Selected [Pp]rovider is ([^,\s]+)")


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
        elif NO_NET_PLUGIN in line:
            log.no_net_plugin = True
        if m := re.search(r"Bootstrap\s*:\s*Using\s+(?:\[\d+\])?([^:\s<]+):", line):
            log.bootstrap.append(m.group(1))
        if "NET/Socket" in line and "Using" in line:
            log.socket_interfaces += re.findall(r"\[\d+\]([^:\s<]+):", line)
        if "unhandled system error" in line:
            log.system_error = True
        if m := _PROVIDER_LINE.search(line):
            log.provider = m.group(1)
    log.bootstrap = list(dict.fromkeys(log.bootstrap))
    log.socket_interfaces = list(dict.fromkeys(log.socket_interfaces))
    return log


_LOG_PLUGIN_NETS = ("AWS Libfabric", "Libfabric", "OFI")


def check_nccl_network(log_text: str | None, slingshot: bool, nodes: int | None = None,
                       net: str | None = None) -> Check:
    """Which network NCCL chose; sockets on Slingshot are ~20x slower than the plugin.

    ``net`` is the job's ``NCCL_NET``: NCCL 2.27 and later do not name it when it
    matches no network (:data:`NO_NET_PLUGIN`).
    """
    name = "nccl.network"
    if log_text is None:
        return Check(name, SKIP, "no NCCL_DEBUG=INFO log (no GPU, or pass --nccl-log FILE)")
    log = parse_nccl_log(log_text)
    if log.network_not_found or log.no_net_plugin:
        why = f" after '{log.plugin_missing}'" if log.plugin_missing else ""
        if log.network_not_found:
            what = f"network {log.network_not_found} not found"
        else:
            asked = f"NCCL_NET={net}: " if net else ""
            what = f"{asked}NCCL found no network it could use ('{NO_NET_PLUGIN}')"
        return Check(name, FAIL, what + why,
                     "put the aws-ofi-nccl lib dir on LD_LIBRARY_PATH; with NCCL_NET_PLUGIN "
                     "set, its libnccl-net-<name>.so must exist (plugin >= 1.15) or unset it")
    if log.system_error:
        return Check(name, FAIL, "NCCL reported 'unhandled system error'",
                     "check NCCL_SOCKET_IFNAME names a real interface (see nccl.socket_ifname)")
    if log.network is None:
        return Check(name, WARN, "the log does not say which network NCCL used",
                     f"rerun with NCCL_DEBUG=INFO (NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS})")
    if log.network == "Socket":
        missing = f" ({log.plugin_missing})" if log.plugin_missing else ""
        if slingshot and nodes != 1:
            return Check(name, FAIL, f"NCCL fell back to sockets on Slingshot{missing}",
                         "load aws-ofi-nccl (libnccl-net.so on LD_LIBRARY_PATH) and set "
                         "NCCL_NET='AWS Libfabric' for multi-node jobs")
        return Check(name, WARN, f"NCCL uses TCP sockets{missing}",
                     "fine for one node or Ethernet; on IB/Slingshot load the network plugin")
    if log.network in _LOG_PLUGIN_NETS or log.plugin_loaded:
        provider = f", libfabric provider {log.provider}" if log.provider else ""
        via = f"NCCL uses network {log.network} (plugin {log.plugin_loaded or 'loaded'}{provider})"
        if slingshot and log.provider and log.provider != "cxi":
            return Check(name, FAIL,
                         f"{via}: on Slingshot only the cxi provider drives the NIC's "
                         f"RDMA, {log.provider} does not",
                         "put the site's libfabric (the one with the cxi provider, e.g. "
                         "/opt/cray/libfabric) first on LD_LIBRARY_PATH; FI_PROVIDER=cxi "
                         "makes a libfabric without cxi fail instead of falling back")
        if slingshot and not log.provider:
            return Check(name, WARN,
                         f"{via}; the log does not say which libfabric provider the plugin "
                         "selected",
                         f"rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS} "
                         "and look for 'NET/OFI Selected provider is cxi'")
        return Check(name, PASS, via)
    if slingshot:
        return Check(name, WARN, f"NCCL uses network {log.network}, not the OFI plugin",
                     "on Slingshot set NCCL_NET='AWS Libfabric'")
    return Check(name, PASS, f"NCCL uses network {log.network}")


def check_nccl_interfaces(log_text: str | None, nodes: int | None = None) -> Check:
    """Bootstrap (always) and socket data (in socket mode) must not use lo or a bridge.

    A bridge (docker0, virbr0, br-*) has the same address on every node, so peers
    connect to themselves: FAIL unless the job is known to be single-node.
    Loopback reaches no other node: FAIL when the job is known to span nodes.
    A log without the bootstrap line proves nothing about it (NCCL >= 2.23 files
    the line under BOOTSTRAP, see :data:`NCCL_DEBUG_SUBSYS`): a WARN, not a PASS.
    """
    name = "nccl.interfaces"
    if log_text is None:
        return Check(name, SKIP, "no NCCL_DEBUG=INFO log")
    log = parse_nccl_log(log_text)
    socket_mode = log.network == "Socket" or (log.network is None and log.socket_interfaces)
    used = [("bootstrap", i) for i in log.bootstrap]
    used += [("data", i) for i in log.socket_interfaces] if socket_mode else []
    fix = ("set NCCL_SOCKET_IFNAME to the fabric interface (e.g. hsn or ib0) "
           f"or exclude the non-fabric ones ({socket_exclude()})")
    bad = [(role, i, bad_interface(i)) for role, i in used if bad_interface(i)]
    if bad:
        text = "; ".join(f"{role} on {i} ({why})" for role, i, why in bad)
        bridged = any(why != "loopback" for _, _, why in bad)
        fails = (bridged and nodes != 1) or (nodes or 0) > 1
        return Check(name, FAIL if fails else WARN,
                     f"NCCL {text}: no other node reaches it", fix)
    if not log.bootstrap:
        seen = f" (data on {', '.join(i for _, i in used)})" if used else ""
        return Check(name, WARN,
                     f"no bootstrap interface in the log{seen}: it cannot show whether "
                     "the bootstrap runs on lo or a bridge (NCCL >= 2.23 logs "
                     "'Bootstrap: Using <if>' only under the BOOTSTRAP subsystem)",
                     f"rerun with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS={NCCL_DEBUG_SUBSYS}")
    roles = ", ".join(f"{role} {i}" for role, i in used)
    return Check(name, PASS, f"NCCL uses {roles}")


def on_slingshot(site: Mapping | None, interfaces: Iterable[str]) -> bool:
    """Slingshot when the site says so or the node has hsn* interfaces."""
    if site and site.get("fabric") == "slingshot":
        return True
    return any(i.startswith("hsn") for i in interfaces)
