"""Errors the whole package shares, at the bottom of the import graph.

Library modules (site, render, spackrun, ...) raise :class:`UserError`; only the
CLI catches it and prints it without a traceback.  Keeping it here rather than
in :mod:`torchmpi.cli` means no library module imports the command line (the
same layering as Spack's ``spack/error.py``).
"""

from __future__ import annotations


class UserError(Exception):
    """An error caused by input the user controls: printed without a traceback."""
