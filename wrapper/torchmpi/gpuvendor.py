"""The GPU vendor axis of a site file (``gpu.vendor``: nvidia, the default, or amd).

What differs per vendor is data (``data/gpu_vendors.yaml``: Cray's GTL
library, the architecture variant, the ROCm components a site's ROCm is
declared as).  The AMD rules a solve or a build would find only after
minutes are found here, at load, from the pinned builtin repository as the
CUDA rules read ``build_systems/cuda.py`` (:mod:`torchmpi.siterules`):

* an ``amdgpu_target`` builtin's ``ROCmPackage`` does not know, or one the
  site's ROCm cannot compile for (``depends_on("llvm-amdgpu@5.7.0:",
  when="amdgpu_target=gfx942")`` in ``build_systems/rocm.py``);
* a target Cray MPICH has no GTL for HSA for (the py-torch build stops with
  "no GTL support could be found", builtin ``cray_mpich/package.py``);
* a target that is not the GPU model's (MI250X is gfx90a);
* a ROCm a torch release cannot use: builtin py-torch conflicts ``+rocm``
  at 2.3 and 2.4, and needs ``composable-kernel@6.3.2:`` (versioned as ROCm
  releases are) from 2.6 and ``composable-kernel@:6.3.2`` at 2.5;
* a ROCm for which no source vouches an RCCL/aws-ofi-nccl pair on Slingshot
  (``VOUCHED_RCCL_PAIRS`` of nccl_ss11/package.py, read by :mod:`torchmpi.pairs`:
  RCCL is ROCm's release).
"""

from __future__ import annotations

import ast
import re
from functools import cache
from importlib import resources
from typing import Any

import yaml

from torchmpi import pairs, paths, torches

Problem = tuple[tuple, str]

#: The vendor a ``gpu`` section without ``vendor`` has: the schema's default, filled in
#: at load (tests/test_gpuvendor.py ties the two); named here for messages and tests.
DEFAULT = "nvidia"


@cache
def table() -> dict[str, dict[str, Any]]:
    """``data/gpu_vendors.yaml``: per vendor, GTL library, variants, components."""
    ref = resources.files("torchmpi").joinpath("data", "gpu_vendors.yaml")
    return yaml.safe_load(ref.read_text(encoding="utf-8"))


@cache
def fabric_vendors(fabric: str) -> dict[str, Any]:
    """The ``vendors`` block of ``data/fabrics/<fabric>.yaml`` (per vendor: ``env``,
    ``centres``); :func:`torchmpi.runtime.resolve` layers it, the rules check it."""
    ref = resources.files("torchmpi").joinpath("data", "fabrics", f"{fabric}.yaml")
    try:
        data = yaml.safe_load(ref.read_text(encoding="utf-8")) or {}
    except FileNotFoundError:
        return {}
    return data.get("vendors") or {}


def of(data: dict[str, Any]) -> str | None:
    """The site's GPU vendor; None for a CPU-only site (or ``gpu: auto``)."""
    gpu = data.get("gpu")
    return str(gpu["vendor"]) if isinstance(gpu, dict) else None


def gtl(vendor: str) -> str:
    """Cray's GTL library for the vendor's GPUs (``libmpi_gtl_hsa`` for AMD)."""
    return str(table()[vendor]["gtl"])


def gtl_refusal(value: str, library: str, key: str, allowed: list[str], hint: str = "") -> str:
    """Why ``value`` of ``gpu.<key>`` is refused on CUDA-aware cray-mpich: Cray ships
    ``library`` only for ``allowed``, and builtin cray-mpich's ``gtl_lib`` stops the
    py-torch build without it.  One wording for the NVIDIA and the AMD rule."""
    return (f"{value!r}: builtin cray-mpich has {library} only for {key} {', '.join(allowed)},"
            " so the py-torch build would stop with \"no GTL support could be found\";"
            f" allowed: {', '.join(allowed)}{hint}, or mpi.cuda_aware: false (docs/sites.md)")


def amdgpu_targets(gpu: dict[str, Any]) -> list[str]:
    """``gpu.amdgpu_target`` as a list: ``gfx90a`` -> ``['gfx90a']``."""
    value = gpu.get("amdgpu_target")
    items = value if isinstance(value, list) else str(value or "").split(",")
    return list(dict.fromkeys(str(v) for v in items if str(v)))


def rocm_version(data: dict[str, Any]) -> str | None:
    """``gpu.rocm.version`` of an AMD site, else None."""
    gpu = data.get("gpu")
    rocm = gpu.get("rocm") if isinstance(gpu, dict) else None
    return str(rocm["version"]) if isinstance(rocm, dict) and rocm.get("version") else None


def _builtin(rel: str) -> str:
    try:
        return (paths.builtin_repo() / rel).read_text()
    except OSError:
        return ""


