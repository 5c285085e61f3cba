#!/usr/bin/env bash
# Rendered by torchmpi 0.1.0 from sites/lumi.yaml; do not edit by hand:
# change the site file and run `torchmpi container lumi` (docs/containers.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 416ed464ba5d240d513efc48bc60a76cb81d575cd60742dff8af21af4a4d2688
# body-sha256: b81b771761c9ca5b577f99d68a9ed5d180d031b6a46228bf404d482a0995bde8
# Singularity wrapper for 'lumi' (the centre's binding modules): the host's
# Cray MPICH, libfabric and GPU libraries replace the image's. In the job script,
# before srun: module use /appl/local/laifs/modules; module load lumi-aif-singularity-bindings
# (only to run, not to build: OLCF's break `apptainer build`, its container docs).
# TORCHMPI_PLUGIN_LIB: lib dir of the site's aws-ofi-nccl 1.20.0 (RCCL 7.0.3).
# MPICH_GPU_SUPPORT_ENABLED=0: the image's torch passes host tensors to MPI,
# device tensors go through RCCL (docs/containers.md).
# Launch: srun -n N ./run.sh python train.py
# TORCHMPI_IMAGE: the .sif (default lumi.sif).
# TORCHMPI_CONTAINER_INJECT=0 (and the modules not loaded): the image's own stack.
set -euo pipefail
image=${TORCHMPI_IMAGE:-lumi.sif}
inject=()
if [ "${TORCHMPI_CONTAINER_INJECT:-1}" != 0 ]; then
  for m in lumi-aif-singularity-bindings; do
    case ":${LOADEDMODULES:-}:" in
      *":$m:"* | *":$m/"*) ;;
      *) echo "run.sh: module $m is not loaded; load it in the job script before srun (TORCHMPI_CONTAINER_INJECT=0: run on the image stack alone)" >&2
         exit 2 ;;
    esac
  done
  if [ -n "${TORCHMPI_PLUGIN_LIB:-}" ]; then
    inject+=(--bind "$TORCHMPI_PLUGIN_LIB:/opt/host/plugin:ro")
    export SINGULARITYENV_LD_LIBRARY_PATH="/opt/host/plugin${SINGULARITYENV_LD_LIBRARY_PATH:+:$SINGULARITYENV_LD_LIBRARY_PATH}"
  fi
fi
exec singularity exec "${inject[@]}" --env TORCHMPI_CONTAINER=singularity --env 'NCCL_NET=AWS Libfabric' --env NCCL_CROSS_NIC=1 --env NCCL_NET_GDR_LEVEL=PHB --env FI_MR_CACHE_MONITOR=userfaultfd --env FI_CXI_DISABLE_HOST_REGISTER=1 --env FI_CXI_DEFAULT_CQ_SIZE=131072 --env HSA_FORCE_FINE_GRAIN_PCIE=1 --env MPICH_GPU_SUPPORT_ENABLED=0 "$image" "$@"
