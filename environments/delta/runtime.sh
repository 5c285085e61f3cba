# Rendered by torchmpi 0.1.0 from sites/delta.yaml; do not edit by hand:
# change the site file and run `torchmpi render delta` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: a8e47c1757bdf8c5b3e39518e3c909e5968cd6a53467e89ab589848b2faea88e
# body-sha256: ad7edbaaaa7063ba62da239d3119d2339367105ac981365b26b932cde1d0e74e
# Runtime variables for jobs on 'delta' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# site values: NCSA Delta user guide, running_jobs.rst (PyTorch multi-node example)
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export NCCL_SOCKET_IFNAME=hsn
