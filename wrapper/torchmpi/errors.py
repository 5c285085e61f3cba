"""Errors the whole package shares, at the bottom of the import graph.

Library modules (site, render, spackrun, ...) raise :class:`UserError`; only the
CLI catches it and prints it without a traceback.  Keeping it here rather than
in :mod:`torchmpi.cli` means no library module imports the command line (the
same layering as Spack's ``spack/error.py``).
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by input the user controls: printed without a traceback."""


class InternalError(Exception):
    """A torchmpi bug, not the user's input: text torchmpi rendered that does not parse
    back to the data it was built from.  The CLI prints it without a traceback, asks for
    a report and exits with ``EX_SOFTWARE`` (70, sysexits.h's "internal software error"),
    so a script can tell it from a refused input (2)."""
