"""The patcher as a Spack patch file, so that ``spack spec`` shows it.

Spack's DAG hash of a package covers its ``package.py`` and the sha256 of each
patch file a ``patch()`` directive applies (``PackageBase.content_hash``), not
the Python modules ``package.py`` imports.  The patcher
(``cuda_aware_mpi.py``) computes where its edits go, so it cannot be a fixed
diff of ``ProcessGroupMPI.cpp`` across releases; instead a diff that *creates*
the patcher in the stage (``.torchmpi/cuda_aware_mpi.py``, outside the torch
package: not installed) is applied by a ``patch()`` directive, and the
package's ``patch()`` method runs that staged copy.  The patch's sha256 is in
the spec (``patches=``) and in its hash: a changed patcher is a new py-torch.

Run ``python spack_repo/torchmpi/packages/py_torch/as_patch.py`` after editing
``cuda_aware_mpi.py``: it writes the patch and its sha256 into package.py
(``PATCHER_PATCH_SHA256``: Spack re-indexes patches only of a changed
package.py); tests/test_cuda_aware_patch.py fails until both match the module.
"""

from __future__ import annotations

import hashlib
import os
import re

HERE = os.path.dirname(os.path.abspath(__file__))
#: The patch file the ``patch()`` directive names, beside this module.
PATCH = "torchmpi-patcher.patch"
#: Where the patch creates the patcher, relative to the stage's source root.
STAGED = os.path.join(".torchmpi", "cuda_aware_mpi.py")
#: The module it carries.
MODULE = os.path.join(HERE, "cuda_aware_mpi.py")


def render(text: str, target: str = STAGED) -> str:
    """A unified diff (``patch -p1``) creating ``target`` with ``text``."""
    if not text.endswith("\n"):
        raise ValueError("the module must end with a newline")
    lines = text.splitlines(keepends=True)
    return f"--- /dev/null\n+++ b/{target}\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(
        "+" + line for line in lines)


def expected() -> str:
    """What :data:`PATCH` must hold for the current :data:`MODULE`."""
    with open(MODULE, encoding="utf-8") as stream:
        return render(stream.read())


#: The line of package.py that records the patch's sha256 (see there why).
SHA_LINE = re.compile(r'^(\s*PATCHER_PATCH_SHA256 = ")[0-9a-f]{64}(")$', re.MULTILINE)


def sha256() -> str:
    """The sha256 of what :data:`PATCH` must hold, as Spack computes it for a patch file."""
    return hashlib.sha256(expected().encode("utf-8")).hexdigest()


if __name__ == "__main__":
    with open(os.path.join(HERE, PATCH), "w", encoding="utf-8") as out:
        out.write(expected())
    package = os.path.join(HERE, "package.py")
    with open(package, encoding="utf-8") as stream:
        text, count = SHA_LINE.subn(lambda m: m.group(1) + sha256() + m.group(2), stream.read())
    if count != 1:
        raise SystemExit(f"{package}: no PATCHER_PATCH_SHA256 line to update")
    with open(package, "w", encoding="utf-8") as out:
        out.write(text)
    print(f"wrote {os.path.join(HERE, PATCH)} and its sha256 into {package}")
