# Rendered by torchmpi 0.1.0 from sites/alps-gh200.yaml; do not edit by hand:
# change the site file and run `torchmpi render alps-gh200` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 98cc6f5f11ea50fc88314ef8bc08f245cb12f5cdc10fc10d76efedd98917bfb8
# body-sha256: a36f57ccb4c644d658b0d4f95c87b53820224ec80dcc7e19c442301a458bde04
# Runtime variables for jobs on 'alps-gh200' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# site values: CSCS PyTorch uenv v2.9.1, eth-cscs/alps-uenv recipes/pytorch/v2.9.1/gh200/environments.yaml (2026-03); MPICH switch from docs.cscs.ch/software/ml/pytorch
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export NCCL_P2P_LEVEL=NVL
export NCCL_NET_GDR_C2C=1
export NCCL_NET_GDR_READ=1
export NCCL_PROTO='^LL128'
export NCCL_NCHANNELS_PER_NET_PEER=4
export FI_PROVIDER=cxi
export FI_CXI_DEFAULT_TX_SIZE=16384
export FI_CXI_RDZV_PROTO=alt_read
export FI_CXI_RDZV_EAGER_SIZE=0
export FI_CXI_RDZV_GET_MIN=0
export FI_CXI_RDZV_THRESHOLD=0
export FI_CXI_RX_MATCH_MODE=hybrid
export CUDA_CACHE_DISABLE=1
export MPICH_GPU_SUPPORT_ENABLED=0
