"""torchmpi doctor: NCCL plugin rules by version, interfaces, and the network in NCCL logs.

Plugin facts (aws-ofi-nccl recipe, docs/design.md, fixtures/aws_ofi_nccl_net_names.json):
<= 1.12 answers only to "AWS Libfabric"; from 1.13.0 also to "OFI"/"Libfabric";
libnccl-net-ofi.so (NCCL_NET_PLUGIN=ofi) from 1.15.0.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from support.doctor_inputs import mapped_at
from torchmpi.doctor import nccl
from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN

FIXTURES = Path(__file__).parent / "fixtures"
LOGS = FIXTURES / "nccl-logs"
PREFIX = "/sw/spack/linux-zen3/aws-ofi-nccl-{v}-abcdef/lib"


def log(name: str) -> str:
    return (LOGS / name).read_text()


def plugin_env(version: str, *libs: str, **env: str) -> tuple[dict, nccl.PluginInfo]:
    """An environment with the plugin's lib dir on LD_LIBRARY_PATH holding ``libs``."""
    lib_dir = PREFIX.format(v=version)
    env = {"LD_LIBRARY_PATH": f"{lib_dir}:/usr/local/lib", **env}
    return env, nccl.plugin_from_maps(mapped_at(lib_dir, *libs))


def test_net_name_table_matches_the_recorded_plugin_sources():
    """The doctor's table and the fixture read from the plugin's tags agree."""
    ranges = json.loads((FIXTURES / "aws_ofi_nccl_net_names.json").read_text())["ranges"]
    for entry in ranges:
        version = tuple(int(x) for x in entry["from"].split("."))
        assert set(nccl.accepted_net_names(version)) == set(entry["accepted"]), entry


def test_plugin_reads_version_from_the_install_prefix():
    _, plugin = plugin_env("1.19.0", "libnccl-net.so", "libnccl-net-ofi.so")
    assert plugin.version == (1, 19, 0)
    assert sorted(plugin.libraries) == ["libnccl-net-ofi.so", "libnccl-net.so"]


def test_plugin_reads_version_from_the_log():
    plugin = nccl.plugin_from_maps({}, log("plugin-ofi.log"))
    assert plugin.version == (1, 19, 0) and plugin.version_source == "NCCL log"


@pytest.mark.parametrize(("version", "libs", "env", "status", "words"), [
    # NCCL_NET_PLUGIN with NCCL_NET is fine once libnccl-net-ofi.so exists (>= 1.15).
    ("1.19.0", ("libnccl-net.so", "libnccl-net-ofi.so"),
     {"NCCL_NET": "OFI", "NCCL_NET_PLUGIN": "ofi"}, PASS, "NCCL_NET_PLUGIN=ofi"),
    ("1.19.0", ("libnccl-net.so", "libnccl-net-ofi.so"),
     {"NCCL_NET": "AWS Libfabric", "NCCL_NET_PLUGIN": "ofi"}, PASS, "aws-ofi-nccl 1.19.0"),
    # ... and fails where that library does not exist (before 1.15: plugin-clash.log).
    ("1.6.0", ("libnccl-net.so",), {"NCCL_NET": "AWS Libfabric", "NCCL_NET_PLUGIN": "ofi"},
     FAIL, "predates libnccl-net-ofi.so"),
    # Names by version: "OFI" only from 1.13.0.
    ("1.6.0", ("libnccl-net.so",), {"NCCL_NET": "OFI"}, FAIL, "registers only as AWS Libfabric"),
    ("1.6.0", ("libnccl-net.so",), {"NCCL_NET": "AWS Libfabric"}, PASS, "1.6.0"),
    ("1.17.2", ("libnccl-net.so", "libnccl-net-ofi.so"), {"NCCL_NET": "OFI"}, PASS, "1.17.2"),
    # The Slingshot shutdown-ordering bug, 1.14.0-1.17.1.
    ("1.16.0", ("libnccl-net.so", "libnccl-net-ofi.so"), {"NCCL_NET": "AWS Libfabric"},
     FAIL, "shutdown-ordering"),
    ("1.17.1", ("libnccl-net.so", "libnccl-net-ofi.so"), {}, FAIL, "1.17.2"),
    # No plugin at all while NCCL_NET insists on one.
    ("1.19.0", (), {"NCCL_NET": "AWS Libfabric"}, FAIL, "network AWS Libfabric not found"),
])
def test_plugin_rules_by_version(version, libs, env, status, words):
    env, plugin = plugin_env(version, *libs, **env)
    check = nccl.check_nccl_plugin(env, plugin, slingshot=True, nodes=2)
    assert check.status == status and words in check.detail, check


