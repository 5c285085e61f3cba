"""Where the checkout's data lives (sites, templates, environments, pins).

The wrapper is installed editable from the checkout, so the checkout root is
two levels above this package; ``TORCHMPI_ROOT`` (set by setup-env.sh) wins so
that a copy of the wrapper installed elsewhere still finds the site files.
"""

from __future__ import annotations

import os
from pathlib import Path


def root() -> Path:
    env = os.environ.get("TORCHMPI_ROOT")
    if env and (Path(env) / "sites").is_dir():
        return Path(env)
    return Path(__file__).resolve().parents[2]


def sites_dir() -> Path:
    return root() / "sites"


def templates_dir() -> Path:
    return root() / "templates"


def environments_dir() -> Path:
    return root() / "environments"


def torchmpi_repo() -> Path:
    return root() / "spack_repo" / "torchmpi"


def pins() -> dict[str, str]:
    """The Spack and builtin-repo pins from scripts/pins.sh (the single source)."""
    out: dict[str, str] = {}
    for line in (root() / "scripts" / "pins.sh").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip("'\"")
    return out
