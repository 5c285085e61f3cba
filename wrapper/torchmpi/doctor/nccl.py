"""NCCL's net plugin: which aws-ofi-nccl a job loads, judged by its version.

(The interfaces NCCL picks and what its log says about the network it chose:
:mod:`torchmpi.doctor.network`.)

Only combinations known to fail are FAIL, each with its source; what is merely
untested is a WARN.  Plugin facts (also in the aws-ofi-nccl recipe,
docs/design.md and tests/fixtures/aws_ofi_nccl_net_names.json):

* through 1.12.x the plugin registers only as "AWS Libfabric"; from v1.13.0-aws
  (aws/aws-ofi-nccl PR #530) it registers as "Libfabric" and renames itself to
  "AWS Libfabric" or "OFI" when ``NCCL_NET`` asks;
* from 1.15.0 it also ships ``libnccl-net-ofi.so`` and documents
  ``NCCL_NET_PLUGIN=ofi``, so ``NCCL_NET_PLUGIN`` with ``NCCL_NET`` is fine
  whenever the named library exists; configured ``--disable-nccl-net-library``
  it ships that one alone (src/Makefile.am, configure.ac at v1.19.2), which NCCL
  opens only when told (``NCCL_NET_PLUGIN=ofi``): unset, NCCL opens
  ``libnccl-net.so`` and nothing else (NVIDIA/nccl src/plugin/net.cc at v2.29.2-1
  and v2.27.3-1, defaultNetPlugin; src/net.cc at v2.21.5-1);
* 1.16.0-1.17.1 have a shutdown-ordering bug on Slingshot (v1.17.2
  RELEASENOTES.md: "Fixed shutdown ordering issue on NICs that require
  per-endpoint memory registration (Cray Slingshot)"); the fix (b96292b9) is in
  the connection manager's src/cm/, which first ships in 1.16.0, so 1.14-1.15
  (CSCS's PyTorch uenv v2.6.0 ships 1.14.0) do not have it.

HPE (HewlettPackard/shs-ccl-docs ``ccl_env.sh``@b150230): do not set
``NCCL_NET`` on single-node Slurm runs -- it forces the network transport
between ranks of one node (VNI allocation, lower performance).
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field

from torchmpi.doctor.core import FAIL, PASS, SKIP, WARN, Check, Runner, version_tuple
from torchmpi.doctor.network import not_found_words

#: (first release, names it answers to as NCCL_NET).  A range runs to the next entry.
PLUGIN_NET_NAMES: tuple[tuple[tuple[int, ...], tuple[str, ...]], ...] = (
    ((0,), ("AWS Libfabric",)),
    ((1, 13, 0), ("Libfabric", "AWS Libfabric", "OFI")),
)
#: First release that ships libnccl-net-ofi.so (NCCL_NET_PLUGIN=ofi).
PLUGIN_OFI_LIBRARY = (1, 15, 0)
#: [first, last] releases with the Slingshot shutdown-ordering bug: src/cm/ (1.16.0)
#: until its fix (1.17.2).
SLINGSHOT_BAD_PLUGINS = ((1, 16, 0), (1, 17, 1))
#: NCCL compares NCCL_NET without case (strcasecmp: src/plugin/net.cc at v2.27.7-1:166,
#: src/net.cc at v2.21.5-1:560), as the plugin does when it renames itself (aws-ofi-nccl
#: v1.13.0-aws src/nccl_ofi_interface_nvidia.c:333-342): names are kept casefolded.
_PLUGIN_NAMES = {name.casefold() for _, names in PLUGIN_NET_NAMES for name in names}
#: First NCCL that reads NCCL_NET_PLUGIN as a comma-separated list, each name tried in
#: turn (src/plugin/net.cc at v2.27.3-1, strtok_r); up to 2.26 the value is one name
#: (src/plugin/net.cc at v2.26.6-1:70).
NCCL_PLUGIN_LIST = (2, 27)


def accepted_net_names(version: tuple[int, ...]) -> tuple[str, ...]:
    """The ``NCCL_NET`` values plugin release ``version`` answers to."""
    names: tuple[str, ...] = ()
    for first, accepted in PLUGIN_NET_NAMES:
        if version >= first:
            names = accepted
    return names


def _accepts(version: tuple[int, ...], net: str) -> bool:
    return net.casefold() in {n.casefold() for n in accepted_net_names(version)}


def plugin_setting(env: Mapping[str, str]) -> str:
    """``NCCL_NET_PLUGIN`` stripped, the one reading of it: "" when unset or blank,
    which NCCL reads as its default name (:data:`DEFAULT_PLUGIN`) -- except a blank
    but set value from 2.27, which opens none (:func:`empty_opens_none`)."""
    return env.get("NCCL_NET_PLUGIN", "").strip()


def requested_plugins(env: Mapping[str, str]) -> list[str]:
    """The names in ``NCCL_NET_PLUGIN``, as NCCL >= 2.27 splits them (empty ones
    skipped, as strtok_r does).  "none" in any case asks for no external plugin
    (src/plugin/net.cc at v2.28.3-1:244); older releases look for
    libnccl-net-none.so, find none and load no external plugin either."""
    value = plugin_setting(env)
    if value.casefold() == "none":
        return []
    return [name for name in value.split(",") if name]


def empty_opens_none(env: Mapping[str, str], nccl_version: str | None) -> bool:
    """NCCL_NET_PLUGIN set but empty, read by an NCCL that then opens no external
    plugin: from 2.27 NCCL splits a set value into names (none here) and adds its
    default libnccl-net.so only when the variable is unset (src/plugin/net.cc at
    v2.27.3-1:214-244); up to 2.26 an empty value is the default (src/net.cc at
    v2.21.5-1:387, src/plugin/plugin_open.cc at v2.26.6-1:31).  An unknown NCCL
    gets the older reading."""
    release = version_tuple(nccl_version) or ()
    return ("NCCL_NET_PLUGIN" in env and not plugin_setting(env) and len(release) > 1
            and release >= NCCL_PLUGIN_LIST)


def _fmt(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


@dataclass
class PluginInfo:
    """The NCCL net plugin libraries this job maps, the libfabric they bring, and the release."""

    libraries: dict[str, str] = field(default_factory=dict)  # name asked for -> path mapped
    version: tuple[int, ...] | None = None
    version_source: str = ""
    libfabric: str = ""  # the libfabric.so the plugin mapped ("" if none)
    errors: dict[str, str] = field(default_factory=dict)  # name -> dlopen's error
    #: libraries that load but that NCCL does not open with this environment (a lone
    #: libnccl-net-ofi.so while NCCL_NET_PLUGIN is unset): name -> path, for the fix
    unused: dict[str, str] = field(default_factory=dict)


@dataclass
class Mapped:
    """What a child mapped when it dlopen()ed one name: new files, or dlopen's error."""

    name: str
    paths: list[str] = field(default_factory=list)
    error: str = ""
    #: NCCL opens this name with the job's environment; False: loaded only to name a fix
    opened: bool = True


