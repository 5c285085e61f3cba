#!/usr/bin/env bash
# System packages the tests need beyond the venv (called by `make setup`).
#
# The module tests source Debian lmod (tests/test_modules.py).
# The verification kit runs real MPI jobs (mpirun, ompi_info) and mpi4py loads
# the system libmpi, so Open MPI must come from the OS.  Quiet and idempotent:
# prints nothing when everything is present.  When something is missing and we
# may use apt-get (root on Debian/Ubuntu), it is installed; otherwise the
# script names the packages and fails, rather than letting tests fail later
# with a less obvious message.
set -euo pipefail

# The container tests (tests/test_container_podman.py) run rootful podman with
# runc (crun 1.8 refuses this VM's hybrid cgroups; the settings are the
# project's, scripts/podman/containers.conf), fuse-overlayfs for podman-hpc's
# store, and build their tiny image from this host's static busybox.
# tests/test_process_group_mpi_build.py compiles PyTorch's ProcessGroupMPI.cpp
# with both MPI families side by side (mpicxx.openmpi / mpicxx.mpich; Debian's
# alternatives keep mpicc/mpirun on Open MPI) and scripts/get-reference.sh
# unpacks its inputs (unzip, xz).
# Concretizing py-torch needs a Fortran compiler (the `local` site's
# `compilers: auto` refuses a host without gfortran, as a GPU node may be).
# "command debian-package" pairs; add a line when a test needs another tool.
REQUIRED="
mpirun openmpi-bin
ompi_info openmpi-bin
mpicc libopenmpi-dev
mpicxx.openmpi libopenmpi-dev
mpicxx.mpich libmpich-dev
mpirun.mpich mpich
unzip unzip
xz xz-utils
podman podman
runc runc
fuse-overlayfs fuse-overlayfs
busybox busybox-static
gcc gcc
g++ g++
gfortran gfortran
cmake cmake
readelf binutils
patch patch
"

missing=""
while read -r cmd pkg; do
  [ -n "$cmd" ] || continue
  command -v "$cmd" >/dev/null 2>&1 && continue
  case " $missing " in *" $pkg "*) ;; *) missing="$missing $pkg" ;; esac
done <<<"$REQUIRED"

# Lmod is a shell function, not a command: look for its init script.
LMOD_INIT="${TORCHMPI_LMOD_INIT:-/usr/share/lmod/lmod/init/bash}"
[ -r "$LMOD_INIT" ] || missing="$missing lmod"

[ -z "$missing" ] && exit 0

if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then
  echo "torchmpi setup: installing system packages:$missing"
  export DEBIAN_FRONTEND=noninteractive
  apt-get install -y -qq $missing >/dev/null || {
    apt-get update -qq && apt-get install -y -qq $missing >/dev/null
  }
  exit 0
fi
printf 'torchmpi setup: error: missing system packages:%s\n' "$missing" >&2
printf '  install them, e.g. sudo apt-get install%s\n' "$missing" >&2
exit 1
