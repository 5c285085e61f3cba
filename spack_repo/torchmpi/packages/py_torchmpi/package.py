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
change.  Outside such an environment (``make install-site``, then ``spack
install py-torch-mpi``) the source is the git repository this package
directory lives in, at the commit of the version (tests/test_packages.py
fetches every version the way Spack does).  A published release replaces
``git`` with its URL and a checksum; nothing else changes for users.
"""

import os

from spack_repo.builtin.build_systems.python import PythonPackage

from spack.package import *


class PyTorchmpi(PythonPackage):
    """torchmpi: Spack site recipes and compute-node checks (doctor, allreduce)
    for PyTorch's MPI and NCCL backends on HPC networks."""

    # The torchmpi checkout holding this repository (spack_repo/torchmpi/packages/<pkg>):
    # the project publishes no web page, so its homepage is the checkout's README.
    git = "file://" + os.path.abspath(os.path.join(os.path.dirname(__file__), *[os.pardir] * 4))
    homepage = git + "/README.md"

    license("Apache-2.0 OR MIT")

    # Equal to wrapper/torchmpi/__init__.py's __version__ (tests check it).
    # No tag is published: a version is a commit of this repository's history
    # (Spack clones the repository and checks the commit out).  A checkout
    # without that history (a tarball, a shallow clone) cannot fetch it; see
    # docs/admins.md.  A new version: bump __version__, commit, add a line
    # here naming that commit.
    version("0.1.0", commit="b2815f06a95cdcae023e1e37be335bc4d2b54168")

    depends_on("python@3.9:", type=("build", "run"))
    # 77: pyproject.toml names the licence as an SPDX expression with license-files
    # (PEP 639), which older setuptools refuse; Spack builds without isolation, so
    # this, not pyproject's [build-system], picks the setuptools.
    depends_on("py-setuptools@77:", type="build")
    # Spack installs Python packages with `pip --no-deps`: every requirement
    # of pyproject.toml is declared here (tests/test_packages.py checks), so
    # the installed doctor can read a site file (`--site`: ruamel.yaml parses
    # it, jsonschema validates it) on a compute node, without the checkout.
    depends_on("py-pyyaml@6:", type="run")
    depends_on("py-ruamel-yaml@0.18:", type="run")
    # 4.17 is the newest jsonschema without referencing/rpds-py, whose Rust
    # build (rust, maturin, ...) took Derecho from 45 to 64 packages built from
    # source; the tool validates with Draft202012Validator, which 4.x all have
    # (its site loads are tested with jsonschema 4.17.3 and 4.26.0).
    depends_on("py-jsonschema@4:4.17", type="run")
    depends_on("py-archspec@0.2:", type="run")
    # `torchmpi container` writes the Container Engine's EDF with tomli-w and reads it
    # back with tomllib, which is tomli before Python 3.11.
    depends_on("py-tomli-w@1.0:", type="run")
    depends_on("py-tomli@1.1:", type="run", when="^python@:3.10")

    # `spack test run`'s import check: the CLI and the site loader the doctor's
    # `--site` uses (it finds site files by name among the package's data).
    import_modules = ("torchmpi", "torchmpi.cli", "torchmpi.site")
