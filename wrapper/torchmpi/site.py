"""Site files: find, read, parse and validate ``sites/<name>.yaml``.

This is the one site loader: render, sites, concretize and doctor all call
:func:`load`, so a file that one verb accepts no other verb rejects.  Every
error names the file, the line and column, the key path and what is allowed,
so an admin can fix a site file without reading this code.

Reading and parsing (ruamel.yaml: duplicate keys, non-UTF-8 and size, each
at file:line:column) is :mod:`torchmpi.sitefile`.  Every check (the JSON
schema ``schema/site.schema.json`` and the rules a schema cannot say well) is
:mod:`torchmpi.checks`, one module per concern; nothing is rendered from a
site that fails.
"""

from __future__ import annotations

import difflib
import hashlib
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

from torchmpi import cudaaware, detect, gpuvendor, paths, runtime, torches
from torchmpi.autokeys import AUTO_KEYS, LOCAL, auto_keys
from torchmpi.checks import network, refusals, validate
from torchmpi.checks.common import Problem
from torchmpi.checks.gpu import cuda_archs
from torchmpi.checks.schema import fill_defaults
from torchmpi.errors import UserError
from torchmpi.sitefile import MAX_BYTES, _fmt_path, parse  # noqa: F401 (re-exported)


@dataclass
class Site:
    """A validated site file."""

    name: str
    path: Path
    data: dict[str, Any]
    raw: bytes
    detected: dict[str, Any] = field(default_factory=dict)
    #: Each key path's (line, column) in the file, for :meth:`refuse`.
    lines: dict[tuple, tuple[int, int]] = field(default_factory=dict, repr=False)

    #: Keys the local site may set to ``auto`` (see :data:`AUTO_KEYS`).
    auto_keys = AUTO_KEYS

    def refuse(self, found: list[Problem], what: str) -> UserError:
        """Problems a verb finds (``torchmpi container``'s), each at its key's line and
        column, worded as the load-time checks word theirs (:func:`torchmpi.checks.refusals`)."""
        return refusals(self.path, self.lines, found, what)

    @property
    def is_local(self) -> bool:
        """Whether this is the host-detected local site (the only one allowed ``auto``)."""
        return self.name == LOCAL

    @property
    def cross_family(self) -> bool:
        """Whether the compute nodes' CPU family differs from this host's (aarch64 from x86_64).

        Spack considers a target outside the host's family only when a root spec
        names it; the local site is this host, so never cross-family.
        """
        import archspec.cpu

        target = archspec.cpu.TARGETS.get(str(self.data.get("target")))
        if self.is_local or target is None:
            return False
        return target.family != detect.host().family

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def gpu(self) -> dict[str, Any] | None:
        gpu = self.data.get("gpu")
        return gpu if isinstance(gpu, dict) else None

    @property
    def gpu_vendor(self) -> str | None:
        """``nvidia`` (the schema's default) or ``amd``; None on a CPU-only site."""
        return gpuvendor.of(self.data)

    @property
    def rocm(self) -> dict[str, Any] | None:
        """An AMD site's ``gpu.rocm`` (version, prefix, modules), else None."""
        return self.gpu.get("rocm") if self.gpu and self.gpu_vendor == "amd" else None

    @property
    def amdgpu_targets(self) -> list[str]:
        """An AMD site's GPU targets (``['gfx90a']``); empty otherwise."""
        return gpuvendor.amdgpu_targets(self.gpu) if self.rocm else []

    @property
    def gtl_library(self) -> str | None:
        """Cray's GTL for this site's GPUs (``libmpi_gtl_cuda``, ``libmpi_gtl_hsa``),
        from data/gpu_vendors.yaml; None on a CPU-only site."""
        return gpuvendor.gtl(self.gpu_vendor) if self.gpu_vendor else None

    @property
    def cuda_archs(self) -> list[str]:
        """The site's CUDA architectures, one per GPU model (``[80, 86]``, ``'80,86'``)."""
        return cuda_archs(self.gpu) if self.gpu and self.gpu_vendor == "nvidia" else []


    @property
    def cuda_arch(self) -> str | None:
        """``cuda_arch`` as Spack writes the variant: ``80``, or ``80,86`` for several."""
        return ",".join(self.cuda_archs) if self.cuda_archs else None

    @property
    def sm_arch(self) -> str | None:
        """The architectures as NVIDIA names them for people and ReFrame: ``sm_80,sm_86``."""
        if self.amdgpu_targets:  # AMD names its architectures so (ReFrame's device arch)
            return ",".join(self.amdgpu_targets)
        return ",".join(f"sm_{a}" for a in self.cuda_archs) if self.gpu else None

    @property
    def libfabric_release(self) -> str | None:
        """The libfabric release the site file names (``libfabric.spec``); None without
        one.  All a site that loads libfabric by module says of it (LUMI-G)."""
        return network.libfabric_release(self.data)

    @property
    def torch_cuda_aware(self) -> bool:
        """The torch variant: the root is ``+cuda_aware_mpi``, so PyTorch's MPI backend
        takes CUDA tensors (a GPU site, unless ``mpi.cuda_aware: false``)."""
        return cudaaware.torch_variant(self.data)

    @property
    def mpi_moves_device_buffers(self) -> bool:
        """The MPI itself moves CUDA buffers (mpi4py's, or torch's where the variant is on).

        Not the same question as :attr:`torch_cuda_aware`: ``openmpi-cuda`` and a
        centre's MPI declared ``+cuda`` move them even under ``~cuda_aware_mpi``
        (:mod:`torchmpi.cudaaware`).
        """
        return cudaaware.mpi_moves_device_buffers(self.data)

    @property
    def root_spec(self) -> str:
        """The ``py-torch-mpi`` root every environment of the site installs (native and
        container), before the target and torch release each adds."""
        return self._root(self.torch_cuda_aware)

    def _root(self, cuda_aware_mpi: bool) -> str:
        root = "py-torch-mpi"
        # Explicit either way: the solver does not have to honour a variant default.
        variant = " +cuda_aware_mpi" if cuda_aware_mpi else " ~cuda_aware_mpi"
        if self.amdgpu_targets:
            root += f" ~cuda +rocm amdgpu_target={','.join(self.amdgpu_targets)}" + variant
        elif self.gpu:
            root += f" +cuda cuda_arch={self.cuda_arch}" + variant
        else:
            root += " ~cuda"
        return root + f" fabric={self.data['fabric']}"

    def image_roots(self, target: str, device_buffers: bool = True) -> list[str]:
        """The roots of a container image of the site, each at the image's ``target``.

        ``device_buffers=False``: the image's MPI cannot take device buffers (the AMD
        image's MPICH ABI stand-in, :mod:`torchmpi.container.plan`), so the torch
        variant is off whatever :attr:`torch_cuda_aware` answers.  A ROCm image is one
        (ROCm, torch) pair that builtin py-torch accepts (checked at load), so its root
        pins the site's first torch release as the native root pins it.
        """
        root = self._root(self.torch_cuda_aware and device_buffers)
        out = [f"{spec} target={target}" for spec in (root, *self.data["extra_specs"])]
        releases = torches.versions(self.data) if self.rocm else []
        if releases:  # after the target: `^` starts the dependency's constraints
            out[0] += f" ^py-torch@={releases[0]}"
        return out

    @property
    def mpi_spec(self) -> str:
        """The MPI as Spack names it (``cray-mpich@8.1.27``; the kind alone without a
        version): packages.yaml's requirement and external, ``torchmpi sites``."""
        mpi = self.data["mpi"]
        return mpi["kind"] + (f"@{mpi['version']}" if mpi.get("version") else "")

    @property
    def mpi_module(self) -> str:
        """The MPI as a module name (``cray-mpich/8.1.27``): what modules.yaml and the
        ReFrame environment name where the site loads it."""
        mpi = self.data["mpi"]
        return mpi["kind"] + (f"/{mpi['version']}" if mpi.get("version") else "")

    @cached_property
    def runtime(self) -> runtime.Runtime:
        """The site's runtime variables resolved once (fabric defaults, the GPU vendor's
        and centre's layers, the site's own values): every output reads these."""
        return runtime.resolve(self.data)

    @property
    def environment(self) -> dict[str, str]:
        """The variables a job has after sourcing runtime.sh (``set`` only), in order."""
        return dict(self.runtime.set)

    def summary(self) -> str:
        """One line for ``torchmpi sites``."""
        d = self.data
        gpu = self.sm_arch if self.gpu else ("gpu:auto" if d.get("gpu") else "cpu-only")
        mpi = self.mpi_spec
        return f"{d['target']}, {gpu}, {mpi}, {d['fabric']}, {d['launcher']} -- {d['description']}"


