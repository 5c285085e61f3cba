"""What every check module shares: the problem type and version tuples.

Imports nothing from torchmpi, so any check module may use it.
"""

from __future__ import annotations

import re

#: One refusal: (key path in the site file, message saying what is allowed).
#: :func:`torchmpi.checks.validate` turns it into ``file:line:column: key: message``.
Problem = tuple[tuple, str]


def vtuple(text: str) -> tuple[int, ...]:
    """The numbers of a version, for ordering: ``12.2.0`` -> ``(12, 2, 0)``."""
    return tuple(int(p) for p in re.findall(r"\d+", text))