def test_plugin_version_unknown_and_ofi_name_is_a_warning():
    env = {"NCCL_NET": "OFI", "LD_LIBRARY_PATH": "/opt/plugin/lib"}
    plugin = nccl.plugin_from_maps(mapped_at("/opt/plugin/lib", "libnccl-net.so"))
    assert plugin.version is None
    assert nccl.check_nccl_plugin(env, plugin, True, 2).status == WARN


def test_single_node_job_should_not_set_nccl_net():
    """HPE shs-ccl-docs ccl_env.sh: do not set NCCL_NET on single-node Slurm runs."""
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", NCCL_NET="AWS Libfabric")
    check = nccl.check_nccl_plugin(env, plugin, slingshot=True, nodes=1)
    assert check.status == WARN and "single-node" in check.detail


def test_no_plugin_on_slingshot_fails_unless_the_job_is_known_to_be_one_node():
    assert nccl.check_nccl_plugin({}, nccl.PluginInfo(), True, 2).status == FAIL
    assert nccl.check_nccl_plugin({}, nccl.PluginInfo(), True, 1).status == WARN
    # An unknown node count (no node-count variable, no readable nodefile) is not one
    # node: as nccl.network does, only a job known to be single-node is let off with a WARN.
    assert nccl.check_nccl_plugin({}, nccl.PluginInfo(), True, None).status == FAIL
    assert nccl.check_nccl_plugin({}, nccl.PluginInfo(), False, 2).status == PASS
    assert nccl.check_nccl_plugin({}, nccl.PluginInfo(), True, 2, has_nccl=False).status == SKIP


# --- NCCL_SOCKET_IFNAME ----------------------------------------------------------------


@pytest.mark.parametrize(("spec", "status"), [
    ("hsn", PASS), ("hsn0,hsn1", PASS), ("^docker0,lo", PASS), ("=hsn0", PASS),
    ("eth7", FAIL), ("=hsn", FAIL), ("ib", FAIL),
])
def test_socket_ifname(spec, status):
    interfaces = ["lo", "hsn0", "hsn1", "docker0"]
    check = nccl.check_socket_ifname({"NCCL_SOCKET_IFNAME": spec}, interfaces)
    assert check.status == status, check.detail


def test_socket_ifname_unset_passes():
    assert nccl.check_socket_ifname({}, ["lo"]).status == PASS


# --- NCCL logs: network ---------------------------------------------------------------


@pytest.mark.parametrize(("name", "slingshot", "nodes", "status", "words"), [
    ("plugin-ofi.log", True, None, PASS, "AWS Libfabric"),
    ("ib.log", False, None, PASS, "IB"),
    ("socket-fallback-hsn.log", True, None, FAIL, "sockets on Slingshot"),
    ("socket-fallback-hsn.log", True, 1, WARN, "TCP sockets"),  # one node: no network
    ("socket-fallback-hsn.log", False, None, WARN, "No plugin found"),
    ("plugin-clash.log", True, None, FAIL, "Could not find: ofi libnccl-net-ofi.so"),
    ("unhandled-system-error.log", False, None, FAIL, "unhandled system error"),
    ("no-network-line.log", False, None, WARN, "does not say"),
])
def test_nccl_network_from_log(name, slingshot, nodes, status, words):
    check = nccl.check_nccl_network(log(name), slingshot, nodes)
    assert check.status == status and words in check.detail, check


@pytest.mark.parametrize(("name", "slingshot", "status", "words"), [
    # The plugin loaded, but libfabric picked tcp: the job runs over TCP/IP on Slingshot.
    ("plugin-provider-tcp.log", True, FAIL, "provider tcp"),
    ("plugin-provider-tcp.log", False, PASS, "provider tcp"),
    ("plugin-ofi.log", True, PASS, "provider cxi"),
    # v1.6.0 spells it "Selected Provider is" (NCAR's pair).
    ("plugin-v1.6.0-cxi.log", True, PASS, "provider cxi"),
    ("plugin-v1.6.0-sockets.log", True, FAIL, "provider sockets"),
    # A log without the line cannot prove the path on Slingshot.
    ("plugin-no-provider-line.log", True, WARN, "does not say which libfabric provider"),
])
def test_nccl_network_proves_the_cxi_provider(name, slingshot, status, words):
    check = nccl.check_nccl_network(log(name), slingshot, 2)
    assert check.status == status and words in check.detail, check


