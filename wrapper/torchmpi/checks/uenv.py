"""``uenv``: CSCS's squashfs stack and the prefixes that lie in it.

Prefixes under ``/user-environment`` without a ``uenv`` (the stack is mounted
there only inside ``uenv start`` or ``srun --uenv``; the directory is empty
otherwise, cscs-docs docs/software/uenv/using.md), or a ``uenv`` on a site
with nothing there.
"""

from __future__ import annotations

from typing import Any

from torchmpi.checks.common import Problem

#: Where a uenv is mounted unless a label says otherwise (cscs-docs
#: docs/software/uenv/using.md: "most often /user-environment"; eth-cscs/cscs-reframe-tests
#: config/utilities/uenv.py ``_UENV_MOUNT_DEFAULT``).
UENV_MOUNT = "/user-environment"

def _under_uenv_mount(node: Any, path: tuple = ()) -> list[tuple]:
    """Key paths of every string in ``node`` that is a path under :data:`UENV_MOUNT`."""
    if isinstance(node, dict):
        return [p for k, v in node.items() for p in _under_uenv_mount(v, path + (k,))]
    if isinstance(node, list):
        return [p for i, v in enumerate(node) for p in _under_uenv_mount(v, path + (i,))]
    if isinstance(node, str) and (node == UENV_MOUNT or node.startswith(UENV_MOUNT + "/")):
        return [path]
    return []

def _uenv(data: dict[str, Any]) -> list[Problem]:
    """A uenv and the prefixes that need it come together.

    Prefixes under /user-environment without ``uenv``: nothing starts the uenv, so
    every compiler, external and runtime path there is missing when the job runs.
    ``uenv`` with nothing there: the site would mount a stack it does not use.
    """
    inside = _under_uenv_mount({k: v for k, v in data.items() if k != "uenv"})
    if data.get("uenv") is None and inside:
        return [(inside[0], (
            f"lies under {UENV_MOUNT}, which holds software only inside a started uenv,"
            " and the site file has no uenv to start (it would be empty when the job"
            f" runs; {len(inside)} value(s) there); allowed: uenv: {{image:"
            " NAME/VERSION[:TAG], view: VIEW}, or paths outside " + UENV_MOUNT))]
    if isinstance(data.get("uenv"), dict) and not inside:
        return [(("uenv",), (
            f"nothing in the site file lies under {UENV_MOUNT}, where the uenv is"
            " mounted, so starting it serves nothing here; allowed: no uenv key, or"
            f" prefixes under {UENV_MOUNT}"))]
    return []


def problems(data: dict[str, Any], build: bool) -> list[Problem]:
    """Applied by every loader, an installed tool's doctor included."""
    return _uenv(data)
