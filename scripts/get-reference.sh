#!/usr/bin/env bash
# Fetch the PyTorch release whose ProcessGroupMPI.cpp the tests compile and run
# with torchmpi's patch (called by `make setup`; tests/test_process_group_mpi_build.py).
#
# Never committed, fetched from registries and checked by sha256 (pinned below):
#   * Debian's source pool: pytorch_2.6.0+dfsg.orig.tar.xz, the whole v2.6.0 tree
#     (Debian's repack of the release tarball pytorch-v2.6.0); only
#     torch/csrc/distributed/c10d/ProcessGroupMPI.{cpp,hpp} and version.txt are
#     extracted.
#   * PyPI: torch==2.6.0 (cp311 manylinux x86_64, the CUDA 12.4 build), whose
#     torch/include and libtorch_cpu.so / libc10.so / bundled libgomp match that
#     tree; libtorch_cpu.so also NEEDs libcudart.so.12 and libcupti.so.12, taken
#     from nvidia-cuda-runtime-cu12 / nvidia-cuda-cupti-cu12 12.4.127 (the
#     versions torch 2.6.0's wheel metadata requires).
# Cached under $TORCHMPI_CACHE/reference/torch-2.6.0 (scripts/paths.sh): the
# downloads are kept, so a second run is offline and takes a second.
# Overrides:
#   TORCHMPI_DEBIAN_MIRROR  Debian mirror URL (default: this machine's apt source,
#                           else http://deb.debian.org/debian)
#   TORCHMPI_SKIP_REFERENCE=1  skip (tests that need it then fail, not skip)
# pip download reads the usual pip configuration (index, proxy).
set -euo pipefail
TORCHMPI_ROOT="$(cd "$(dirname "$0")/.." && pwd)"
. "$TORCHMPI_ROOT/scripts/paths.sh"

die() { printf 'torchmpi setup: error: %s\n' "$*" >&2; exit 1; }
[ "${TORCHMPI_SKIP_REFERENCE:-}" = 1 ] && exit 0

# The pip wheels tests/test_venv.py builds an sdist with, offline: the sites'
# older pips 23.1 and 25.1, which pass a constraints file into isolated build
# environments, and 26.3, which no longer does (pip 26.2:
# pypa/pip#14094); setuptools is the sdist's build backend.  Pure-Python
# wheels from PyPI, checked by sha256 like the rest.
PIP_WHEELS="$TORCHMPI_CACHE/pip-wheels"
mkdir -p "$PIP_WHEELS"
while read -r whl sha req; do
  [ -n "$whl" ] || continue
  if [ ! -f "$PIP_WHEELS/$whl" ]; then
    echo "torchmpi setup: fetching $req ($whl) from PyPI"
    "${TORCHMPI_ROOT}/.venv/bin/python" -m pip download --quiet --no-deps --only-binary=:all: \
      -d "$PIP_WHEELS" "$req" || die "pip could not download $req (check pip's index configuration)"
  fi
  [ "$(sha256sum "$PIP_WHEELS/$whl" 2>/dev/null | cut -d' ' -f1)" = "$sha" ] \
    || { rm -f "$PIP_WHEELS/$whl"; die "$whl: missing or not sha256 $sha (removed; run make setup again)"; }
done <<'WHEELS'
pip-23.1-py3-none-any.whl 64b1d4528e491aa835ec6ece0c1ac40ce6ab6d886e60740f6519db44b2e9634d pip==23.1
pip-25.1-py3-none-any.whl 13b4aa0aaad055020a11bec8a1c2a70a2b2d080e12d89b962266029fff0a16ba pip==25.1
pip-26.3-py3-none-any.whl f3b60b20ffaadd4415ed7957212a38ac63fa4c5fa375bd0f4a797777940fad13 pip==26.3
setuptools-80.9.0-py3-none-any.whl 062d34222ad13e0cc312a4c02d73f059e86a4acbfbdea8f8f76b28c99f306922 setuptools==80.9.0
WHEELS

REF_VERSION=2.6.0
DEST="$TORCHMPI_CACHE/reference/torch-$REF_VERSION"
DL="$DEST/downloads"
# file  sha256  (checked before anything is extracted)
PINS="
pytorch_2.6.0+dfsg.orig.tar.xz 099a9601bc40d67656e75735c44abedb0fbe92d08817852ab7472eebb7e6ddff
torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl 7979834102cd5b7a43cc64e87f2f3b14bd0e1458f06e9f88ffa386d07c7446e1
nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl 64403288fa2136ee8e467cdc9c9427e0434110899d07c779f25b5c068934faa5
nvidia_cuda_cupti_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl 9dec60f5ac126f7bb551c055072b69d85392b13311fcc1bcda2202d172df30fb
"
STAMP="$DEST/.complete"
# The stamp records the pins it was made from: new pins mean a new extraction.
want_stamp=$(printf '%s' "$PINS" | sha256sum | cut -d' ' -f1)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want_stamp" ]; then
  exit 0
