# Rendered by torchmpi 0.1.0 from sites/derecho.yaml; do not edit by hand:
# change the site file and run `torchmpi render derecho` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 9a9a15f6efa927b574021127154ed5a4bf9aae60be7e6a5fb56be9a53b265252
# body-sha256: f6bc42eced2e5b34eebed45164e77bc7bbb2e21a9318f00d272521537a9e841a
# Runtime variables for jobs on 'derecho' (launcher: pbs).
# Source this file in the job script; it changes nothing at build time.
# Source: NCAR derecho-pytorch-mpi profile.d/derecho-nccl-aws-ofi.cfg and config_env.sh (HPE "Running NCCL-Based Applications" v1.1, 2024-03)
export NCCL_NET='AWS Libfabric'
export NCCL_SOCKET_IFNAME=hsn
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export NCCL_DEBUG=WARN
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export MPICH_GPU_SUPPORT_ENABLED=1
export MPICH_OFI_NIC_POLICY=GPU
