"""A child Python in which some modules cannot be imported: a compute node without the
site tooling (py-torchmpi's run dependencies are python and PyYAML only).

``sys.modules[name] = None`` makes ``import name`` raise ``ModuleNotFoundError``
(the Python language reference, "The import system", 5.3.1 The module cache), as
on a node where the module is not installed.  It is done in a child, not in the test
process: the worker has imported some of these modules already, and its later tests
need them.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterable

from support.mpi_launch import job_env

#: What the site loader imports and a compute node with only py-torch-mpi lacks.
SITE_TOOLING = ("jsonschema", "ruamel", "ruamel.yaml", "archspec", "archspec.cpu")


def python_without(blocked: Iterable[str], *lines: str, timeout: float = 60
                   ) -> subprocess.CompletedProcess:
    """Run ``lines`` (Python statements, one per item) in a child whose ``import`` of each
    name in ``blocked`` fails; the child runs under :func:`support.mpi_launch.job_env`."""
    code = "\n".join(["import sys", f"for m in {tuple(blocked)!r}:", "    sys.modules[m] = None",
                      *lines, ""])
    return subprocess.run([sys.executable, "-c", code], env=job_env(), capture_output=True,
                          text=True, timeout=timeout, check=False)
