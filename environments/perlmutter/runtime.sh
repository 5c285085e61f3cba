# Rendered by torchmpi 0.1.0 from sites/perlmutter.yaml; do not edit by hand:
# change the site file and run `torchmpi render perlmutter` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 3d9bcf4b64fe8ebece126f8195e4259ee403e2964c44e59c78b5793feabdd526
# body-sha256: 8470042915c1a582595ed65ad26dc934a5cb7525d374d8a3aed07877d7d2a613
# Runtime variables for jobs on 'perlmutter' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# site values: NERSC/podman-hpc etc/modules.d/nccl.yaml and cuda-mpich.yaml (2025)
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export NCCL_SOCKET_IFNAME=hsn
export MPICH_GPU_SUPPORT_ENABLED=1