MAP_MARK = "TORCHMPI-MAP"

#: Loads one library the way NCCL loads its net plugin (dlopen of the bare name, so
#: LD_LIBRARY_PATH, RUNPATH and ld.so.cache all count) and prints the files that load
#: added to /proc/self/maps: the real paths, symlinks resolved by the kernel.
#: RTLD_NOW | RTLD_LOCAL, NCCL's own flags (src/plugin/plugin_open.cc at v2.27.7-1,
#: src/net.cc at v2.21.5-1; RCCL's loaders likewise): NCCL hands the plugin its
#: functions only as pointers (init's logger), so a function the plugin leaves
#: undefined fails NCCL's load, and must fail this one.
_MAP_SCRIPT = """
import ctypes, os, sys
def maps():
    with open('/proc/self/maps') as handle:
        return {p[5].strip() for p in (line.split(None, 5) for line in handle)
                if len(p) == 6 and p[5].startswith('/')}
name = sys.argv[1]
before = maps()
try:
    ctypes.CDLL(name, mode=os.RTLD_NOW | os.RTLD_LOCAL)
except OSError as err:
    print('@M@\terror\t' + str(err).replace(chr(10), ' '))
else:
    for path in sorted(maps() - before):
        print('@M@\tmapped\t' + path)
""".replace("@M@", MAP_MARK)


