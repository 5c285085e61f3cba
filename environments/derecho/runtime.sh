# Rendered by torchmpi 0.1.0 from sites/derecho.yaml; do not edit by hand:
# change the site file and run `torchmpi render derecho` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: dd2583faf34147299ca670c1244a67b16abe1bbe39498d12ad601ae7c4cf2a8b
# body-sha256: b5fae8459a3db55c111d1584be024d9b07ff50f883512c0cb1fc4d212b0a1902
# Runtime variables for jobs on 'derecho' (launcher: pbs, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# site values: NCAR derecho-pytorch-mpi profile.d/derecho-nccl-aws-ofi.cfg and config_env.sh (HPE "Running NCCL-Based Applications" v1.1, 2024-03)
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export NCCL_SOCKET_IFNAME=hsn
export NCCL_DEBUG=WARN
export MPICH_GPU_SUPPORT_ENABLED=1
export MPICH_OFI_NIC_POLICY=GPU
