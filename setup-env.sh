# Source me (bash or zsh):  . ./setup-env.sh
#
# Puts the pinned Spack and the `torchmpi` CLI on PATH.  Spack's user scope and
# user cache are redirected (SPACK_USER_CONFIG_PATH, SPACK_USER_CACHE_PATH) so
# that nothing in ~/.spack is read or written; SPACK_PYTHON points at the
# project venv, whose clingo (from PyPI) spares Spack a bootstrap download.
if [ -n "${BASH_SOURCE:-}" ]; then
  _torchmpi_here="${BASH_SOURCE[0]}"
elif [ -n "${ZSH_VERSION:-}" ]; then
  _torchmpi_here="${(%):-%x}"
else
  _torchmpi_here="./setup-env.sh"
fi
TORCHMPI_ROOT="$(cd "$(dirname "$_torchmpi_here")" && pwd)"
unset _torchmpi_here
. "$TORCHMPI_ROOT/scripts/paths.sh"

if [ ! -x "$TORCHMPI_SPACK_ROOT/bin/spack" ] || [ ! -x "$TORCHMPI_ROOT/.venv/bin/python" ] \
   || [ ! -f "$TORCHMPI_ROOT/.spack-user/repos.yaml" ]; then
  echo "setup-env.sh: Spack or the venv is missing; run 'make setup' first." >&2
  return 1 2>/dev/null || exit 1
fi

export TORCHMPI_ROOT TORCHMPI_CACHE TORCHMPI_SPACK_ROOT TORCHMPI_PACKAGES_ROOT TORCHMPI_BUILTIN_REPO
export TORCHMPI_SPACK_TAG TORCHMPI_SPACK_PACKAGES_TAG
export SPACK_PYTHON="$TORCHMPI_ROOT/.venv/bin/python"
export SPACK_USER_CONFIG_PATH="$TORCHMPI_ROOT/.spack-user"
export SPACK_USER_CACHE_PATH="${SPACK_USER_CACHE_PATH:-$TORCHMPI_CACHE/user-cache}"
case ":$PATH:" in
  *":$TORCHMPI_ROOT/.venv/bin:"*) ;;
  *) PATH="$TORCHMPI_ROOT/.venv/bin:$PATH" ;;
esac
export PATH
. "$TORCHMPI_SPACK_ROOT/share/spack/setup-env.sh"
