# Pinned Spack and builtin package repository (sourced by the bootstrap
# script and setup-env.sh; also read by the torchmpi wrapper).
TORCHMPI_SPACK_TAG=v1.1.0
TORCHMPI_SPACK_PACKAGES_TAG=v2026.06.0
