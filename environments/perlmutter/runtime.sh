# Rendered by torchmpi 0.1.0 from sites/perlmutter.yaml; do not edit by hand:
# change the site file and run `torchmpi render perlmutter` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: c7b3a4fb76534680de51b4d8ba9dc136fff86108ded9dc31aacab69a9f72a79c
# body-sha256: accda5c200f3848afd123bf7dc03f7d5525cbdbd96167344eb384abfa0033e74
# Runtime variables for jobs on 'perlmutter' (launcher: slurm).
# Source this file in the job script; it changes nothing at build time.
# Source: HPE shs-ccl-docs ccl_env.sh (2026); FI_CXI_RDZV_PROTO=alt_read needs `srun --network=disable_rdzv_get` for the job
export NCCL_NET='AWS Libfabric'
export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export FI_CXI_DEFAULT_TX_SIZE=2048
export FI_CXI_RDZV_PROTO=alt_read
export FI_CXI_RDZV_EAGER_SIZE=0
export FI_CXI_RDZV_THRESHOLD=0
export FI_CXI_RDZV_GET_MIN=0
export FI_CXI_RX_MATCH_MODE=hybrid
export MPICH_GPU_SUPPORT_ENABLED=1
