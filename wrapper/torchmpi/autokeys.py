"""Which keys of the ``local`` site may say ``auto``, and which ones a site's data does.

Both the loader (:mod:`torchmpi.site`, which validates and calls detection) and
detection (:mod:`torchmpi.detect`, which fills the keys in) need this one list;
it lives here, below both, so that neither has to import the other to read it.
Imports nothing from torchmpi.
"""

from __future__ import annotations

from typing import Any

#: The site that describes this host; the only one whose keys may be ``auto``.
LOCAL = "local"

#: Keys (dotted paths) that the local site may set to ``auto``, in the order
#: :func:`torchmpi.detect.fill_in` replaces them (the MPI choice depends on the GPU).
AUTO_KEYS = ("target", "compilers", "gpu", "mpi.kind", "externals")


def get(data: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted key path, or None where any level is missing."""
    value: Any = data
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def auto_keys(data: dict[str, Any]) -> list[str]:
    """The keys of :data:`AUTO_KEYS` that ``data`` sets to ``auto``."""
    return [key for key in AUTO_KEYS if get(data, key) == "auto"]