#: What NCCL composes a file name from for one NCCL_NET_PLUGIN name: <prefix>-<name>.so
#: (src/plugin/plugin_open.cc at v2.27.7-1, pluginPrefix); RCCL's is librccl-net
#: (:mod:`torchmpi.doctor.rocm`).
NET_PREFIX = "libnccl-net"
#: File names a net plugin's own library has, whichever name opened it: NCCL's prefix
#: and RCCL's (:data:`torchmpi.doctor.rocm.PREFIX`): a libnccl-net.so linked to
#: librccl-net.so maps the latter, beside its libfabric.
OWN_PREFIXES = (NET_PREFIX, "librccl-net")


def tried(plugin: str, prefix: str = NET_PREFIX) -> list[str]:
    """What NCCL dlopen()s for one NCCL_NET_PLUGIN name, in its order: the name as
    given, then <prefix>-<name>.so unless the name is a path or already a library
    name (lib*.so), as src/plugin/plugin_open.cc has it at v2.27.7-1 and v2.29.2-1.
    (Up to v2.27.3-1 the second form was tried for every name; for a path or a lib*.so
    name it can only fail, so the verdict is the same.)"""
    if "/" in plugin or (plugin.startswith("lib") and plugin.endswith(".so")):
        return [plugin]
    return [plugin, f"{prefix}-{plugin}.so"]


def candidates(plugin: str, prefix: str = NET_PREFIX) -> list[str]:
    """The files of :func:`tried` a loader child can find: a bare name with neither
    '/' nor '.so' ("ofi") is a file name no library path holds."""
    return [name for name in tried(plugin, prefix) if "/" in name or ".so" in name]


#: What NCCL opens with NCCL_NET_PLUGIN unset (src/plugin/net.cc at v2.29.2-1 and
#: v2.27.3-1, defaultNetPlugin; src/plugin/plugin_open.cc at v2.27.7-1; src/net.cc at
#: v2.21.5-1): this one name, never libnccl-net-ofi.so.
DEFAULT_PLUGIN = "libnccl-net.so"


def plugin_names(env: Mapping[str, str]) -> list[str]:
    """The libraries NCCL would dlopen as its net plugin, given NCCL_NET_PLUGIN."""
    if not plugin_setting(env):
        return [DEFAULT_PLUGIN]
    return list(dict.fromkeys(n for p in requested_plugins(env) for n in candidates(p)))


def alternatives(env: Mapping[str, str], prefix: str = NET_PREFIX) -> list[str]:
    """Libraries NCCL does not open here, loaded only to name the fix: with
    NCCL_NET_PLUGIN unset, <prefix>-ofi.so, which an aws-ofi-nccl configured
    --disable-nccl-net-library ships alone and NCCL_NET_PLUGIN=ofi makes NCCL open."""
    return [] if plugin_setting(env) else [f"{prefix}-ofi.so"]


def resolve_names(opened: list[str], others: list[str], env: Mapping[str, str],
                  runner: Runner) -> dict[str, Mapped]:
    """Load each name in its own child (one shared file must not hide another),
    marking the ``others`` that NCCL does not open."""
    maps = {name: load_in_child(name, env, runner) for name in opened}
    for name in others:
        if name not in maps:
            maps[name] = load_in_child(name, env, runner)
            maps[name].opened = False
    return maps


def load_in_child(name: str, env: Mapping[str, str], runner: Runner) -> Mapped:
    """dlopen ``name`` in a child with the job's environment; what it mapped, or why not."""
    result = runner([sys.executable, "-c", _MAP_SCRIPT, name], env=env)
    if result is None:
        return Mapped(name, error="could not start a python child to load it")
    found = Mapped(name)
    for line in result.stdout.splitlines():
        parts = line.split("\t", 2)
        if len(parts) == 3 and parts[0] == MAP_MARK:
            if parts[1] == "mapped":
                found.paths.append(parts[2].removesuffix(" (deleted)"))
            else:
                found.error = parts[2]
    if not found.paths and not found.error:
        found.error = f"the loader child printed nothing (exit {result.returncode})"
    return found


def resolve_plugin(env: Mapping[str, str], runner: Runner) -> dict[str, Mapped]:
    """Load every name NCCL would open, and :func:`alternatives`, each in its own child."""
    return resolve_names(plugin_names(env), alternatives(env), env, runner)


def _absent(name: str, error: str) -> bool:
    """dlopen's error says the library itself is nowhere (not one of its dependencies)."""
    return error.startswith(f"{name}:") and "No such file" in error