@cache
def known_targets() -> tuple[str, ...]:
    """``ROCmPackage.amdgpu_targets`` of the pinned builtin (read with ast); empty without it."""
    text = _builtin("build_systems/rocm.py")
    for node in ast.walk(ast.parse(text)) if text else ():
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == \
                "amdgpu_targets":
            return tuple(ast.literal_eval(node.value))
    return ()


@cache
def llvm_minimums() -> dict[str, str]:
    """amdgpu_target -> the lowest llvm-amdgpu (a ROCm release) that compiles for it."""
    pattern = r'depends_on\("llvm-amdgpu@([\d.]+):", when="amdgpu_target=(\w+)"\)'
    return {t: v for v, t in re.findall(pattern, _builtin("build_systems/rocm.py"))}


@cache
def torch_rocm_rules() -> tuple[tuple[str, str, str, str], ...]:
    """Builtin py-torch's ROCm bounds: (torch low, torch high, rocm low, rocm high).

    From ``conflicts("+rocm", when="@X")`` (no ROCm at all: ``('X', 'X', '', '-')``)
    and ``depends_on("composable-kernel@LO:HI", when="@...")`` under ``+rocm``.
    """
    text = _builtin("packages/py_torch/package.py")
    out = [(w, w, "", "-") for w in re.findall(r'conflicts\("\+rocm", when="@([\d.]+)"', text)]
    for ck, when in re.findall(
            r'depends_on\("composable-kernel@([\d.:]+)", when="@([\d.:]+)"\)', text):
        t_lo, _, t_hi = when.partition(":") if ":" in when else (when, "", when)
        r_lo, _, r_hi = ck.partition(":")
        out.append((t_lo, t_hi, r_lo, r_hi))
    return tuple(out)


def torch_rocm_problem(torch: str, rocm: str) -> str | None:
    """The ROCm range builtin requires for ``torch`` that ``rocm`` is outside, or None."""
    for t_lo, t_hi, r_lo, r_hi in torch_rocm_rules():
        if not torches._within(torch, t_lo, t_hi):
            continue
        if r_hi == "-":
            return "none (builtin py-torch conflicts +rocm there)"
        if not torches._within(rocm, r_lo, r_hi):
            return f"{r_lo}:{r_hi}"
    return None


def _models(model: str) -> list[tuple[str, str]]:
    """(name, target) of each AMD model ``gpu.model`` names, longest names first."""
    models = table()["amd"]["models"]
    found = []
    for name in sorted(models, key=len, reverse=True):
        if re.search(rf"\b{name}\b", model.lower()) and not any(name in f for f, _ in found):
            found.append((name, str(models[name])))
    return found


def _base(target: str) -> str:
    """``gfx90a:xnack-`` -> ``gfx90a`` (the feature suffix selects a build mode)."""
    return target.split(":")[0]


def problems(data: dict[str, Any], build: bool = True) -> list[Problem]:
    """Every vendor rule's problem in a schema-valid site file (torchmpi.checks' RULES).

    ``build``: also the AMD rules that read the package repositories (all but
    the mixed-vendor keys).
    """
    gpu = data.get("gpu")
    out = (_mixed(gpu) if isinstance(gpu, dict) else []) + _centre(data)
    if of(data) != "amd" or not isinstance(gpu, dict) or not build:
        return out
    targets, rocm = amdgpu_targets(gpu), rocm_version(data)
    where = ("gpu", "amdgpu_target")
    known = known_targets()
    gtl_archs = [str(a) for a in table()["amd"]["gtl_archs"]]
    mpi = data.get("mpi") or {}
    for target in targets:
        if known and target not in known:
            out.append((where, (
                f"{target!r} is not an AMD GPU target builtin ROCmPackage knows; allowed:"
                f" {', '.join(known)} (build_systems/rocm.py amdgpu_targets)")))
            continue
        low = llvm_minimums().get(target)
        if low and rocm and torches._vt(rocm) < torches._vt(low):
            out.append((where, (
                f"{target!r} needs ROCm {low} or newer (builtin ROCmPackage: llvm-amdgpu@{low}:"
                f" for it), and the site's ROCm is {rocm} (gpu.rocm.version); allowed: a"
                f" target ROCm {rocm} compiles for, or ROCm {low} or newer")))
        if (mpi.get("kind") == "cray-mpich" and mpi["cuda_aware"]
                and _base(target) not in gtl_archs):
            out.append((where, gtl_refusal(target, f"Cray's GTL for HSA ({gtl('amd')})",
                                           "amdgpu_target", gtl_archs)))
    models = _models(str(gpu.get("model") or ""))
    wanted = list(dict.fromkeys(t for _, t in models))
    for target in targets:
        if wanted and _base(target) not in wanted:
            out.append((where, (
                f"{target!r} is not the target of the {gpu['model']} (AMD, rocm.docs.amd.com"
                f" reference/gpu-arch-specs: {', '.join(wanted)}); allowed:"
                f" {', '.join(wanted)}")))
    if data.get("nccl"):
        out.append((("nccl",), (
            "nccl pins NVIDIA's NCCL and its plugin; an AMD site's RCCL is its ROCm release"
            " (gpu.rocm.version) and the plugin is the one vouched with it; allowed: no nccl"
            " key (docs/sites.md)")))
    out += _rocm_torch(data, rocm)
    out += _rocm_vouched(data, rocm)
    return out