def test_plugin_version_from_the_v1_6_0_log_line():
    plugin = nccl.plugin_from_maps({}, log("plugin-v1.6.0-cxi.log"))
    assert plugin.version == (1, 6, 0) and plugin.version_source == "NCCL log"


def test_nccl_network_without_log_skips():
    assert nccl.check_nccl_network(None, True).status == SKIP


# --- NCCL logs: interfaces --------------------------------------------------------------


def test_parse_bootstrap_and_socket_interfaces():
    parsed = nccl.parse_nccl_log(log("socket-fallback-hsn.log"))
    assert parsed.bootstrap == ["hsn0"] and parsed.socket_interfaces == ["hsn0", "hsn1"]
    parsed = nccl.parse_nccl_log(log("ib.log"))
    assert parsed.bootstrap == ["ib0"] and parsed.socket_interfaces == []
    assert nccl.parse_nccl_log("x [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>\n"
                               ).bootstrap == ["eth0"]


@pytest.mark.parametrize(("iface", "why"), [
    ("lo", "loopback"), ("docker0", "docker bridge"), ("virbr0", "libvirt bridge"),
    ("br-5f1e2c", "bridge"), ("br0", "bridge"), ("cni0", "container bridge"),
    ("hsn0", None), ("ib0", None), ("eth0", None), ("lo0x", None),
])
def test_bad_interfaces(iface, why):
    assert nccl.bad_interface(iface) == why


@pytest.mark.parametrize(("name", "nodes", "status", "words"), [
    ("plugin-ofi.log", None, PASS, "bootstrap hsn0"),
    ("socket-fallback-hsn.log", None, PASS, "data hsn1"),
    ("docker0.log", None, FAIL, "bootstrap on docker0 (docker bridge)"),
    ("docker0.log", 1, WARN, "docker0"),  # a single-node job reaches itself
    ("loopback.log", None, WARN, "loopback"),
    ("loopback.log", 2, FAIL, "loopback"),
    # plugin mode: data goes through the plugin, but bootstrap still uses a socket
    ("plugin-bootstrap-virbr0.log", None, FAIL, "bootstrap on virbr0 (libvirt bridge)"),
    # socket mode: a bridge among the data interfaces
    ("socket-data-bridge.log", None, FAIL, "data on br-5f1e2c (bridge)"),
])
def test_nccl_interfaces_from_log(name, nodes, status, words):
    check = nccl.check_nccl_interfaces(log(name), nodes)
    assert check.status == status and words in check.detail, check


def test_slingshot_detection():
    assert nccl.on_slingshot({"fabric": "slingshot"}, ["eth0"])
    assert nccl.on_slingshot(None, ["lo", "hsn0"])
    assert not nccl.on_slingshot({"fabric": "infiniband"}, ["lo", "ib0"])


def test_generic_ib_excludes_every_interface_the_doctor_rejects() -> None:
    """One rule: generic-ib's NCCL_SOCKET_IFNAME is the doctor's exclusion list, so
    NCCL there never picks a bridge or container link (the old ^docker0,lo left
    virbr0, veth*, podman0 ... to NCCL)."""
    from torchmpi import runtime
    from torchmpi import site as sitemod

    value = runtime.environment(sitemod.load("generic-ib").data)["NCCL_SOCKET_IFNAME"]
    assert value == nccl.socket_exclude()
    interfaces = ["lo", "docker0", "virbr0", "veth1a2b", "podman0", "cni0", "br-5f1e",
                  "lxcbr0", "ib0", "eno1"]
    check = nccl.check_socket_ifname({"NCCL_SOCKET_IFNAME": value}, interfaces)
    assert check.status == PASS and check.detail.endswith("selects ib0, eno1"), check
    assert [i for i in interfaces if not nccl.bad_interface(i)] == ["ib0", "eno1"]
