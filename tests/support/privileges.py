"""A command line prefix that runs a command without root's capabilities.

Root passes every ``access(2)`` check by its capabilities (CAP_DAC_OVERRIDE,
CAP_DAC_READ_SEARCH), so a test of a refusal for a file or folder one may not
write or search proves nothing as root.  ``setpriv`` (util-linux) with an empty
bounding set and no inheritable capabilities makes uid 0 an owner like any other
for the command it runs; as another user no prefix is needed.
"""

from __future__ import annotations

import os
import shutil

import pytest


def without_root_capabilities() -> list[str]:
    """``[]`` for a user other than root; for root the ``setpriv`` prefix, or a skip
    where util-linux's setpriv is missing."""
    if os.geteuid() != 0:
        return []
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.skip("running as root without setpriv (util-linux) to drop capabilities")
    return [setpriv, "--bounding-set", "-all", "--inh-caps", "-all"]
