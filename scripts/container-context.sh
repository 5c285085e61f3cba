#!/usr/bin/env bash
# Fill the directory `torchmpi container SITE -o DIR` wrote with the build
# context its Containerfile copies (docs/containers.md):
#   spack/           the pinned Spack (TORCHMPI_SPACK_TAG), no .git
#   spack-packages/  the pinned builtin repository (TORCHMPI_SPACK_PACKAGES_TAG), no .git
#   torchmpi/        this checkout's committed HEAD (git archive: the package
#                    repository and the tool's source, nothing untracked)
# The trees come from the cached clones `make setup` made, at their tags, so a
# build needs no network for them.  Re-running replaces the three directories.
set -euo pipefail
dir=${1:?usage: scripts/container-context.sh DIR (the output of torchmpi container)}
[ -f "$dir/Containerfile" ] || { echo "$dir: no Containerfile; run torchmpi container first" >&2; exit 2; }
TORCHMPI_ROOT=$(cd "$(dirname "$0")/.." && pwd)
. "$TORCHMPI_ROOT/scripts/paths.sh"

export_tree() {  # repo ref dest
  rm -rf "$3.tmp" && mkdir -p "$3.tmp"
  git -C "$1" archive --format=tar "$2" | tar -x -C "$3.tmp"
  rm -rf "$3" && mv "$3.tmp" "$3"
}
export_tree "$TORCHMPI_SPACK_ROOT" "$TORCHMPI_SPACK_TAG" "$dir/spack"
export_tree "$TORCHMPI_PACKAGES_ROOT" "$TORCHMPI_SPACK_PACKAGES_TAG" "$dir/spack-packages"
export_tree "$TORCHMPI_ROOT" HEAD "$dir/torchmpi"
echo "$dir: build context ready (spack $TORCHMPI_SPACK_TAG, spack-packages $TORCHMPI_SPACK_PACKAGES_TAG, torchmpi $(git -C "$TORCHMPI_ROOT" rev-parse --short HEAD))"
