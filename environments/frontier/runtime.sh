# Rendered by torchmpi 0.1.0 from sites/frontier.yaml; do not edit by hand:
# change the site file and run `torchmpi render frontier` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 4c9ce77f1072361482c9cad6f38c922939b2a8ce8eb48cdc08581bc5661c8cca
# body-sha256: 062380ec46838ffdcf760b7d3237faf0dd0c064d45a9cbd27d0fe9f9950ba31c
# Runtime variables for jobs on 'frontier' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# amd GPUs on slingshot: HewlettPackard/shs-ccl-docs@438fcce rccl/rccl_tuning_guide.md:69; olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:717
# centre defaults (olcf, amd GPUs): olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:699,718; olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:714; olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:490-493; olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:491; olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:686-696
# site values: olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst (2026)
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=kdreg2
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export HSA_FORCE_FINE_GRAIN_PCIE=1
export NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3
export MIOPEN_USER_DB_PATH=/tmp/my-miopen-cache
export MIOPEN_CUSTOM_CACHE_DIR=/tmp/my-miopen-cache
export MPICH_GPU_SUPPORT_ENABLED=1
if [ "${SLURM_JOB_NUM_NODES:-1}" -gt 1 ]; then export NCCL_NET=OFI; else export NCCL_NET=Socket; fi
