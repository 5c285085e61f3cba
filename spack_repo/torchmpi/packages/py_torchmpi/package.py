# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""The torchmpi tool itself, as a package of its own.

Before, ``py-torch-mpi`` copied ``wrapper/`` from the checkout into its prefix:
files outside the package directory, covered by neither the package hash nor a
mirror.  Here the tool is a normal Python package whose source Spack tracks.
No release tarball is published yet.  Every rendered environment names the
checkout in its ``develop:`` section (``spack develop``): Spack records it as
``dev_path`` in the spec (so in the hash) and rebuilds the tool when its files
change.  Outside such an environment the source is the git repository this
package directory lives in, at the tag of the version.  A published release
replaces ``git`` with its URL and a checksum; nothing else changes for users.
"""

import os

from spack_repo.builtin.build_systems.python import PythonPackage

from spack.package import *


class PyTorchmpi(PythonPackage):
    """torchmpi: Spack site recipes and compute-node checks (doctor, allreduce)
    for PyTorch's MPI and NCCL backends on HPC networks."""

    homepage = "https://pytorch.org/docs/stable/distributed.html"
    # The torchmpi checkout holding this repository (spack_repo/torchmpi/packages/<pkg>).
    git = "file://" + os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))

    license("Apache-2.0 OR MIT")

    # Equal to wrapper/torchmpi/__init__.py's __version__ (tests check it).
    version("0.1.0", tag="v0.1.0")

    depends_on("python@3.9:", type=("build", "run"))
    depends_on("py-setuptools@61:", type="build")
    # The compute-node verbs (doctor, allreduce) need only PyYAML; the site
    # verbs (render, concretize, ...) run from the checkout's venv on a login
    # node and report a missing module by name instead of failing to import.
    depends_on("py-pyyaml@6:", type="run")

    # `spack test run`'s import check: what a compute node needs (the site
    # verbs' modules import jinja2/jsonschema, which are not run dependencies).
    import_modules = ("torchmpi", "torchmpi.cli")
