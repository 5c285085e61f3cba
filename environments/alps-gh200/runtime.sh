# Rendered by torchmpi 0.1.0 from sites/alps-gh200.yaml; do not edit by hand:
# change the site file and run `torchmpi render alps-gh200` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: cd009afe49b17f48f806c767beebc04da836fe0b35e9ab18dd3f52c624a63274
# body-sha256: f972e16d874346caca7d2a6ad10aed8a0c9c9c81659a93d96734ab79d017f6e3
# Runtime variables for jobs on 'alps-gh200' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# site values: docs.cscs.ch/software/communication/nccl (2025) and eth-cscs/cscs-docs PR 75
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export NCCL_PROTO='^LL128'
export FI_CXI_DEFAULT_TX_SIZE=16384
export FI_CXI_RX_MATCH_MODE=software
export MPICH_GPU_SUPPORT_ENABLED=0
