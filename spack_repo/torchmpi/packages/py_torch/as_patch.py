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
``cuda_aware_mpi.py``; tests/test_cuda_aware_patch.py fails until the patch
file matches the module.
"""

from __future__ import annotations

import os

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


if __name__ == "__main__":
    with open(os.path.join(HERE, PATCH), "w", encoding="utf-8") as out:
        out.write(expected())
    print(f"wrote {os.path.join(HERE, PATCH)}")
