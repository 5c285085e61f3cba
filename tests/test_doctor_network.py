"""torchmpi doctor: the interfaces NCCL picks and the network its logs show it chose."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchmpi.doctor import network
from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN

LOGS = Path(__file__).parent / "fixtures" / "nccl-logs"


def log(name: str) -> str:
    return (LOGS / name).read_text()


# --- NCCL_SOCKET_IFNAME ----------------------------------------------------------------


@pytest.mark.parametrize(("spec", "status"), [
    ("hsn", PASS), ("hsn0,hsn1", PASS), ("^docker0,lo", PASS), ("=hsn0", PASS),
    ("eth7", FAIL), ("=hsn", FAIL), ("ib", FAIL),
])
def test_socket_ifname(spec, status):
    interfaces = ["lo", "hsn0", "hsn1", "docker0"]
    check = network.check_socket_ifname({"NCCL_SOCKET_IFNAME": spec}, interfaces)
    assert check.status == status, check.detail


def test_socket_ifname_unset_passes():
    assert network.check_socket_ifname({}, ["lo"]).status == PASS


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
    check = network.check_nccl_network(log(name), slingshot, nodes)
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
    check = network.check_nccl_network(log(name), slingshot, 2)
    assert check.status == status and words in check.detail, check


def test_nccl_network_without_log_skips():
    assert network.check_nccl_network(None, True).status == SKIP


@pytest.mark.parametrize(("name", "net"), [
    ("plugin-clash.log", "AWS Libfabric"),  # up to NCCL 2.26: "Error: network %s not found."
    ("net-not-found-2.27.log", "AWS Libfabric"),  # 2.27 on: "Failed to initialize any ..."
    ("net-not-found-2.27.log", None),  # NCCL_NET not known to the check
])
def test_a_network_nccl_does_not_find_fails_in_both_spellings(name, net):
    """NCCL 2.27 rewrote the net plugin loader (src/plugin/net.cc at v2.27.3-1): a
    NCCL_NET that names no initialized network no longer logs "network %s not found"
    but "Failed to initialize any NET plugin", without the name; the name is then
    NCCL_NET's."""
    check = network.check_nccl_network(log(name), True, 2, net=net)
    assert check.status == FAIL, check
    if net:
        assert f"network {net} not found" in check.detail or f"NCCL_NET={net}" in check.detail
    if name == "net-not-found-2.27.log":
        assert "Failed to initialize any NET plugin" in check.detail, check
        assert "does not say" not in check.detail, check


def test_the_log_reader_knows_both_not_found_lines():
    old = network.parse_nccl_log(log("plugin-clash.log"))
    new = network.parse_nccl_log(log("net-not-found-2.27.log"))
    assert old.network_not_found == "AWS Libfabric" and not old.no_net_plugin
    assert new.no_net_plugin and new.network is None and new.bootstrap == ["hsn0"]


# --- NCCL logs: interfaces --------------------------------------------------------------


def test_parse_bootstrap_and_socket_interfaces():
    parsed = network.parse_nccl_log(log("socket-fallback-hsn.log"))
    assert parsed.bootstrap == ["hsn0"] and parsed.socket_interfaces == ["hsn0", "hsn1"]
    parsed = network.parse_nccl_log(log("ib.log"))
    assert parsed.bootstrap == ["ib0"] and parsed.socket_interfaces == []
    assert network.parse_nccl_log("x [0] NCCL INFO Bootstrap: Using eth0:10.0.0.1<0>\n"
                               ).bootstrap == ["eth0"]


@pytest.mark.parametrize(("iface", "why"), [
    ("lo", "loopback"), ("docker0", "docker bridge"), ("virbr0", "libvirt bridge"),
    ("br-5f1e2c", "bridge"), ("br0", "bridge"), ("cni0", "container bridge"),
    ("hsn0", None), ("ib0", None), ("eth0", None), ("lo0x", None),
])
def test_bad_interfaces(iface, why):
    assert network.bad_interface(iface) == why


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
    check = network.check_nccl_interfaces(log(name), nodes)
    assert check.status == status and words in check.detail, check


@pytest.mark.parametrize("name", ["subsys-init-net-2.27.log", "no-network-line.log"])
def test_a_log_without_the_bootstrap_line_cannot_pass_the_interfaces(name):
    """From NCCL 2.23 "Bootstrap : Using <if>" is logged under the BOOTSTRAP subsystem
    (src/bootstrap.cc at v2.23.4-1: INFO(NCCL_BOOTSTRAP, ...)), so a log taken with
    NCCL_DEBUG_SUBSYS=INIT,NET has no bootstrap line even when the bootstrap runs on lo
    or a bridge: the check says it cannot tell, and how to get the line."""
    check = network.check_nccl_interfaces(log(name), 2)
    assert check.status == WARN, check
    assert "no bootstrap" in check.detail and network.NCCL_DEBUG_SUBSYS in check.fix, check


