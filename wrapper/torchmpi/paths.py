"""Where things live: the checkout's data, the pinned Spack and its caches.

One resolver for every Python consumer (spackrun, bench, the test fixtures),
with the rules of ``scripts/paths.sh``, which the shell side (setup-env.sh,
get-spack.sh) sources; both read the pins from ``scripts/pins.sh``:

* cache: ``$TORCHMPI_CACHE``, else ``${XDG_CACHE_HOME:-~/.cache}/torchmpi``;
* Spack: ``$TORCHMPI_SPACK_ROOT``; else ``$SPACK_ROOT`` when it is another
  Spack than the cached pinned one (an existing Spack, by request); else
  ``<cache>/spack-<TORCHMPI_SPACK_TAG>``;
* builtin packages: ``$TORCHMPI_PACKAGES_ROOT``, else
  ``<cache>/spack-packages-<TORCHMPI_SPACK_PACKAGES_TAG>``; the builtin
  repository is always ``repos/spack_repo/builtin`` below it;
* Spack's user cache: ``$SPACK_USER_CACHE_PATH``, else ``<cache>/user-cache``.

The wrapper is installed editable from the checkout, so the checkout root is
two levels above this package; ``TORCHMPI_ROOT`` (set by setup-env.sh) wins so
that a copy of the wrapper installed elsewhere still finds the site files.
Data the tool itself needs (schema, fabric defaults, and the site files for an
installed doctor) is package data and does not depend on the checkout.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path
from typing import Any, NamedTuple


def root() -> Path:
    env = os.environ.get("TORCHMPI_ROOT")
    if env and (Path(env) / "sites").is_dir():
        return Path(env)
    return Path(__file__).resolve().parents[2]


def sites_dir() -> Path:
    """The checkout's ``sites/``; outside a checkout (an installed tool), the
    copy the package carries as data (``torchmpi/sites``, a symlink to
    ``sites/`` in the checkout), so ``doctor --site NAME`` reads the site
    file the install was built from."""
    checkout = root() / "sites"
    if checkout.is_dir():
        return checkout
    return Path(__file__).resolve().parent / "sites"


def environments_dir() -> Path:
    return root() / "environments"


def torchmpi_repo() -> Path:
    return root() / "spack_repo" / "torchmpi"


def package_file(package: str) -> Path:
    """torchmpi's ``packages/<package>/package.py`` (``nccl_ss11``: Python's spelling)."""
    return torchmpi_repo() / "packages" / package / "package.py"


def _assigned(path: Path, text: str, name: str) -> ast.expr:
    """The value of the top-level ``name = ...`` of ``text`` (the file ``path``, which
    the caller has read); the first target only (``Y = Z = 1`` names Y), an annotated
    one not (``X: int = 0`` is no table)."""
    for node in ast.parse(text).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == name:
            return node.value
    raise LookupError(f"{path}: no {name}")


def package_constant(package: str, name: str) -> Any:
    """The literal ``name = ...`` at the top level of torchmpi's
    ``packages/<package>/package.py``, read with :mod:`ast`: the file imports Spack,
    and the wrapper reads its tables without it.  OSError where the file cannot be
    read, LookupError where it has no such literal."""
    path = package_file(package)
    return ast.literal_eval(_assigned(path, path.read_text(encoding="utf-8"), name))


class MalformedTable(ValueError):
    """A package's table that is no tuple of literal rows (the checkout's error)."""


class Row(NamedTuple):
    """One row of a package's literal table and where it starts (1-based, as every
    refusal says file:line:col)."""

    value: Any
    line: int
    col: int


def package_rows(path: Path, name: str) -> list[Row]:
    """The rows of the table ``name = (row, ...)`` of the package file ``path`` (the
    caller's :func:`package_file`, resolved once there, so the file a refusal names is
    the file read), each with its line and column, so that a refusal of one row can
    point at it.  OSError and LookupError as :func:`package_constant`;
    :class:`MalformedTable` (naming file:line:col) where the value is no tuple or list,
    or a row no literal.  The file is read once: the tree and the lines its columns are
    counted in are the same text."""
    text = path.read_text(encoding="utf-8")
    node = _assigned(path, text, name)
    # the tokenizer's lines: read_text made every \r\n and \r a \n, and no other
    # character ends a line for Python (str.splitlines() would also split at a form
    # feed, U+2028 and more, and count a column in the wrong line)
    lines = text.split("\n")

    def col(item: ast.expr) -> int:
        # ast counts a column in UTF-8 bytes; a refusal counts characters, as editors do
        return len(lines[item.lineno - 1].encode()[:item.col_offset].decode(errors="replace")) + 1

    if not isinstance(node, (ast.Tuple, ast.List)):
        raise MalformedTable(f"{path}:{node.lineno}:{col(node)}: {name} is no tuple or list"
                             " of rows")
    rows = []
    for elt in node.elts:
        try:
            value = ast.literal_eval(elt)
        except (ValueError, TypeError):  # TypeError: e.g. a set of lists, {[1]}
            raise MalformedTable(f"{path}:{elt.lineno}:{col(elt)}: {name}: the row"
                                 " is no literal") from None
        rows.append(Row(value, elt.lineno, col(elt)))
    return rows


def pins() -> dict[str, str]:
    """The Spack and builtin-repo pins from scripts/pins.sh (the single source)."""
    out: dict[str, str] = {}
    for line in (root() / "scripts" / "pins.sh").read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, value = line.split("=", 1)
            out[key.strip()] = value.strip().strip("'\"")
    return out


def cache() -> Path:
    if os.environ.get("TORCHMPI_CACHE"):
        return Path(os.environ["TORCHMPI_CACHE"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "torchmpi"


def spack_root() -> Path:
    if os.environ.get("TORCHMPI_SPACK_ROOT"):
        return Path(os.environ["TORCHMPI_SPACK_ROOT"])
    pinned = cache() / f"spack-{pins()['TORCHMPI_SPACK_TAG']}"
    requested = os.environ.get("SPACK_ROOT")
    if requested and Path(requested) != pinned:
        return Path(requested)
    return pinned


def packages_root() -> Path:
    if os.environ.get("TORCHMPI_PACKAGES_ROOT"):
        return Path(os.environ["TORCHMPI_PACKAGES_ROOT"])
    return cache() / f"spack-packages-{pins()['TORCHMPI_SPACK_PACKAGES_TAG']}"


def builtin_repo() -> Path:
    return packages_root() / "repos" / "spack_repo" / "builtin"


def user_cache() -> Path:
    """Spack's user cache (indexes, solver cache) outside ~/.spack."""
    return Path(os.environ.get("SPACK_USER_CACHE_PATH") or cache() / "user-cache")
