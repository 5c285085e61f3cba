"""The runtime variables a job on a site sees: fabric defaults, the site's values on top.

:func:`resolve` is the single answer to "which variables, with which values":
runtime.sh, spack.yaml ``env_vars``, the py-torch-mpi module's ``environment``,
``torchmpi doctor --site`` and the tests all read it (``environment()`` is its
``set`` part), so they cannot drift apart.

Layers, lowest first:

1. the fabric's defaults, data shipped with the tool
   (``data/fabrics/<fabric>.yaml``, each value with its source), so that a
   Slingshot site does not restate HPE's settings; then the file's
   ``vendors.<gpu.vendor>`` values, those of the kind of node the site
   describes (``nodes``: GH200) and those of the site's ``runtime.centre``
   (:func:`vendor_layer`);
2. the site file's ``runtime.env`` (overrides a default in place, or adds);
3. ``MPICH_GPU_SUPPORT_ENABLED=1`` when Cray MPICH is built with GTL
   (:func:`cray_gpu_switch`) and the site did not say it.

``runtime.prepend_path`` / ``append_path`` add to a path list the way Spack's
modules do; a ``$`` in any value is rejected (:func:`problems`), because each
of the three renderings would treat it differently and ``set`` would clobber
the job's own value.

Package run environments (aws-ofi-nccl, nccl-ss11, py-torch-mpi) are
defaults under ``module load``; the py-torch-mpi module sets these values
after its autoloaded dependencies, so the site wins.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

import yaml

from torchmpi import gpuvendor
from torchmpi.errors import UserError

#: Cray MPICH moves device buffers only with GTL in the process AND this switch on.
GPU_SWITCH = "MPICH_GPU_SUPPORT_ENABLED"

#: The path-list operations, in Spack's own spelling (modules and env_vars).
PATH_OPS = ("prepend_path", "append_path")

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


@dataclass
class Runtime:
    """The resolved runtime variables of one site."""

    set: dict[str, str] = field(default_factory=dict)
    prepend_path: dict[str, str] = field(default_factory=dict)
    append_path: dict[str, str] = field(default_factory=dict)
    #: (what, where the values come from), for the comments of runtime.sh.
    sources: list[tuple[str, str]] = field(default_factory=list)
    #: name -> (value when the job spans nodes, value on one node): runtime.sh only
    #: (a module or env_vars cannot branch); OLCF's NCCL_NET on Frontier.
    by_nodes: dict[str, tuple[str, str]] = field(default_factory=dict)

    def spack(self) -> dict[str, Any]:
        """Spack's environment-modification mapping (modules ``environment``, ``env_vars``).

        A :attr:`by_nodes` variable is ``unset`` there: only runtime.sh can choose
        its value by the job's node count, and a package's run environment
        underneath (aws-ofi-nccl +cxi sets ``NCCL_NET``) must not decide it.
        """
        out = {"set": self.set, "prepend_path": self.prepend_path,
               "append_path": self.append_path}
        mapping: dict[str, Any] = {op: dict(values) for op, values in out.items() if values}
        if self.by_nodes:
            mapping["unset"] = list(self.by_nodes)
        return mapping

    def __bool__(self) -> bool:
        return bool(self.set or self.prepend_path or self.append_path or self.by_nodes)


@cache
def fabric_defaults(fabric: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """(source, ((name, value), ...)) of a fabric's data file."""
    ref = resources.files("torchmpi").joinpath("data", "fabrics", f"{fabric}.yaml")
    try:
        data = yaml.safe_load(ref.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        raise UserError(f"fabric '{fabric}': no runtime defaults shipped"
                        f" (torchmpi/data/fabrics/{fabric}.yaml missing)") from None
    env = tuple((str(k), str(v)) for k, v in (data.get("env") or {}).items())
    return str(data.get("source", "")), env


@cache
def launcher_flags() -> tuple[dict[str, str], ...]:
    """Runtime values that need a launcher flag, from every fabric's data file
    (``launcher_flags``: variable, value, slurm_flag, slurm_value, pbs_flag, source)."""
    out = []
    for ref in sorted(resources.files("torchmpi").joinpath("data", "fabrics").iterdir(),
                      key=lambda r: r.name):
        if ref.name.endswith(".yaml"):
            data = yaml.safe_load(ref.read_text(encoding="utf-8")) or {}
            out += [{k: str(v) for k, v in rule.items()}
                    for rule in data.get("launcher_flags") or []]
    return tuple(out)


def _site_values(data: dict[str, Any], dotted: str) -> set[str]:
    """A site-file key's values as strings: ``gpu.cuda_arch`` ``[80, 86]`` or
    ``'80,86'`` -> ``{'80', '86'}``; ``target`` -> ``{'neoverse_v2'}``; none if absent."""
    value: Any = data
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    items = value if isinstance(value, list) else str(value).split(",") if value else []
    return {str(v) for v in items}


def _node_layers(data: dict[str, Any], block: dict[str, Any]) -> list[tuple[str, dict]]:
    """The vendor block's ``nodes.<kind>`` whose ``when`` the site matches (GH200's
    rendezvous values), each with only the names the site's ``runtime.env`` does
    not state: the site's value wins anyway, and a layer that gives nothing
    names no source (alps-gh200 states both, as CSCS's uenv does)."""
    stated = set((data.get("runtime") or {}).get("env") or {})
    out = []
    for kind, node in (block.get("nodes") or {}).items():
        if all(_site_values(data, key) & {str(v) for v in allowed}
               for key, allowed in node["when"].items()):
            env = {k: v for k, v in (node.get("env") or {}).items() if k not in stated}
            out.append((kind, {"env": env}))
    return out


def vendor_layer(data: dict[str, Any], out: Runtime) -> None:
    """The fabric file's ``vendors.<vendor>`` values, its ``nodes.<kind>`` the site's
    nodes match, then its ``centres.<runtime.centre>``.

    What only one GPU vendor's collective library takes on the fabric (AMD's
    ``HSA_FORCE_FINE_GRAIN_PCIE``), what one kind of node needs (GH200's
    ``FI_CXI_RDZV_THRESHOLD=0``, against GDRCopy corruption), and what a centre
    documents on top for that vendor (OLCF's ``FI_MR_CACHE_MONITOR=kdreg2``),
    each value with its source; ``multi_node_only`` values leave ``set`` for
    :attr:`Runtime.by_nodes`.  Other NVIDIA nodes get nothing here.
    """
    fabric, vendor = data.get("fabric"), gpuvendor.of(data)
    block = (gpuvendor.fabric_vendors(fabric).get(vendor) or {}) if fabric else {}
    centre_name = (data.get("runtime") or {}).get("centre")
    centre = (block.get("centres") or {}).get(centre_name) or {}
    nodes = [(f"{kind} nodes ({vendor} GPUs on {fabric})", layer)
             for kind, layer in _node_layers(data, block)]
    for what, layer in ((f"{vendor} GPUs on {fabric}", block), *nodes,
                        (f"centre defaults ({centre_name}, {vendor} GPUs)", centre)):
        env = layer.get("env") or {}
        out.set.update((k, str(v["value"])) for k, v in env.items())
        for name, rule in (layer.get("multi_node_only") or {}).items():
            out.set.pop(name, None)
            out.by_nodes[name] = (str(rule["value"]), str(rule["single_node"]))
        cited = dict.fromkeys(str(v["source"]) for v in
                              [*env.values(), *(layer.get("multi_node_only") or {}).values()])
        if cited:
            out.sources.append((what, "; ".join(cited)))


def cray_gpu_switch(data: dict[str, Any]) -> str | None:
    """The value MPICH_GPU_SUPPORT_ENABLED must have on this site, or None if it does not apply.

    ``+cuda_aware_mpi`` makes torch load Cray's GTL at import on a GPU node, which
    then needs the switch at 1 (without it: segfaults on device buffers);
    ``~cuda_aware_mpi`` loads no GTL, and 1 would make MPI_Init abort ("GTL library
    is not linked").
    """
    mpi = data.get("mpi", {})
    if mpi.get("kind") != "cray-mpich" or not isinstance(data.get("gpu"), dict):
        return None
    return "1" if mpi["cuda_aware"] else "0"


def resolve(data: dict[str, Any]) -> Runtime:
    """Fabric defaults, then the site's ``runtime``, then the implied Cray GPU switch."""
    out = Runtime()
    fabric = data.get("fabric")
    if fabric:
        source, defaults = fabric_defaults(fabric)
        out.set.update(defaults)
        if defaults:
            out.sources.append((f"fabric defaults ({fabric})", source))
        vendor_layer(data, out)
    site = data.get("runtime") or {}
    out.set.update((k, str(v)) for k, v in (site.get("env") or {}).items())
    for op in PATH_OPS:
        getattr(out, op).update((k, str(v)) for k, v in (site.get(op) or {}).items())
    if site:
        out.sources.append(("site values", str(site.get("source", ""))))
    if cray_gpu_switch(data) == "1":
        out.set.setdefault(GPU_SWITCH, "1")
    return out


def environment(data: dict[str, Any], nodes: int = 1) -> dict[str, str]:
    """The variables a job on ``nodes`` nodes has after sourcing runtime.sh, in order
    (``set``, then each :attr:`Runtime.by_nodes` value for that node count).

    A site that states a contradicting switch value is rejected earlier, in
    site validation (:mod:`torchmpi.checks.mpi` and :mod:`torchmpi.checks.runtime`).
    """
    rt = resolve(data)
    return {**rt.set, **{k: multi if nodes > 1 else single
                         for k, (multi, single) in rt.by_nodes.items()}}


def shell_lines(rt: Runtime) -> list[str]:
    """``export`` lines for runtime.sh, every value quoted with :func:`shlex.quote`."""
    lines = []
    for key, value in rt.set.items():
        lines.append(f"export {_name(key)}={shlex.quote(value)}")
    for key, value in rt.prepend_path.items():
        name = _name(key)
        lines.append(f'export {name}={shlex.quote(value)}"${{{name}:+:${name}}}"')
    for key, value in rt.append_path.items():
        name = _name(key)
        lines.append(f'export {name}="${{{name}:+${name}:}}"{shlex.quote(value)}')
    for key, (multi, single) in rt.by_nodes.items():
        name = _name(key)
        lines.append(f'if [ "${{SLURM_JOB_NUM_NODES:-1}}" -gt 1 ]; then export {name}='
                     f'{shlex.quote(multi)}; else export {name}={shlex.quote(single)}; fi')
    return lines


def _name(key: str) -> str:
    if not _NAME.fullmatch(key):
        raise UserError(f"runtime variable {key!r} is not a shell variable name"
                        " (letters, digits and _, not starting with a digit)")
    return key
