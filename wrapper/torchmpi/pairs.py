"""The vouched NCCL/aws-ofi-nccl pairs, read from the nccl-ss11 package.

The package (``spack_repo/torchmpi/packages/nccl_ss11/package.py``,
``VOUCHED_PAIRS``) is what Spack enforces; this module reads that same
literal with :mod:`ast` (no Spack import, a few milliseconds) so that a site
file pinning a pair outside it is refused when the site is loaded, not after
a solve of minutes, and so that a Slingshot site naming no pair gets one that
was run on Slingshot.  One table, two readers: they cannot disagree.
"""

from __future__ import annotations

import ast
import functools
from dataclasses import dataclass

from torchmpi import paths
from torchmpi.errors import UserError

#: The GPU vendor whose collectives the pairs serve: nccl-ss11, the table's home, is
#: NCCL for NVIDIA GPUs (a CudaPackage that requires ``+cuda``).  An AMD site's RCCL
#: pairs are a table of their own (``VOUCHED_RCCL_PAIRS``, :mod:`torchmpi.gpuvendor`).
VENDOR = "nvidia"

#: Who ran a pair, by the fabric it ran on, in the words messages use.
_WHERE = {"slingshot": "run on Slingshot", "efa": "tested on EFA"}


@dataclass(frozen=True)
class Pair:
    """One vouched pair and where it was run."""

    nccl: str
    plugin: str
    libfabric: str
    fabric: str  # "slingshot" (HPE, CSCS, NCAR) or "efa" (AWS release notes)
    by: str
    source: str

    @property
    def label(self) -> str:
        """Where, by whom and with which libfabric it ran, for messages and pins:
        ``run on Slingshot by NCAR with libfabric 1.15.2.0``.

        The libfabric is named because a site's may differ from it (Perlmutter's
        1.20.1 against the 2.4.0 CSCS ran 2.29.2-1 + 1.18.0 with), which
        :func:`torchmpi.checks.network.notes` says at render; the release notes' pairs
        record none (``-``) and the label says nothing about one.
        """
        ran = f" with libfabric {self.libfabric}" if self.libfabric != "-" else ""
        return f"{_WHERE.get(self.fabric, self.fabric)} by {self.by}{ran}"


#: The kinds of record that vouch for an RCCL pair (``VOUCHED_RCCL_PAIRS``' evidence
#: column), each as the rendered packages.yaml says who vouches: only a job log
#: records a run; a recipe, a guide's build steps or a build script build the pair.
RCCL_EVIDENCE = {
    "build recipe": "{by}'s build recipe pairs with",
    "build steps": "{by}'s documented build steps pair with",
    "build script": "{by}'s build script pairs with",
    "job log": "{by} ran with",
}


def rccl_vouching(rocm: str) -> str | None:
    """Who vouches for the plugin paired with RCCL ``rocm`` and by what kind of record,
    worded for a comment (``LUMI's build recipe pairs with``); None without a pair."""
    path = paths.torchmpi_repo() / "packages" / "nccl_ss11" / "package.py"
    try:
        rows = paths.package_constant("nccl_ss11", "VOUCHED_RCCL_PAIRS")
    except (OSError, LookupError):
        return None
    for row in rows:
        if row[0] != rocm:
            continue
        kind = row[6] if len(row) > 6 else None
        if kind not in RCCL_EVIDENCE:
            raise UserError(f"{path}: VOUCHED_RCCL_PAIRS, the row of ROCm {rocm}: evidence"
                            f" {kind!r} is no known kind; allowed: {', '.join(RCCL_EVIDENCE)}")
        return RCCL_EVIDENCE[kind].format(by=row[4])
    return None


def _key(version: str) -> tuple[int, ...]:
    """Sort key of an NCCL or plugin release (``2.21.5-1`` -> (2, 21, 5, 1))."""
    return tuple(int(p) for p in version.replace("-", ".").split(".") if p.isdigit())


@functools.cache
def vouched() -> tuple[Pair, ...]:
    """Every vouched pair, newest NCCL first, then newest plugin."""
    path = paths.torchmpi_repo() / "packages" / "nccl_ss11" / "package.py"
    try:
        tree = ast.parse(path.read_text())
    except OSError as err:
        raise UserError(f"{path}: cannot read the vouched NCCL pairs: {err.strerror}") from None
    for node in tree.body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "VOUCHED_PAIRS":
            rows = ast.literal_eval(node.value)
            pairs = [Pair(*row) for row in rows]
            return tuple(sorted(pairs, key=lambda p: (_key(p.nccl), _key(p.plugin)),
                                reverse=True))
    raise UserError(f"{path}: no VOUCHED_PAIRS table")


def choose(nccl: dict) -> Pair | None:
    """The pair a Slingshot site gets: its pin completed with a Slingshot-run plugin.

    No pin: the newest pair run on Slingshot.  NCCL pinned without a plugin:
    the newest plugin run on Slingshot with that NCCL, else None (the solver
    picks among the vouched ones).  Both pinned: that pair.
    """
    version, plugin = nccl.get("version"), nccl.get("plugin")
    for pair in vouched():
        if version not in (None, pair.nccl) or plugin not in (None, pair.plugin):
            continue
        if plugin is not None or pair.fabric == "slingshot":
            return pair
    return None