def test_the_subsystems_the_doctor_asks_for_include_bootstrap():
    """INIT (bootstrap line up to 2.22, plugin lines), BOOTSTRAP (bootstrap line from
    2.23; the keyword is read since 2.21.5's src/debug.cc, and unknown keywords are
    ignored by older releases) and NET (socket and plugin lines)."""
    assert network.NCCL_DEBUG_SUBSYS.split(",") == ["INIT", "BOOTSTRAP", "NET"]
    for name, slingshot in (("no-network-line.log", False), ("plugin-no-provider-line.log", True)):
        check = network.check_nccl_network(log(name), slingshot, 2)
        assert f"NCCL_DEBUG_SUBSYS={network.NCCL_DEBUG_SUBSYS}" in check.fix, check


def test_the_nccl_probe_logs_with_the_bootstrap_subsystem(monkeypatch):
    from torchmpi.doctor import gpu, probe

    seen: dict[str, dict] = {}

    def fake(runner, env, backend, device, **extra):
        seen[backend] = extra

    monkeypatch.setattr(probe, "run_probe", fake)
    info = gpu.TorchInfo(nccl=True, gpu_count=1)
    probe.run_all(info, None, {})
    assert seen["nccl"]["NCCL_DEBUG_SUBSYS"] == network.NCCL_DEBUG_SUBSYS, seen


def test_slingshot_detection():
    assert network.on_slingshot({"fabric": "slingshot"}, ["eth0"])
    assert network.on_slingshot(None, ["lo", "hsn0"])
    assert not network.on_slingshot({"fabric": "infiniband"}, ["lo", "ib0"])


def test_generic_ib_excludes_every_interface_the_doctor_rejects() -> None:
    """One rule: generic-ib's NCCL_SOCKET_IFNAME is the doctor's exclusion list, so
    NCCL there never picks a bridge or container link (the old ^docker0,lo left
    virbr0, veth*, podman0 ... to NCCL)."""
    from torchmpi import runtime
    from torchmpi import site as sitemod

    value = runtime.environment(sitemod.load("generic-ib").data)["NCCL_SOCKET_IFNAME"]
    assert value == network.socket_exclude()
    interfaces = ["lo", "docker0", "virbr0", "veth1a2b", "podman0", "cni0", "br-5f1e",
                  "lxcbr0", "ib0", "eno1"]
    check = network.check_socket_ifname({"NCCL_SOCKET_IFNAME": value}, interfaces)
    assert check.status == PASS and check.detail.endswith("selects ib0, eno1"), check
    assert [i for i in interfaces if not network.bad_interface(i)] == ["ib0", "eno1"]


def test_the_report_hands_the_checks_nccl_net_and_torchs_nccl_version():
    """The checks can name NCCL_NET in a 2.27 log's failure and read NCCL_NET_PLUGIN by
    torch's NCCL only if the report passes them on."""
    from support.doctor_inputs import mapped_at
    from torchmpi import doctor
    from torchmpi.doctor import gpu

    info = gpu.TorchInfo(version="x", nccl=True, nccl_version="2.26.6", cuda_build="12.8",
                         gpu_count=1)
    env = {"NCCL_NET": "AWS Libfabric", "NCCL_NET_PLUGIN": "ofi,aws", "SLURM_JOB_NUM_NODES": "2"}
    inputs = doctor.Inputs(torch=info, env=env, runner=lambda *args, **kwargs: None,
                           interfaces=["lo", "hsn0"], nccl_log=log("net-not-found-2.27.log"),
                           plugin_maps=mapped_at("/sw/aws-ofi-nccl-1.19.0-abc/lib",
                                                 "libnccl-net.so", "libnccl-net-ofi.so"))
    checks = {c.name: c for c in doctor.run_checks(inputs)}
    assert "NCCL_NET=AWS Libfabric" in checks["nccl.network"].detail, checks["nccl.network"]
    assert "reads it as one library name" in checks["nccl.plugin"].detail, checks["nccl.plugin"]


def test_troubleshooting_quotes_the_nccl_27_and_plugin_list_messages():
    """The page a FAIL or WARN sends the user to quotes it (as test_doctor's catalogue
    does for the older messages): the 2.27 not-found line, the missing bootstrap line,
    and NCCL_NET_PLUGIN lists and "none"."""
    from support.doctor_inputs import mapped_at
    from torchmpi import paths
    from torchmpi.doctor import nccl

    lib_dir = "/sw/aws-ofi-nccl-1.19.0-abc/lib"
    both = nccl.plugin_from_maps(mapped_at(lib_dir, "libnccl-net.so", "libnccl-net-ofi.so"))
    one = nccl.plugin_from_maps(mapped_at(lib_dir, "libnccl-net.so"))
    checks = [
        nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": "x,y"}, one, True, 2),
        nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": "ofi,aws"}, both, True, 2,
                               nccl_version="2.26.6"),
        nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": "none"}, one, True, 2),
        nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": "none", "NCCL_NET": "AWS Libfabric"}, one,
                               True, 2),
        network.check_nccl_network(log("net-not-found-2.27.log"), True, 2, "AWS Libfabric"),
        network.check_nccl_interfaces(log("subsys-init-net-2.27.log"), 2),
    ]
    text = (paths.root() / "docs" / "troubleshooting.md").read_text()
    for check in checks:
        assert check.status in (FAIL, WARN), check
        assert f"`{check.status} {check.name}  {check.detail}`" in text, check
        assert check.name == "nccl.network" or f"`{check.fix}`" in text, check
