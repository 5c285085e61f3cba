# Rendered by torchmpi 0.1.0 from sites/alps-gh200.yaml; do not edit by hand:
# change the site file and run `torchmpi render alps-gh200` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 57172b27fcc9130ef93af84be278cbf6c5570ed2591fab30550d9e5c7fe3de52
# body-sha256: 26dc3cecaf3dfccd83a48257053e67f5f7ebfe7054337e9b92b0df3d9fee3a0e
# Runtime variables for jobs on 'alps-gh200' (launcher: slurm).
# Source this file in the job script; it changes nothing at build time.
# Source: docs.cscs.ch/software/communication/nccl (2025) and eth-cscs/cscs-docs PR 75
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export NCCL_PROTO='^LL128'
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export FI_CXI_DEFAULT_TX_SIZE=16384
export FI_CXI_RX_MATCH_MODE=software
export MPICH_GPU_SUPPORT_ENABLED=0
