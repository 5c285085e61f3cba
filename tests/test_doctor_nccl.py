"""torchmpi doctor: NCCL plugin rules by version (interfaces and logs: test_doctor_network.py).

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
    return env, nccl.plugin_from_maps(mapped_at(lib_dir, *libs, env=env))


def test_net_name_table_matches_the_recorded_plugin_sources():
    """The doctor's table and the fixture read from the plugin's tags agree."""
    ranges = json.loads((FIXTURES / "aws_ofi_nccl_net_names.json").read_text())["ranges"]
    for entry in ranges:
        version = tuple(int(x) for x in entry["from"].split("."))
        assert set(nccl.accepted_net_names(version)) == set(entry["accepted"]), entry


def test_plugin_reads_version_from_the_install_prefix():
    _, plugin = plugin_env("1.19.0", "libnccl-net.so", "libnccl-net-ofi.so")
    assert plugin.version == (1, 19, 0)
    assert sorted(plugin.libraries) == ["libnccl-net.so"]  # what NCCL opens, unset
    assert sorted(plugin.unused) == ["libnccl-net-ofi.so"]


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
    # The Slingshot shutdown-ordering bug, 1.16.0-1.17.1.
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


def test_plugin_version_from_the_v1_6_0_log_line():
    plugin = nccl.plugin_from_maps({}, log("plugin-v1.6.0-cxi.log"))
    assert plugin.version == (1, 6, 0) and plugin.version_source == "NCCL log"


# --- verdicts at the edges of the version thresholds ---------------------------------


@pytest.mark.parametrize("version, buggy", [
    ((1, 14, 0), False), ((1, 15, 0), False), ((1, 16, 0), True), ((1, 17, 1), True),
    ((1, 17, 2), False)])
def test_the_slingshot_shutdown_bug_range_includes_both_ends(version, buggy) -> None:
    """1.16.0 through 1.17.1 inclusive: fixed in 1.17.2 (its release notes; b96292b9 in
    src/cm/nccl_ofi_cm_resources.cpp), and src/cm/ first ships in 1.16.0.  1.14.0, which
    CSCS's PyTorch uenv v2.6.0 ships (eth-cscs/cscs-docs@fde5e5f
    docs/software/ml/pytorch.md:769), has no such code and does not FAIL."""
    plugin = nccl.PluginInfo(libraries={"libnccl-net.so": "/sw/lib/libnccl-net.so"},
                             version=version)
    check = nccl.check_nccl_plugin({"NCCL_NET": "AWS Libfabric"}, plugin, True, 2)
    assert ("shutdown-ordering" in check.detail) is buggy, (version, check)
    assert (check.status == FAIL) is buggy, (version, check)


@pytest.mark.parametrize("version, predates", [
    ((1, 14, 9), True), ((1, 15, 0), False), ((1, 16, 0), False)])
def test_only_a_plugin_older_than_1_15_is_said_to_predate_the_ofi_library(
        version, predates) -> None:
    """NCCL_NET_PLUGIN=ofi that does not load: the reason names the release only when
    that release has no libnccl-net-ofi.so (it first ships in 1.15.0)."""
    plugin = nccl.PluginInfo(libraries={"libnccl-net.so": "/sw/lib/libnccl-net.so"},
                             version=version)
    check = nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": "ofi"}, plugin, True, 2)
    assert check.status == FAIL
    assert ("predates libnccl-net-ofi.so" in check.detail) is predates, check.detail


def test_the_first_library_naming_a_release_gives_the_version() -> None:
    """Two plugin libraries from two installs: the one NCCL loads first (libnccl-net.so)
    is the release the job runs, not the last one looked at."""
    maps = {"libnccl-net.so": nccl.Mapped("libnccl-net.so", [
                "/sw/aws-ofi-nccl-1.19.0/lib/libnccl-net.so"]),
            "libnccl-net-ofi.so": nccl.Mapped("libnccl-net-ofi.so", [
                "/sw/aws-ofi-nccl-1.16.0/lib/libnccl-net-ofi.so"])}
    info = nccl.plugin_from_maps(maps)
    assert info.version == (1, 19, 0)
    assert info.version_source == "/sw/aws-ofi-nccl-1.19.0/lib/libnccl-net.so"


@pytest.mark.parametrize("plugin, names", [
    ("", ["libnccl-net.so"]),
    ("ofi", ["libnccl-net-ofi.so"]),
    ("aws", ["libnccl-net-aws.so"]),
    ("libmine.so", ["libmine.so"]),
    ("mine.so", ["mine.so", "libnccl-net-mine.so.so"]),
    ("/opt/p/lib/net", ["/opt/p/lib/net"]),
])
def test_the_libraries_nccl_would_try_for_a_net_plugin_setting(plugin, names) -> None:
    """NCCL tries the name as given, then libnccl-net-<name>.so unless the name is a
    path or a lib*.so name (src/plugin/plugin_open.cc at v2.27.7-1 and v2.29.2-1); a
    bare name no library path holds ("ofi") is not loaded by a child.  Unset, it opens
    libnccl-net.so and nothing else (src/plugin/net.cc at v2.29.2-1, defaultNetPlugin;
    src/net.cc at v2.21.5-1): libnccl-net-ofi.so is loaded only to name the fix."""
    assert nccl.plugin_names({"NCCL_NET_PLUGIN": plugin}) == names
    assert nccl.alternatives({"NCCL_NET_PLUGIN": plugin}) == (
        [] if plugin else ["libnccl-net-ofi.so"])


def test_an_unused_ofi_library_gives_no_version_over_the_opened_one() -> None:
    """The release is read from the library NCCL opens first; an unused one only
    stands in when nothing NCCL opens loads."""
    maps = {"libnccl-net.so": nccl.Mapped("libnccl-net.so", [
                "/sw/aws-ofi-nccl-1.19.0/lib/libnccl-net.so"]),
            "libnccl-net-ofi.so": nccl.Mapped("libnccl-net-ofi.so", [
                "/sw/aws-ofi-nccl-1.16.0/lib/libnccl-net-ofi.so"], opened=False)}
    info = nccl.plugin_from_maps({k: maps[k] for k in reversed(maps)})
    assert info.version == (1, 19, 0) and list(info.libraries) == ["libnccl-net.so"]
    del maps["libnccl-net.so"]
    info = nccl.plugin_from_maps(maps)
    assert info.libraries == {} and info.version == (1, 16, 0)


def test_only_the_ofi_setting_is_said_to_predate_its_library() -> None:
    """An old plugin and NCCL_NET_PLUGIN=aws (no libnccl-net-aws.so): no 'predates',
    which is about the ofi library; the value compared as read from the environment."""
    plugin = nccl.PluginInfo(libraries={"libnccl-net.so": "/sw/lib/libnccl-net.so"},
                             version=(1, 14, 0))
    for wanted in ("aws", "zzz", "".join(["o", "fi"])):  # noqa: FLY002 (not interned)
        check = nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": wanted}, plugin, False, 2)
        assert check.status == FAIL
        assert ("predates" in check.detail) is (wanted == "ofi"), (wanted, check.detail)


# --- NCCL_NET and NCCL_NET_PLUGIN as NCCL reads them ----------------------------------


@pytest.mark.parametrize("net", ["ofi", "Ofi", "aws libfabric", "AWS LIBFABRIC"])
def test_nccl_net_is_compared_without_case(net):
    """NCCL matches NCCL_NET with strcasecmp (src/plugin/net.cc at v2.27.7-1:166, and
    src/net.cc at v2.21.5-1:560), and so does the plugin when it renames itself
    (aws-ofi-nccl v1.13.0-aws src/nccl_ofi_interface_nvidia.c:333-342)."""
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", NCCL_NET=net)
    check = nccl.check_nccl_plugin(env, plugin, slingshot=True, nodes=2)
    assert check.status == PASS, check
    env, plugin = plugin_env("1.19.0", NCCL_NET=net)  # ... and its absence is still seen
    check = nccl.check_nccl_plugin(env, plugin, slingshot=True, nodes=2)
    assert check.status == FAIL and "not found" in check.detail, check


def test_the_old_plugin_answers_to_its_one_name_in_any_case():
    env, plugin = plugin_env("1.6.0", "libnccl-net.so", NCCL_NET="aws libfabric")
    assert nccl.check_nccl_plugin(env, plugin, True, 2).status == PASS
    env, plugin = plugin_env("1.6.0", "libnccl-net.so", NCCL_NET="ofi")
    assert nccl.check_nccl_plugin(env, plugin, True, 2).status == FAIL


def test_a_missing_network_names_both_spellings_of_nccls_error():
    """NCCL up to 2.26 logs "Error: network %s not found." (src/plugin/net.cc at
    v2.26.6-1:232); from 2.27 "Failed to initialize any NET plugin" (v2.27.7-1:278)."""
    env, plugin = plugin_env("1.19.0", NCCL_NET="AWS Libfabric")
    detail = nccl.check_nccl_plugin(env, plugin, True, 2).detail
    assert "network AWS Libfabric not found" in detail
    assert "Failed to initialize any NET plugin" in detail


def test_nccl_net_plugin_is_a_list_from_nccl_2_27():
    """From 2.27.3 NCCL splits NCCL_NET_PLUGIN at commas and tries each name in turn
    (src/plugin/net.cc at v2.27.3-1: strtok_r(..., ",")): one that loads is enough."""
    env = {"NCCL_NET_PLUGIN": "ofi,aws"}
    assert nccl.plugin_names(env) == ["libnccl-net-ofi.so", "libnccl-net-aws.so"]
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", "libnccl-net-ofi.so",
                             NCCL_NET_PLUGIN="missing,ofi")
    check = nccl.check_nccl_plugin(env, plugin, True, 2)
    assert check.status == PASS and "NCCL_NET_PLUGIN=missing,ofi" in check.detail, check
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", NCCL_NET_PLUGIN="x,y")
    check = nccl.check_nccl_plugin(env, plugin, True, 2)
    assert check.status == FAIL and "libnccl-net-x.so" in check.detail, check
    assert "libnccl-net-y.so" in check.detail, check


def test_a_plugin_list_on_nccl_before_2_27_is_one_name():
    """Up to 2.26 the whole value is one name (src/plugin/net.cc at v2.26.6-1:70)."""
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", "libnccl-net-ofi.so",
                             NCCL_NET_PLUGIN="ofi,aws")
    check = nccl.check_nccl_plugin(env, plugin, True, 2, nccl_version="2.26.6")
    assert check.status == FAIL and "2.27" in check.detail, check
    assert nccl.check_nccl_plugin(env, plugin, True, 2, nccl_version="2.27.7").status == PASS


@pytest.mark.parametrize("value", ["none", "NONE"])
def test_nccl_net_plugin_none_means_no_external_plugin(value):
    """From 2.28.3 "none" (strcasecmp) empties the list (src/plugin/net.cc at
    v2.28.3-1:244); earlier releases look for libnccl-net-none.so, find none and use
    no external plugin either.  Not a missing library: no plugin, by choice."""
    assert nccl.plugin_names({"NCCL_NET_PLUGIN": value}) == []
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", NCCL_NET_PLUGIN=value)
    check = nccl.check_nccl_plugin(env, plugin, slingshot=False, nodes=2)
    assert check.status == PASS and "no net plugin" in check.detail, check
    # ... but on Slingshot it is the socket fallback, and NCCL_NET cannot find the plugin.
    check = nccl.check_nccl_plugin(env, plugin, slingshot=True, nodes=2)
    assert check.status == FAIL and f"NCCL_NET_PLUGIN={value}" in check.detail, check
    env["NCCL_NET"] = "OFI"
    check = nccl.check_nccl_plugin(env, plugin, slingshot=False, nodes=2)
    assert check.status == FAIL and "not found" in check.detail, check


@pytest.mark.parametrize("nccl_version", [None, "", "unknown", "22707"])
def test_a_plugin_list_with_an_unreadable_nccl_version_is_read_as_a_list(nccl_version):
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", "libnccl-net-ofi.so",
                             NCCL_NET_PLUGIN="ofi,aws")
    assert nccl.check_nccl_plugin(env, plugin, True, 2, nccl_version=nccl_version).status == PASS


def test_a_plugin_path_that_does_not_load_is_named_as_given():
    """Quoted once, as NCCL's 'Could not find' line lists it once (a path is not tried
    again as libnccl-net-<path>.so from v2.27.7-1)."""
    env = {"NCCL_NET_PLUGIN": "/opt/plugin/lib/libnccl-net.so"}
    check = nccl.check_nccl_plugin(env, nccl.PluginInfo(), False, 2)
    assert check.status == FAIL and "no /opt/plugin/lib/libnccl-net.so loads" in check.detail
    assert "Could not find: /opt/plugin/lib/libnccl-net.so'" in check.detail, check


def test_a_plugin_path_that_does_not_load_fails_beside_a_default_that_does():
    """NCCL_NET_PLUGIN set: NCCL (>= 2.27) tries only the names in it, never the default
    libnccl-net.so (src/plugin/net.cc at v2.27.7-1), so a bad path FAILs even where the
    default library, with the same file name, loads."""
    bad = "/nowhere/lib/libnccl-net.so"
    maps = mapped_at("/sw/aws-ofi-nccl-1.19.0/lib", "libnccl-net.so")
    maps[bad] = nccl.Mapped(bad, error=f"{bad}: cannot open shared object file: "
                                       "No such file or directory")
    check = nccl.check_nccl_plugin({"NCCL_NET_PLUGIN": bad}, nccl.plugin_from_maps(maps),
                                   True, 2)
    assert check.status == FAIL and f"no {bad} loads" in check.detail, check


def test_plugin_none_with_nccl_net_says_to_unset_the_plugin_setting():
    """A Slingshot runtime.sh exports NCCL_NET; with NCCL_NET_PLUGIN=none the plugin is
    installed and loads, so the fix is the setting, not loading aws-ofi-nccl."""
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", NCCL_NET_PLUGIN="none",
                             NCCL_NET="AWS Libfabric")
    check = nccl.check_nccl_plugin(env, plugin, slingshot=True, nodes=2)
    assert check.status == FAIL and check.fix == "unset NCCL_NET_PLUGIN", check


def _release(log: str) -> tuple[int, int] | None:
    """The NCCL release a fixture claims (its ``NCCL version 2.M.P+cuda`` line)."""
    for line in log.splitlines():
        if " NCCL INFO NCCL version " in line:
            major, minor = line.split("NCCL version ", 1)[1].split(".")[:2]
            return int(major), int(minor)
    return None


#: The log fixtures that name their NCCL release (the others are excerpts without the
#: version line, read by the parsers for one line each).
RELEASED_LOGS = [p for p in sorted(LOGS.glob("*.log")) if _release(p.read_text())]


def test_the_release_checks_cover_the_plugin_logs() -> None:
    assert {"plugin-ofi.log", "plugin-no-provider-line.log"} <= {p.name for p in RELEASED_LOGS}


@pytest.mark.parametrize("path", RELEASED_LOGS, ids=lambda p: p.name)
def test_each_log_fixture_prints_what_its_nccl_release_prints(path: Path) -> None:
    """A fixture that names its NCCL release writes the lines that release prints: the
    bootstrap line is ``Bootstrap : Using`` up to 2.23 and ``Bootstrap: Using`` from
    2.24 (NVIDIA/nccl src/bootstrap.cc at v2.23.4-1 and v2.24.3-1), and NCCL 2.27 loads
    a plugin through the newest interface it knows, v10 (src/plugin/net.cc at
    v2.27.7-1: ncclNetVersion = {10, 9, 8, 7, 6}), which aws-ofi-nccl from 1.14 on
    exports.  Logs of both bootstrap forms stay, and the parsers read both."""
    log = path.read_text()
    release = _release(log)
    old_form = " NCCL INFO Bootstrap : Using" in log
    assert old_form == (release < (2, 24)) or "Bootstrap" not in log, path.name
    if release >= (2, 27):
        for line in log.splitlines():
            if "NET/Plugin: Loaded net plugin" in line:
                assert line.endswith("(v10)"), line


@pytest.mark.parametrize(("nccl_version", "status"), [("2.27.7", FAIL), ("2.29.2", FAIL),
                                                      ("2.26.6", PASS), ("2.21.5", PASS),
                                                      (None, PASS)])
def test_an_empty_nccl_net_plugin_opens_no_plugin_from_nccl_2_27(nccl_version, status):
    """Set but empty: NCCL >= 2.27 splits the value into no names and adds its default
    libnccl-net.so only when the variable is unset (NVIDIA/nccl src/plugin/net.cc at
    v2.27.3-1:214-244), so no external plugin loads and NCCL_NET='AWS Libfabric' stops
    the job; up to 2.26 an empty value is the default (src/net.cc at v2.21.5-1:387,
    src/plugin/plugin_open.cc at v2.26.6-1:31).  Unknown NCCL: the older reading."""
    env, plugin = plugin_env("1.19.0", "libnccl-net.so", NCCL_NET_PLUGIN="",
                             NCCL_NET="AWS Libfabric")
    check = nccl.check_nccl_plugin(env, plugin, True, 2, nccl_version=nccl_version)
    assert check.status == status, check
    if status == FAIL:
        assert "empty" in check.detail and check.fix == "unset NCCL_NET_PLUGIN", check


def _reads_of(variable: str, tree) -> list[int]:
    """Where ``tree`` reads ``variable`` from a mapping: ``.get("X")``, ``["X"]``, ``"X" in``."""
    import ast

    out = []
    for node in ast.walk(tree):
        keys = []
        if isinstance(node, ast.Call) and getattr(node.func, "attr", "") == "get":
            keys = node.args[:1]
        elif isinstance(node, ast.Subscript):
            keys = [node.slice]
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], (ast.In, ast.NotIn)):
            keys = [node.left]
        if any(isinstance(k, ast.Constant) and k.value == variable for k in keys):
            out.append(node.lineno)
    return out


def test_nccl_net_plugin_is_read_from_the_environment_in_one_place() -> None:
    """One reading of NCCL_NET_PLUGIN (nccl.plugin_setting; empty_opens_none alone asks
    whether it is set at all): the NCCL and RCCL checks and the loader all ask it, so
    "unset", "blank" and "names" cannot drift apart between them."""
    import ast
    import inspect

    package = Path(nccl.__file__).resolve().parents[1]
    found = sorted({(path.name, func.name)
                    for path in package.rglob("*.py")
                    for func in ast.walk(ast.parse(path.read_text(), str(path)))
                    if isinstance(func, ast.FunctionDef) and _reads_of("NCCL_NET_PLUGIN", func)})
    assert found == [("nccl.py", "empty_opens_none"), ("nccl.py", "plugin_setting")], found
    assert "plugin_setting(env)" in inspect.getsource(nccl.empty_opens_none)


def test_the_plugin_is_the_file_with_a_plugins_name_not_the_first_mapped() -> None:
    """libnccl-net.so linked to librccl-net.so (torchmpi's ROCm install) maps the latter
    and its libfabric; the plugin is the librccl-net file wherever the paths sort."""
    from torchmpi.doctor import rocm

    plugin_path = "/z/aws-ofi-nccl-1.19.2-x/lib/librccl-net.so"
    maps = {"libnccl-net.so": nccl.Mapped("libnccl-net.so",
                                          ["/a/libfabric/lib64/libfabric.so.1", plugin_path])}
    info = nccl.plugin_from_maps(maps)
    assert info.libraries == {"libnccl-net.so": plugin_path}, info
    assert info.libfabric == "/a/libfabric/lib64/libfabric.so.1" and info.version == (1, 19, 2)
    assert rocm.PREFIX in nccl.OWN_PREFIXES
