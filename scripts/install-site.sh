#!/usr/bin/env bash
# Register the torchmpi package repository with a Spack installation, site-wide
# (`make install-site`, docs/admins.md).
#
#   scripts/install-site.sh [SCOPE]      SCOPE: site (default) or spack
#
# Uses `spack` from PATH (the site's Spack; SPACK=... to name another).  Spack
# searches repositories scope by scope, highest first: command line, spack
# ($spack/etc/spack), user, site ($spack/etc/spack/site), system, defaults.
# The torchmpi overrides (py-torch, aws-ofi-nccl) win only if torchmpi is
# listed in the same scope as the builtin repository or a higher one; when the
# admin pinned builtin in $spack/etc/spack, a site-scope add is shadowed.  So
# after adding, this script asks Spack which namespace serves aws-ofi-nccl and
# py-torch, and fails with the scope to use instead when it is not torchmpi.
set -euo pipefail

scope="${1:-site}"
spack="${SPACK:-spack}"
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/spack_repo/torchmpi"

case "$scope" in
  site|spack|system|user) ;;
  *) echo "install-site: unknown scope '$scope' (site, spack, system or user)" >&2; exit 2 ;;
esac

# Idempotent: replace an earlier registration in this scope (e.g. a moved checkout).
"$spack" repo remove --scope "$scope" torchmpi >/dev/null 2>&1 || true
"$spack" repo add --scope "$scope" "$repo"

check="$(mktemp "${TMPDIR:-/tmp}/torchmpi-site.XXXXXX.py")"
trap 'rm -f "$check"' EXIT
cat >"$check" <<'PY'
import spack.repo
for name in ("aws-ofi-nccl", "py-torch", "py-torch-mpi"):
    print(name, spack.repo.PATH.get_pkg_class(name).namespace)
PY
resolved="$("$spack" python "$check")"
echo "$resolved" | sed 's/^/install-site: /'
if echo "$resolved" | grep -qv ' torchmpi$'; then
  cat >&2 <<MSG
install-site: error: the builtin repository shadows torchmpi after a '$scope'-scope add:
  builtin is configured in a higher scope ('spack config blame repos' shows where).
  Register torchmpi in that scope instead, e.g.:  scripts/install-site.sh spack
MSG
  "$spack" repo remove --scope "$scope" torchmpi >/dev/null
  exit 1
fi
echo "install-site: torchmpi registered in scope '$scope' ($repo)"
