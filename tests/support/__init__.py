"""What the tests share, in one place: the tests import ``support.<module>``.

Why a package and not ``conftest.py``: pytest loads ``conftest`` as a plugin,
not as a module of the test files, so ``from conftest import`` works only by
the accident of ``tests/`` being on ``sys.path`` and hides what a file needs.
Fixtures stay in ``conftest.py``; helpers live here:

* ``sites``: the one way to copy and edit a shipped site file;
* ``spack``: the pinned, isolated Spack CLI the ``spack`` fixture returns;
* ``host_tools``: this host's programs hidden, ``local`` with its compilers;
* ``mpi_launch``: real multi-process jobs and the planted wrong all-reduce;
* ``podman_kit``: real podman with the cached probe image (the image's own libraries);
* ``cray_ex``: the Cray EX node stand-in built with gcc;
* ``gtl_preload``: py-torch's GTL preload, loaded by path, and the stand-in torch it goes in;
* ``patcher``: py-torch's patcher of PyTorch's MPI backend, loaded by path;
* ``doctor_inputs``: hand-built doctor inputs;
* ``cli_run``: a verb run in the worker, the environment and process group put back.
"""

from __future__ import annotations

from torchmpi import paths

#: The checkout under test (``TORCHMPI_ROOT`` in a mutant's scratch copy).
ROOT = paths.root()
