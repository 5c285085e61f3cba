"""``runtime``: values the renderings (runtime.sh, modules, Spack's env_vars) cannot
carry faithfully: a ``$`` reference, a variable both set and added to."""

from __future__ import annotations

from typing import Any

from torchmpi import runtime
from torchmpi.checks.common import Problem


def _values(data: dict[str, Any]) -> list[Problem]:
    """(key path, message) for runtime values the renderings cannot carry faithfully."""
    errors: list[Problem] = []
    site = data.get("runtime")
    if not isinstance(site, dict):
        return errors
    for section in ("env", *runtime.PATH_OPS):
        values = site.get(section)
        if not isinstance(values, dict):
            continue
        for key, value in values.items():
            if "$" in str(value):
                errors.append((("runtime", section, key), (
                    f"{str(value)!r} refers to a variable ('$'); runtime values are literal"
                    " and `env` replaces the job's own value. To add to a path list use"
                    f" runtime.prepend_path or runtime.append_path: {{{key}: <dir>}}"
                    " (docs/sites.md, runtime)")))
    for op in runtime.PATH_OPS:
        for key in (site.get(op) or {}) if isinstance(site.get(op), dict) else ():
            if key in (site.get("env") or {}):
                errors.append((("runtime", op, key), (
                    f"{key} is also in runtime.env; a variable is either set or"
                    " added to, not both")))
    return errors


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """Applied by every loader, an installed tool's doctor included."""
    return _values(data)
