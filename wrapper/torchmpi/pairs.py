"""The vouched NCCL/aws-ofi-nccl and RCCL/aws-ofi-nccl pairs, read from the nccl-ss11 package.

The package (``spack_repo/torchmpi/packages/nccl_ss11/package.py``,
``VOUCHED_PAIRS`` and ``VOUCHED_RCCL_PAIRS``) is what Spack enforces; this
module reads those same literals through :func:`torchmpi.paths.package_rows`
(:mod:`ast`, no Spack import, a few milliseconds) so that a site file pinning a
pair outside them is refused when the site is loaded, not after a solve of
minutes, and so that a Slingshot site naming no pair gets one that a source
pairs for Slingshot.  Each table has two readers, Spack and this module (the
only one in the wrapper): they cannot disagree.  Each row says what kind of
record vouches for it (:data:`EVIDENCE`), and every message words the pair as
that record is: a build script or a deployed environment is not a run.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import NamedTuple

from torchmpi import paths
from torchmpi.errors import UserError

#: The GPU vendor whose collectives the pairs serve: nccl-ss11, the table's home, is
#: NCCL for NVIDIA GPUs (a CudaPackage that requires ``+cuda``).  An AMD site's RCCL
#: pairs are a table of their own (``VOUCHED_RCCL_PAIRS``, :func:`vouched_rccl`).
VENDOR = "nvidia"

#: The package whose file holds both tables (Python's spelling of nccl-ss11).
_PACKAGE = "nccl_ss11"

#: The fabrics of the tables, as messages name them.
_FABRIC = {"slingshot": "Slingshot", "efa": "EFA"}

#: The kinds of record that vouch for a pair (both tables' evidence column), each as
#: a message labels a pair: who vouches, for which fabric, by what.  Only a job log
#: records a run; a recipe, a guide's build steps or a build script build the pair, a
#: centre deploys an environment that carries it, release notes list it.  The plugin's
#: release notes list the NCCL releases it was tested with or supports, for no fabric
#: (the table's "efa" says where AWS runs it), so their label names none.
EVIDENCE = {
    "build recipe": "built for {fabric} by {by}'s build recipe",
    "build steps": "built for {fabric} by {by}'s documented build steps",
    "build script": "built for {fabric} by {by}'s build script",
    "deployed environment": "deployed on {fabric} by {by}",
    "release notes": "listed in {by}'s release notes of the plugin",
    "job log": "run on {fabric} by {by}",
}


@dataclass(frozen=True)
class Pair:
    """One vouched pair, who vouches for it and by what kind of record."""

    nccl: str
    plugin: str
    libfabric: str
    fabric: str  # "slingshot" (HPE, CSCS, NCAR) or "efa" (AWS's release notes)
    by: str
    source: str
    evidence: str  # a kind of EVIDENCE

    @property
    def label(self) -> str:
        """For which fabric, by whom, by what record and with which libfabric, for
        messages and pins: ``built for Slingshot by NCAR's build script with libfabric
        1.15.2.0``, worded as the evidence is (only a job log says "run").

        The libfabric is named because a site's may differ from it (Perlmutter's
        1.20.1 against the 2.4.0 of CSCS's environment with 2.29.2-1 + 1.17.2), which
        :func:`torchmpi.checks.network.notes` says at render; the release notes' pairs
        record none (``-``) and the label says nothing about one.
        """
        fabric = _FABRIC.get(self.fabric, self.fabric)
        lib = f" with libfabric {self.libfabric}" if self.libfabric != "-" else ""
        return EVIDENCE[self.evidence].format(fabric=fabric, by=self.by) + lib


#: The same kinds (:data:`EVIDENCE`) as the rendered packages.yaml says who vouches
#: for an RCCL pair (``VOUCHED_RCCL_PAIRS``' evidence column): only a job log says "ran".
RCCL_EVIDENCE = {
    "build recipe": "{by}'s build recipe pairs with",
    "build steps": "{by}'s documented build steps pair with",
    "build script": "{by}'s build script pairs with",
    "deployed environment": "{by}'s deployed environment pairs with",
    "release notes": "{by}'s release notes pair with",
    "job log": "{by} ran with",
}


class RcclPair(NamedTuple):
    """One row of ``VOUCHED_RCCL_PAIRS``, every column kept: the plugin a packages.yaml
    pins and the words saying who vouches for it come from the same row."""

    rocm: str  # the ROCm release, which is RCCL's
    plugin: str  # aws-ofi-nccl built --with-rocm
    libfabric: str  # the source's, or "-" where it names none
    fabric: str
    by: str
    source: str
    evidence: str  # a kind of EVIDENCE

    @property
    def vouching(self) -> str:
        """Who vouches for the pair and by what kind of record, worded for a comment
        (``LUMI's build recipe pairs with``): only a job log says "ran"."""
        return RCCL_EVIDENCE[self.evidence].format(by=self.by)


@functools.cache
def vouched_rccl() -> tuple[RcclPair, ...]:
    """Every row of ``VOUCHED_RCCL_PAIRS``, in the file's order; none where the package
    file or the table is absent (an installed tool without the checkout's repository:
    no rule of an AMD site then reads them)."""
    try:
        rows = _rows(paths.package_file(_PACKAGE), "VOUCHED_RCCL_PAIRS",
                     lambda row: f"ROCm {row[0]}")
    except (OSError, LookupError):
        return ()
    return tuple(RcclPair(*row) for row in rows)


def rccl(rocm: str) -> RcclPair | None:
    """The pair vouched for RCCL ``rocm`` (the site's ROCm release), or None."""
    return next((p for p in vouched_rccl() if p.rocm == rocm), None)


def _rows(path: Path, table: str, which: Callable[[tuple], str]) -> list[tuple]:
    """The rows of nccl-ss11's ``table``, read by :func:`torchmpi.paths.package_rows` (the
    one parser of a package's literals), each row's evidence checked (:func:`_evidence`,
    the row named by ``which``); a malformed table is the checkout's error, said at its
    line and column.  ``path`` is the package file, resolved once by the caller: the file
    read is the file every message names."""
    try:
        rows = paths.package_rows(path, table)
    except paths.MalformedTable as err:
        raise UserError(f"{err}; allowed: a tuple of rows of 7 literal columns") from None
    for row in rows:
        _evidence(path, table, which, row)
    return [row.value for row in rows]


def _evidence(path: Path, table: str, which: Callable[[tuple], str], row: paths.Row) -> str:
    """The row's evidence kind (its seventh column), refused at the row's line and column
    unless :data:`EVIDENCE` knows it: every message's wording depends on it."""
    value = row.value
    kind = value[6] if isinstance(value, tuple) and len(value) == 7 else None
    if kind not in EVIDENCE:
        name = which(value) if isinstance(value, tuple) and len(value) >= 2 else repr(value)
        raise UserError(f"{path}:{row.line}:{row.col}: {table}, the row of {name}: evidence"
                        f" {kind!r} is no known kind (a row has 7 columns, the last one the"
                        f" kind); allowed: {', '.join(EVIDENCE)}")
    return kind


def _key(version: str) -> tuple[int, ...]:
    """Sort key of an NCCL or plugin release (``2.21.5-1`` -> (2, 21, 5, 1))."""
    return tuple(int(p) for p in version.replace("-", ".").split(".") if p.isdigit())


@functools.cache
def vouched() -> tuple[Pair, ...]:
    """Every vouched pair, newest NCCL first, then newest plugin."""
    path = paths.package_file(_PACKAGE)
    try:
        rows = _rows(path, "VOUCHED_PAIRS",
                     lambda row: "NCCL " + " with ".join(map(str, row[:2])))
    except OSError as err:
        raise UserError(f"{path}: cannot read the vouched NCCL pairs: {err.strerror}") from None
    except LookupError:
        raise UserError(f"{path}: no VOUCHED_PAIRS table") from None
    pairs = [Pair(*row) for row in rows]
    return tuple(sorted(pairs, key=lambda p: (_key(p.nccl), _key(p.plugin)), reverse=True))


def choose(nccl: dict) -> Pair | None:
    """The pair a Slingshot site gets: its pin completed with a plugin paired for Slingshot.

    No pin: the newest pair vouched for Slingshot.  NCCL pinned without a plugin:
    the newest plugin vouched for Slingshot with that NCCL, else None (the solver
    picks among the vouched ones).  Both pinned: that pair.
    """
    version, plugin = nccl.get("version"), nccl.get("plugin")
    for pair in vouched():
        if version not in (None, pair.nccl) or plugin not in (None, pair.plugin):
            continue
        if plugin is not None or pair.fabric == "slingshot":
            return pair
    return None