fi

mirror() {
  if [ -n "${TORCHMPI_DEBIAN_MIRROR:-}" ]; then echo "$TORCHMPI_DEBIAN_MIRROR"; return; fi
  # deb822 (URIs:) or one-line (deb URL suite ...) sources; the first
  # Debian archive (not -security) wins.
  local url
  url=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | sed -n 's/^URIs:[[:space:]]*\([^[:space:]]*\).*/\1/p' | grep -v security | head -n1 || true)
  [ -n "$url" ] || url=$(sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]*\).*/\2/p' \
        /etc/apt/sources.list 2>/dev/null | grep -v security | head -n1 || true)
  echo "${url:-http://deb.debian.org/debian}"
}

pinned_sha() { printf '%s\n' "$PINS" | awk -v f="$1" '$1 == f {print $2}'; }

verify() {  # verify FILE: sha256 matches its pin, else the file is removed
  local file=$1 want have
  want=$(pinned_sha "$(basename "$file")")
  have=$(sha256sum "$file" | cut -d' ' -f1)
  if [ "$have" != "$want" ]; then
    rm -f "$file"
    die "$(basename "$file"): sha256 $have, expected $want (removed; run make setup again)"
  fi
}

mkdir -p "$DL"
tarball="$DL/pytorch_2.6.0+dfsg.orig.tar.xz"
if [ ! -f "$tarball" ]; then
  url="$(mirror)/pool/main/p/pytorch/pytorch_2.6.0+dfsg.orig.tar.xz"
  echo "torchmpi setup: fetching $url"
  curl -fsSL --retry 2 -o "$tarball.partial" "$url" \
    || { rm -f "$tarball.partial"; die "could not fetch $url (set TORCHMPI_DEBIAN_MIRROR to a reachable Debian mirror)"; }
  mv "$tarball.partial" "$tarball"
fi
verify "$tarball"

PY="${TORCHMPI_ROOT}/.venv/bin/python"
[ -x "$PY" ] || PY=python3
fetch_wheel() {  # fetch_wheel FILE REQUIREMENT PLATFORM ABI
  local file=$1 req=$2 platform=$3 abi=$4
  if [ ! -f "$DL/$file" ]; then
    echo "torchmpi setup: fetching $req ($file) from PyPI"
    "$PY" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
      --implementation cp --abi "$abi" --platform "$platform" -d "$DL" "$req" \
      || die "pip could not download $req (check pip's index configuration)"
    [ -f "$DL/$file" ] || die "pip downloaded $req but not $file"
  fi
  verify "$DL/$file"
}
fetch_wheel torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl torch==2.6.0 manylinux1_x86_64 cp311
fetch_wheel nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl \
  nvidia-cuda-runtime-cu12==12.4.127 manylinux2014_x86_64 none
fetch_wheel nvidia_cuda_cupti_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl \
  nvidia-cuda-cupti-cu12==12.4.127 manylinux2014_x86_64 none

echo "torchmpi setup: extracting the torch $REF_VERSION reference into $DEST"
tmp="$DEST/.partial.$$"
rm -rf "$tmp" "$DEST/src" "$DEST/torch" "$DEST/nvidia"
mkdir -p "$tmp/src"
top=pytorch-v2.6.0
tar -xJf "$tarball" -C "$tmp" "$top/version.txt" \
  "$top/torch/csrc/distributed/c10d/ProcessGroupMPI.cpp" \
  "$top/torch/csrc/distributed/c10d/ProcessGroupMPI.hpp"
mv "$tmp/$top/version.txt" "$tmp/$top/torch/csrc/distributed/c10d/ProcessGroupMPI."* "$tmp/src/"
unzip -q -o "$DL/torch-2.6.0-cp311-cp311-manylinux1_x86_64.whl" -d "$tmp" \
  'torch/include/*' torch/lib/libtorch_cpu.so torch/lib/libc10.so 'torch/lib/libgomp-*.so.1'
mkdir -p "$tmp/nvidia/lib"
for whl in nvidia_cuda_runtime_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl \
           nvidia_cuda_cupti_cu12-12.4.127-py3-none-manylinux2014_x86_64.whl; do
  unzip -q -o -j "$DL/$whl" 'nvidia/*/lib/libcudart.so.12' 'nvidia/*/lib/libcupti.so.12' \
    -d "$tmp/nvidia/lib" 2>/dev/null || true
done
for lib in libcudart.so.12 libcupti.so.12; do
  [ -f "$tmp/nvidia/lib/$lib" ] || die "$lib not found in the nvidia wheels"
done
mv "$tmp/src" "$tmp/torch" "$tmp/nvidia" "$DEST/"
rm -rf "$tmp"
echo "$want_stamp" > "$STAMP"
