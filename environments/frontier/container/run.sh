#!/usr/bin/env bash
# Rendered by torchmpi 0.1.0 from sites/frontier.yaml; do not edit by hand:
# change the site file and run `torchmpi container frontier` (docs/containers.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 4c9ce77f1072361482c9cad6f38c922939b2a8ce8eb48cdc08581bc5661c8cca
# body-sha256: 23ae6a3691ee3e1f464e072d6651c4af967eaf1b0798f6e838a21bfbc7133ea3
# Apptainer wrapper for 'frontier' (the centre's binding modules): the host's
# Cray MPICH, libfabric and GPU libraries replace the image's. In the job script,
# before srun: module load olcf-container-tools apptainer-enable-mpi apptainer-enable-gpu
# (only to run, not to build: OLCF's break `apptainer build`, its container docs).
# TORCHMPI_PLUGIN_LIB: lib dir of the site's aws-ofi-nccl 1.19.2 (RCCL 7.1.1).
# MPICH_GPU_SUPPORT_ENABLED=0: the image's torch passes host tensors to MPI,
# device tensors go through RCCL (docs/containers.md).
# Launch: srun -n N ./run.sh python train.py
# TORCHMPI_IMAGE: the .sif (default frontier.sif).
# TORCHMPI_CONTAINER_INJECT=0 (and the modules not loaded): the image's own stack.
set -euo pipefail
image=${TORCHMPI_IMAGE:-frontier.sif}
inject=()
if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then
  for m in olcf-container-tools apptainer-enable-mpi apptainer-enable-gpu; do
    case ":${LOADEDMODULES:-}:" in
      *":$m:"* | *":$m/"*) ;;
      *) echo "run.sh: module $m is not loaded; load it in the job script before srun (TORCHMPI_CONTAINER_INJECT=0: run on the image stack alone)" >&2
         exit 2 ;;
    esac
  done
  if [ -n "${TORCHMPI_PLUGIN_LIB:-}" ]; then
    inject+=(--bind "$TORCHMPI_PLUGIN_LIB:/opt/host/plugin:ro")
    export APPTAINERENV_LD_LIBRARY_PATH="/opt/host/plugin${APPTAINERENV_LD_LIBRARY_PATH:+:$APPTAINERENV_LD_LIBRARY_PATH}"
  fi
fi
exec apptainer exec --rocm "${inject[@]}" --env TORCHMPI_CONTAINER=apptainer --env NCCL_CROSS_NIC=1 --env NCCL_NET_GDR_LEVEL=PHB --env FI_MR_CACHE_MONITOR=kdreg2 --env FI_CXI_DISABLE_HOST_REGISTER=1 --env FI_CXI_DEFAULT_CQ_SIZE=131072 --env HSA_FORCE_FINE_GRAIN_PCIE=1 --env NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3 --env MIOPEN_USER_DB_PATH=/tmp/my-miopen-cache --env MIOPEN_CUSTOM_CACHE_DIR=/tmp/my-miopen-cache --env MPICH_GPU_SUPPORT_ENABLED=0 "$image" "$@"
