# Rendered by torchmpi 0.1.0 from sites/perlmutter.yaml; do not edit by hand:
# change the site file and run `torchmpi render perlmutter` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: ae784a6eff585401335d190bf132ebe75730a571711c942796bffaae9f94066f
# body-sha256: 1e8c9b3332ad6d67bb544a2e15bf0867c13bd48f375a4c10fcb30bffedabbd6e
# Runtime variables for jobs on 'perlmutter' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# site values: HPE shs-ccl-docs ccl_env.sh (2026); FI_CXI_RDZV_PROTO=alt_read needs `srun --network=disable_rdzv_get` for the job
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3
export FI_CXI_DEFAULT_TX_SIZE=2048
export FI_CXI_RDZV_PROTO=alt_read
export FI_CXI_RDZV_EAGER_SIZE=0
export FI_CXI_RDZV_THRESHOLD=0
export FI_CXI_RDZV_GET_MIN=0
export FI_CXI_RX_MATCH_MODE=hybrid
export MPICH_GPU_SUPPORT_ENABLED=1
