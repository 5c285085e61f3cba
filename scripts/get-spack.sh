#!/usr/bin/env bash
# Obtain the pinned Spack and builtin package repository (called by `make setup`).
#
# Clones Spack $TORCHMPI_SPACK_TAG and spack-packages $TORCHMPI_SPACK_PACKAGES_TAG
# into ${XDG_CACHE_HOME:-~/.cache}/torchmpi/, once per machine.  Overrides:
#   TORCHMPI_SPACK_URL           git URL or local git directory to clone Spack from
#   TORCHMPI_SPACK_PACKAGES_URL  git URL or local git directory for spack-packages
#   SPACK_ROOT                   use this existing Spack instead of cloning one
# Idempotent: an existing clone at the right tag is reused, a clone at another
# tag is an error (never silently replaced).
set -euo pipefail
TORCHMPI_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$TORCHMPI_ROOT/scripts/paths.sh"

SPACK_URL="${TORCHMPI_SPACK_URL:-https://github.com/spack/spack.git}"
PACKAGES_URL="${TORCHMPI_SPACK_PACKAGES_URL:-https://github.com/spack/spack-packages.git}"

die() { printf 'torchmpi setup: error: %s\n' "$*" >&2; exit 1; }

# clone_pinned URL TAG DEST VARIABLE
clone_pinned() {
  local url=$1 tag=$2 dest=$3 var=$4
  if [ -d "$dest/.git" ]; then
    local have
    have=$(git -C "$dest" describe --tags --exact-match 2>/dev/null || true)
    # Several tags may name the pinned commit (v1.1.0 is also releases/latest):
    # compare commits, not the one name describe happens to pick.
    if [ "$(git -C "$dest" rev-parse -q --verify "refs/tags/$tag^{commit}" 2>/dev/null)" = \
         "$(git -C "$dest" rev-parse HEAD)" ]; then have=$tag; fi
    [ "$have" = "$tag" ] || die "$dest is at '${have:-an untagged commit}', expected $tag. Remove it and run 'make setup' again."
    echo "torchmpi setup: reusing $dest ($tag)"
    return
  fi
  mkdir -p "$(dirname "$dest")"
  local tmp="$dest.partial.$$"
  rm -rf "$tmp"
  echo "torchmpi setup: cloning $url ($tag) into $dest"
  # file:// makes --depth work for a local git directory as well.
  local src=$url
  [ -d "$url" ] && src="file://$(cd "$url" && pwd)"
  if ! git -c advice.detachedHead=false clone --quiet --depth 1 --branch "$tag" "$src" "$tmp"; then
    rm -rf "$tmp"
    die "could not clone $tag from $url. Set $var to a reachable git URL or a local git directory (a mirror) that has tag $tag, or set SPACK_ROOT to an existing Spack."
  fi
  mv "$tmp" "$dest"
}

if [ "$TORCHMPI_SPACK_ROOT" = "$TORCHMPI_CACHE/spack-$TORCHMPI_SPACK_TAG" ]; then
  clone_pinned "$SPACK_URL" "$TORCHMPI_SPACK_TAG" "$TORCHMPI_SPACK_ROOT" TORCHMPI_SPACK_URL
  # Spack's own modules compiled once, by the interpreter that runs Spack (the venv's:
  # setup-env.sh's SPACK_PYTHON).  Where PYTHONDONTWRITEBYTECODE is set Python writes
  # none itself, and every `spack` start compiles its ~700 modules again (1.2 s against
  # 0.6 s for `spack python -c 'import spack.solver.asp'`, docs/performance.md).  Only
  # the pinned clone: a site's own Spack (SPACK_ROOT) is left as it is.  Up-to-date
  # files are skipped, so a second `make setup` costs a fraction of a second.
  "$TORCHMPI_ROOT/.venv/bin/python" -m compileall -q -j 0 "$TORCHMPI_SPACK_ROOT/lib/spack" \
    > /dev/null || die "could not compile Spack's modules in $TORCHMPI_SPACK_ROOT/lib/spack"
else
  [ -x "$TORCHMPI_SPACK_ROOT/bin/spack" ] || die "SPACK_ROOT=$TORCHMPI_SPACK_ROOT has no bin/spack. Unset SPACK_ROOT to use the pinned clone."
  echo "torchmpi setup: using existing Spack at $TORCHMPI_SPACK_ROOT (SPACK_ROOT)"
fi
clone_pinned "$PACKAGES_URL" "$TORCHMPI_SPACK_PACKAGES_TAG" "$TORCHMPI_PACKAGES_ROOT" TORCHMPI_SPACK_PACKAGES_URL
[ -f "$TORCHMPI_BUILTIN_REPO/repo.yaml" ] || die "$TORCHMPI_BUILTIN_REPO/repo.yaml missing: not a spack-packages checkout"

# Spack's user scope for this checkout: keeps ~/.spack untouched.  The file
# refers to environment variables that setup-env.sh exports, so moving the
# cache or the checkout never leaves it stale.
mkdir -p "$TORCHMPI_ROOT/.spack-user"
cat > "$TORCHMPI_ROOT/.spack-user/repos.yaml.tmp" <<'YAML'
# Written by `make setup` (scripts/get-spack.sh); Spack user scope of this checkout.
repos:
  torchmpi: ${TORCHMPI_ROOT}/spack_repo/torchmpi
  builtin: ${TORCHMPI_BUILTIN_REPO}
YAML
mv "$TORCHMPI_ROOT/.spack-user/repos.yaml.tmp" "$TORCHMPI_ROOT/.spack-user/repos.yaml"
echo "torchmpi setup: Spack $TORCHMPI_SPACK_TAG + spack-packages $TORCHMPI_SPACK_PACKAGES_TAG ready"