def _centre(data: dict[str, Any]) -> list[Problem]:
    """``runtime.centre``: a centre the fabric data has for the site's GPU vendor, whose
    values the renderings can carry (no ``$``: a module cannot expand a job's variable)."""
    name = (data.get("runtime") or {}).get("centre")
    if name is None:
        return []
    fabric, vendor = data.get("fabric"), of(data)
    vendors = fabric_vendors(str(fabric)) if fabric else {}
    centres = (vendors.get(vendor) or {}).get("centres") or {}
    usable = [c for c, block in centres.items()
              if not any("$" in str(v.get("value")) for v in (block.get("env") or {}).values())]
    where = ("runtime", "centre")
    if name in usable:
        return []
    if name in centres:
        why = (f"{name}'s values refer to job variables ('$': data/fabrics/{fabric}.yaml), which"
               " a module or env_vars cannot expand; state them in the job script instead")
    else:
        why = (f"{name!r} is no centre of data/fabrics/{fabric}.yaml for"
               f" gpu.vendor {vendor or 'none (a CPU-only site)'}")
    return [(where, f"{why}; allowed: {', '.join(usable) or 'no runtime.centre'}")]


def _mixed(gpu: dict[str, Any]) -> list[Problem]:
    """Keys of the other vendor in the ``gpu`` section (``cuda_arch`` with vendor: amd)."""
    vendor = str(gpu["vendor"])
    other = {"amd": ("cuda_arch", "cuda", "cudnn"), "nvidia": ("amdgpu_target", "rocm")}[vendor]
    return [(("gpu", key), (
        f"{key} is for {'NVIDIA' if vendor == 'amd' else 'AMD'} GPUs and this gpu section says"
        f" vendor: {vendor}; allowed here: "
        + ("amdgpu_target, rocm" if vendor == "amd" else "cuda_arch, cuda, cudnn")
        + " (one GPU vendor per site file)")) for key in other if key in gpu]


def _rocm_torch(data: dict[str, Any], rocm: str | None) -> list[Problem]:
    """Pinned torch releases the site's ROCm cannot build; unpinned: refused if none can."""
    if not rocm:
        return []
    pinned = torches.versions(data)
    current = [v for v, old in torches.builtin_releases().items() if not old]
    candidates = list(dict.fromkeys(current + list(torches.VERIFIED)))
    can = [v for v in candidates if not torch_rocm_problem(v, rocm)]
    out = []
    for i, version in enumerate(pinned):
        needs = torch_rocm_problem(version, rocm)
        if needs and version in torches.builtin_releases():
            out.append((("torch", "versions", i), (
                f"torch {version} needs ROCm {needs} (builtin py-torch +rocm), this site has"
                f" ROCm {rocm} (gpu.rocm.version); releases it can build:"
                f" {', '.join(can) or 'none'}, or another gpu.rocm")))
    if not pinned and current and not [v for v in current if not torch_rocm_problem(v, rocm)]:
        out.append((("gpu", "rocm", "version"), (
            f"no current py-torch release can be built with ROCm {rocm} (builtin py-torch +rocm:"
            f" {', '.join(f'{v} needs {torch_rocm_problem(v, rocm)}' for v in current)});"
            " allowed: a newer ROCm, or torch.versions naming a release that can")))
    return out


def _rocm_vouched(data: dict[str, Any], rocm: str | None) -> list[Problem]:
    """A Slingshot AMD site's ROCm (its RCCL) without a vouched RCCL/plugin pair."""
    if not rocm or data.get("fabric") != "slingshot":
        return []  # the table is read for a Slingshot AMD site only: a bad row is its refusal
    vouched = pairs.vouched_rccl()
    if not vouched:
        return []
    if pairs.rccl(rocm):
        return []
    listed = "; ".join(f"{p.rocm} (aws-ofi-nccl {p.plugin}, {p.by})" for p in vouched)
    return [(("gpu", "rocm", "version"), (
        f"ROCm {rocm}: RCCL is ROCm's release, and no source vouches for RCCL {rocm} with the"
        f" aws-ofi-nccl plugin on Slingshot; allowed: {listed} (VOUCHED_RCCL_PAIRS,"
        " docs/design.md)"))]
