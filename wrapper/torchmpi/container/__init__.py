"""A site's PyTorch in a container image, with the site's network stack injected at run time.

``torchmpi container SITE`` writes, beside nothing of the native environment:

* ``spack.yaml`` -- the *container* environment: self-contained (no
  ``include:``, no host or relative path), the torchmpi repository and the
  tool's source at in-image paths, a generic target for the CPU family, the
  compiler and CUDA of the base image as the only externals (both inside the
  image), an MPI that is an ABI stand-in for the site's, and the NCCL/plugin
  pair that fits what the site injects;
* ``Containerfile`` -- three stages (bootstrap, build, final) written as data,
  every ``FROM`` pinned, labels carrying the site file's sha256, the pins and
  the pair; no ``NCCL_*``/``FI_*`` ``ENV`` (in CSCS's Container Engine the
  image's environment outranks the host's, so baked values could not be
  corrected at run time: the descriptor sets them);
* the run-time descriptor of the site's ``container.runtime``: a CE EDF
  (TOML), a podman-hpc run line and module, a shifter job header, an
  apptainer bind-model wrapper, or a plain podman line.

Why a second rendering and not ``spack containerize`` of the native
environment: containerize copies the manifest as it is, and the native one
names ``include:`` files, a repository and a ``develop:`` path relative to the
checkout, site externals and the site's exact CPU target -- none of which
exist in the image (docs/containers.md).

Why ``shared_linking: runpath``: Spack links with ``DT_RPATH`` by default,
which the dynamic loader searches *before* ``LD_LIBRARY_PATH``; the image's
MPICH would then always win over the host's Cray MPICH and libfabric that the
descriptors put on ``LD_LIBRARY_PATH``.  ``DT_RUNPATH`` is searched after it.

The package: :mod:`~torchmpi.container.plan` decides what the image carries and
what the host injects, :mod:`~torchmpi.container.image` writes the recipe,
:mod:`~torchmpi.container.descriptors` the run-time files, one function per
runtime; this module puts them together and hands them to the writer
(:mod:`torchmpi.output`), which adds the provenance header, parses every file
back by its format (YAML, TOML, shell; the Containerfile is parsed back here,
by :func:`parse_containerfile`) and owns the write policy, as for render.
"""

from __future__ import annotations

from torchmpi import output
from torchmpi.container.descriptors import (
    DESCRIPTORS,
    MARKER,
    descriptors,
    edf,
    edf_text,
    image_name,
    srun_line,
)
from torchmpi.container.image import (
    check_containerfile,
    containerfile,
    containerfile_instructions,
    labels,
    parse_containerfile,
    roots,
    spack_env,
    spack_yaml,
)
from torchmpi.container.plan import (
    CE_HMEM,
    CE_HOOK_VARIANT,
    CE_MPICH,
    CRAY_LD_DIRS,
    CRAY_STANDIN,
    DEFAULT_OS,
    ENV_DIR,
    HOST_LIB64,
    HOST_MOUNT,
    INJECTS_CRAY,
    INJECTS_PLUGIN,
    NETSTACK_ARTIFACTS,
    OS_IMAGES,
    PACKAGES_DIR,
    PLUGIN_DIR,
    PODMAN_HPC_SYSTEM_BINDS,
    RUNTIMES,
    SPACK_DIR,
    SPACK_PYTHON,
    TORCHMPI_DIR,
    Plan,
    _cuda_version,
    generic_target,
    plan,
)
from torchmpi.site import Site

__all__ = [
    "CE_HMEM",
    "CE_HOOK_VARIANT",
    "CE_MPICH",
    "CRAY_LD_DIRS",
    "CRAY_STANDIN",
    "DEFAULT_OS",
    "DESCRIPTORS",
    "ENV_DIR",
    "HOST_LIB64",
    "HOST_MOUNT",
    "INJECTS_CRAY",
    "INJECTS_PLUGIN",
    "MARKER",
    "NETSTACK_ARTIFACTS",
    "OS_IMAGES",
    "PACKAGES_DIR",
    "PLUGIN_DIR",
    "PODMAN_HPC_SYSTEM_BINDS",
    "RUNTIMES",
    "SPACK_DIR",
    "SPACK_PYTHON",
    "TORCHMPI_DIR",
    "Plan",
    "_cuda_version",
    "check_containerfile",
    "containerfile",
    "containerfile_instructions",
    "descriptors",
    "edf",
    "edf_text",
    "generic_target",
    "image_name",
    "labels",
    "parse_containerfile",
    "plan",
    "render",
    "roots",
    "spack_env",
    "spack_yaml",
    "srun_line",
]


# -- the whole set ---------------------------------------------------------------------------

def render(site: Site) -> dict[str, str]:
    """File name -> full text, each parsed back; refuses before anything is built."""
    p = plan(site)
    bodies = {"spack.yaml": spack_yaml(site, p), "Containerfile": containerfile(site, p),
              **descriptors(site, p)}
    return output.assemble("container", site, bodies)
