# Shared path logic for scripts/get-spack.sh and setup-env.sh (sourced, POSIX sh).
#
# TORCHMPI_ROOT must be set by the caller.  Everything Spack needs lives in a
# cache outside the checkout so that every clone on a machine reuses one copy.
# The Python side (wrapper/torchmpi/paths.py: spackrun, bench, the tests)
# applies the same rules to the same pins file; tests/test_paths.py compares them.
. "$TORCHMPI_ROOT/scripts/pins.sh"
TORCHMPI_CACHE="${TORCHMPI_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/torchmpi}"
if [ -n "${TORCHMPI_SPACK_ROOT:-}" ]; then
  :  # already resolved (setup-env.sh sourced twice)
elif [ -n "${SPACK_ROOT:-}" ] && [ "${SPACK_ROOT}" != "$TORCHMPI_CACHE/spack-$TORCHMPI_SPACK_TAG" ]; then
  TORCHMPI_SPACK_ROOT="$SPACK_ROOT"           # an existing Spack, by request
else
  TORCHMPI_SPACK_ROOT="$TORCHMPI_CACHE/spack-$TORCHMPI_SPACK_TAG"
fi
TORCHMPI_PACKAGES_ROOT="${TORCHMPI_PACKAGES_ROOT:-$TORCHMPI_CACHE/spack-packages-$TORCHMPI_SPACK_PACKAGES_TAG}"
TORCHMPI_BUILTIN_REPO="$TORCHMPI_PACKAGES_ROOT/repos/spack_repo/builtin"