def plugin_from_maps(maps: Mapping[str, Mapped], log_text: str | None = None) -> PluginInfo:
    """The plugin libraries, their libfabric and the release, from what children mapped."""
    info = PluginInfo()
    for name, mapped in maps.items():
        key = name  # a path stays a path: its basename may be another, loadable file's
        if mapped.error:
            if not _absent(name, mapped.error) and mapped.opened:
                info.errors[key] = mapped.error
            continue
        own = [p for p in mapped.paths
               if os.path.basename(p).startswith((*OWN_PREFIXES, os.path.basename(name)))]
        if (own or mapped.paths) and not mapped.opened:
            info.unused[key] = (own or mapped.paths)[0]
            continue
        if own or mapped.paths:
            info.libraries[key] = (own or mapped.paths)[0]
        fabric = [p for p in mapped.paths if re.match(r"libfabric\.so", os.path.basename(p))]
        if fabric and not info.libfabric:
            info.libfabric = fabric[0]
    for path in [*info.libraries.values(), *info.unused.values()]:
        match = re.search(r"aws-ofi-nccl[-_@/]v?(\d+\.\d+\.\d+)", path)
        if match:
            info.version, info.version_source = version_tuple(match.group(1)), path
            break
    if info.version is None and log_text:
        match = re.search(r"(?:Initializing|Using) aws-ofi-nccl v?(\d+\.\d+\.\d+)", log_text)
        if match:
            info.version, info.version_source = version_tuple(match.group(1)), "NCCL log"
    return info


def _plugin_list_check(wanted: str, names: list[str], plugin: PluginInfo,
                       nccl_version: str | None) -> Check | None:
    """FAIL when no name in NCCL_NET_PLUGIN loads, or when an NCCL before 2.27 would
    read a list as one name; None when NCCL finds one of them."""
    name, version = "nccl.plugin", plugin.version
    fix = "unset NCCL_NET_PLUGIN (NCCL then loads libnccl-net.so) or load aws-ofi-nccl >= 1.15"
    torch_nccl = version_tuple(nccl_version) or ()
    if len(names) > 1 and len(torch_nccl) > 1 and torch_nccl < NCCL_PLUGIN_LIST:
        return Check(name, FAIL,
                     f"NCCL_NET_PLUGIN={wanted} is a list, but NCCL {nccl_version} reads "
                     f"it as one library name (lists from {_fmt(NCCL_PLUGIN_LIST)})",
                     "set NCCL_NET_PLUGIN to one name")
    if any(plugin.libraries.get(lib) for n in names for lib in candidates(n)):
        return None
    libs = [tried(n)[-1] for n in names]
    since = (f"; plugin {_fmt(version)} predates libnccl-net-ofi.so (from "
             f"{_fmt(PLUGIN_OFI_LIBRARY)})"
             if "ofi" in names and version and version < PLUGIN_OFI_LIBRARY else "")
    if len(names) == 1:
        return Check(name, FAIL,
                     f"NCCL_NET_PLUGIN={wanted} but no {libs[0]} loads here: NCCL logs "
                     f"'NET/Plugin: Could not find: {' '.join(tried(names[0]))}'{since}", fix)
    return Check(name, FAIL,
                 f"NCCL_NET_PLUGIN={wanted} but none of {', '.join(libs)} loads here: "
                 f"NCCL logs 'NET/Plugin: Could not find: ...' for each{since}", fix)


def _ofi_only(plugin: PluginInfo) -> str:
    """Words for a <prefix>-ofi.so that loads while NCCL opens nothing ("" if none)."""
    lib = next((name for name in plugin.unused if name.endswith("-ofi.so")), "")
    return (f"; {lib} ({plugin.unused[lib]}) loads, but NCCL opens it only with "
            "NCCL_NET_PLUGIN=ofi") if lib else ""


#: The fix for :func:`_ofi_only`: "ofi" is the name NCCL turns into libnccl-net-ofi.so
#: (src/plugin/plugin_open.cc at v2.27.7-1, <prefix>-<name>.so; src/net.cc at
#: v2.21.5-1) and RCCL into librccl-net-ofi.so; the plugin documents it from 1.15.0.
OFI_FIX = "export NCCL_NET_PLUGIN=ofi"