def available() -> list[str]:
    """Names of the shipped sites (file stems under sites/)."""
    return sorted(p.stem for p in paths.sites_dir().glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A site name or a path to a site file; unknown names get close suggestions."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_file():
            what = "is not a regular file" if candidate.exists() else "no such site file"
            raise UserError(f"{name_or_path}: {what}")
        return candidate
    path = paths.sites_dir() / f"{name_or_path}.yaml"
    if path.is_file():
        return path
    if path.exists():  # a directory, a FIFO (open would block), /dev/zero behind a symlink
        raise UserError(f"{path}: is not a regular file")
    names = available()
    close = difflib.get_close_matches(name_or_path, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UserError(
        f"unknown site {name_or_path!r}{hint} (known sites: {', '.join(names) or 'none'};"
        f" site files live in {paths.sites_dir()})"
    )


def load(name_or_path: str, build_rules: bool = True) -> Site:
    """Find, read, parse and validate a site; for ``local`` fill in detected host facts.

    ``build_rules=False`` is for the doctor of an installed tool: it skips the rules
    that read the package repositories (render and concretize apply them).
    """
    path = resolve(name_or_path)
    data, lines, raw = parse(path)
    validate(path, data, lines, build_rules)
    site = Site(name=data["name"], path=path, data=data, raw=raw, lines=lines)
    if auto_keys(data):
        detect.fill_in(site)
        fill_defaults(site.data)  # the defaults of what detection filled in
    return site
