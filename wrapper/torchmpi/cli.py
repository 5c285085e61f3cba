"""The `torchmpi` command line (placeholder until the verbs land)."""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    print("torchmpi: no verbs yet", file=sys.stderr)
    return 2