def check_nccl_plugin(env: Mapping[str, str], plugin: PluginInfo, slingshot: bool,
                      nodes: int | None, has_nccl: bool = True,
                      nccl_version: str | None = None) -> Check:
    """NCCL_NET / NCCL_NET_PLUGIN against the plugin actually installed, by its version.

    ``nccl_version`` (torch's NCCL, when known) decides how NCCL_NET_PLUGIN is read.
    """
    name = "nccl.plugin"
    if not has_nccl:
        return Check(name, SKIP, "no NCCL backend")
    net, wanted = env.get("NCCL_NET", "").strip(), plugin_setting(env)
    version = plugin.version
    shown = f"aws-ofi-nccl {_fmt(version)}" if version else "aws-ofi-nccl (version unknown)"
    names = requested_plugins(env)
    if names:
        failed = _plugin_list_check(wanted, names, plugin, nccl_version)
        if failed:
            return failed
    # "none", or set but empty from 2.27: NCCL loads no external plugin, whatever is
    # installed.
    off = (f"NCCL_NET_PLUGIN={wanted} (no external plugin)" if wanted and not names else
           f"NCCL_NET_PLUGIN is set but empty (NCCL {nccl_version} then opens no external"
           " plugin)" if empty_opens_none(env, nccl_version) else "")
    libraries = {} if off else plugin.libraries
    buggy = version and SLINGSHOT_BAD_PLUGINS[0] <= version <= SLINGSHOT_BAD_PLUGINS[1]
    if buggy and slingshot and not off:
        return Check(name, FAIL,
                     f"{shown} has the shutdown-ordering bug on Slingshot fixed in 1.17.2 "
                     "(aws-ofi-nccl v1.17.2 RELEASENOTES.md)",
                     "use aws-ofi-nccl 1.17.2 or later (the site's nccl-ss11 pairs)")
    broken = off or "; ".join(f"{lib} does not load: {err}"
                              for lib, err in plugin.errors.items())
    ofi_only = "" if off else _ofi_only(plugin)
    if net.casefold() in _PLUGIN_NAMES:
        if not libraries:
            seen = (broken or "no libnccl-net.so that the loader finds") + ofi_only
            return Check(name, FAIL,
                         f"NCCL_NET={net} but {seen}: NCCL stops "
                         f"with {not_found_words(net)}",
                         "unset NCCL_NET_PLUGIN" if off else OFI_FIX if ofi_only else
                         "load the site's aws-ofi-nccl (its lib dir on LD_LIBRARY_PATH) and "
                         "the libfabric it was built with")
        if version and not _accepts(version, net):
            return Check(name, FAIL,
                         f"NCCL_NET={net}, but {shown} registers only as "
                         f"{', '.join(accepted_net_names(version))}: NCCL stops with "
                         f"{not_found_words(net)}",
                         "export NCCL_NET='AWS Libfabric' (every plugin release answers to it)")
        if nodes == 1:
            return Check(name, WARN,
                         f"NCCL_NET={net} on a single-node job: HPE says not to set it there "
                         "(forces the network transport, lower performance)",
                         "unset NCCL_NET for single-node runs")
        if version is None and net.casefold() != "aws libfabric":
            return Check(name, WARN,
                         f"NCCL_NET={net} is only known from aws-ofi-nccl 1.13.0; the plugin's "
                         "version could not be read",
                         "export NCCL_NET='AWS Libfabric' (every plugin release answers to it)")
    if slingshot and not libraries:
        status = WARN if nodes == 1 else FAIL
        seen = (broken or "no aws-ofi-nccl plugin (libnccl-net.so) that the loader finds"
                ) + ofi_only
        return Check(name, status,
                     f"{seen}: NCCL uses TCP sockets between nodes on Slingshot",
                     "unset NCCL_NET_PLUGIN" if off else OFI_FIX if ofi_only else
                     "load the site's aws-ofi-nccl and its libfabric (module load py-torch-mpi "
                     "loads them)")
    libs = ", ".join(f"{lib} -> {path}" for lib, path in sorted(libraries.items()))
    fabric = f"; libfabric {plugin.libfabric}" if plugin.libfabric and not off else ""
    return Check(name, PASS, f"NCCL_NET={net or '(unset)'}, "
                             f"NCCL_NET_PLUGIN={wanted or '(unset)'}; "
                             f"{libs or 'no net plugin'}{fabric}"
                             + (f" ({shown})" if libraries else ""))
