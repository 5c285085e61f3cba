"""The patcher and the GTL preload as Spack patch files, so that ``spack spec`` shows them.

Spack's DAG hash of a package covers its ``package.py`` and the sha256 of each
patch file a ``patch()`` directive applies (``PackageBase.content_hash``), not
the Python modules ``package.py`` imports.  Two modules here run in a build:

- the patcher (``cuda_aware_mpi.py``) computes where its edits go, so it cannot
  be a fixed diff of ``ProcessGroupMPI.cpp`` across releases;
- the GTL preload (``gtl_preload.py``) is installed as ``_torchmpi_gtl.py`` by
  py-torch and py-mpi4py with what only the concrete build knows (the GTL path
  of its cray-mpich, its C++ and GPU runtimes: docs/design.md says why that stays
  an install-time step).

So each reaches the build as a diff that *creates* it in the stage (under
``.torchmpi/``, outside the installed package), applied by a ``patch()``
directive, and the package runs that staged copy.  The patch's sha256 is in the
spec (``patches=``) and in its hash: a changed module is a new build.

Run ``python spack_repo/torchmpi/packages/py_torch/as_patch.py`` after editing
either module: it writes each patch file (into every package that applies it)
and its sha256 into that package's ``package.py`` (Spack re-indexes patches only
of a changed package.py); tests/test_cuda_aware_patch.py and
tests/test_gtl_preload.py fail until they match the modules.
"""

import hashlib
import os
import re
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
#: The repository's package directories (``py_torch``, ``py_mpi4py``, ...).
PACKAGES = os.path.dirname(HERE)


@dataclass(frozen=True)
class Artefact:
    """One module shipped as a patch file that creates it in the stage."""

    module: str  #: the module, beside this file
    patch: str  #: the patch file's name, in each package directory of ``packages``
    staged: str  #: where the patch creates the module, relative to the stage's source root
    constant: str  #: the class attribute of package.py that records the patch's sha256
    packages: tuple  #: the package directories that apply it

    @property
    def sha_line(self) -> re.Pattern:
        """The line of package.py that records the patch's sha256 (group 2)."""
        return re.compile(rf'^(\s*{self.constant} = ")([0-9a-f]{{64}})(")$', re.MULTILINE)


#: The patcher of ProcessGroupMPI.cpp, applied by py-torch ``+cuda_aware_mpi``.
PATCHER = Artefact(os.path.join(HERE, "cuda_aware_mpi.py"), "torchmpi-patcher.patch",
                   os.path.join(".torchmpi", "cuda_aware_mpi.py"), "PATCHER_PATCH_SHA256",
                   ("py_torch",))
#: The GTL preload, applied by py-torch and py-mpi4py ``+cuda_aware_mpi`` on cray-mpich.
GTL_PRELOAD = Artefact(os.path.join(HERE, "gtl_preload.py"), "torchmpi-gtl-preload.patch",
                       os.path.join(".torchmpi", "gtl_preload.py"), "GTL_PRELOAD_PATCH_SHA256",
                       ("py_torch", "py_mpi4py"))
ARTEFACTS = (PATCHER, GTL_PRELOAD)

# The patcher's names, as py-torch's package.py and its tests use them.
PATCH = PATCHER.patch
STAGED = PATCHER.staged
MODULE = PATCHER.module
SHA_LINE = PATCHER.sha_line


def render(text: str, target: str = STAGED) -> str:
    """A unified diff (``patch -p1``) creating ``target`` with ``text``."""
    if not text.endswith("\n"):
        raise ValueError("the module must end with a newline")
    lines = text.splitlines(keepends=True)
    return f"--- /dev/null\n+++ b/{target}\n@@ -0,0 +1,{len(lines)} @@\n" + "".join(
        "+" + line for line in lines)


def expected(artefact: Artefact = PATCHER) -> str:
    """What ``artefact``'s patch file must hold for its current module."""
    with open(artefact.module, encoding="utf-8") as stream:
        return render(stream.read(), artefact.staged)


def sha256(artefact: Artefact = PATCHER) -> str:
    """The sha256 of what ``artefact``'s patch must hold, as Spack computes it for a patch
    file."""
    return hashlib.sha256(expected(artefact).encode("utf-8")).hexdigest()


def write(artefact: Artefact) -> list:
    """Write ``artefact``'s patch file and its sha256 into every package that applies it;
    the paths written."""
    written = []
    for package in artefact.packages:
        package_dir = os.path.join(PACKAGES, package)
        with open(os.path.join(package_dir, artefact.patch), "w", encoding="utf-8") as out:
            out.write(expected(artefact))
        recipe = os.path.join(package_dir, "package.py")
        with open(recipe, encoding="utf-8") as stream:
            text, count = artefact.sha_line.subn(
                lambda m: m.group(1) + sha256(artefact) + m.group(3), stream.read())
        if count != 1:
            raise SystemExit(f"{recipe}: no {artefact.constant} line to update")
        with open(recipe, "w", encoding="utf-8") as out:
            out.write(text)
        written += [os.path.join(package_dir, artefact.patch), recipe]
    return written


if __name__ == "__main__":
    for item in ARTEFACTS:
        print("wrote " + ", ".join(write(item)))
