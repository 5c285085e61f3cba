# Rendered by torchmpi 0.1.0 from sites/lumi.yaml; do not edit by hand:
# change the site file and run `torchmpi render lumi` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 416ed464ba5d240d513efc48bc60a76cb81d575cd60742dff8af21af4a4d2688
# body-sha256: d42eae754c4a4dab79f6ada27f9ab578861b87ff7913b7b39783c6cf364813a2
# Runtime variables for jobs on 'lumi' (launcher: slurm, fabric: slingshot).
# Source this file in the job script; it changes nothing at build time.
# fabric defaults (slingshot): HPE shs-ccl-docs ccl_env.sh (2026); HPE "Running NCCL-Based Applications" v1.1 (2024-03); docs.cscs.ch/software/communication/nccl (2025)
# amd GPUs on slingshot: HewlettPackard/shs-ccl-docs@438fcce rccl/rccl_tuning_guide.md:69; olcf/olcf-user-docs@f0571fe software/analytics/pytorch_frontier.rst:717
# site values: HPE HewlettPackard/shs-ccl-docs@438fcce rccl/rccl_tuning_guide.md (the tool's Slingshot and AMD defaults); LUMI's guide sets no other variable outside its container bindings (Lumi-supercomputer/LUMI-AI-Guide@a7e3387)
export NCCL_NET='AWS Libfabric'
export NCCL_CROSS_NIC=1
export NCCL_NET_GDR_LEVEL=PHB
export FI_MR_CACHE_MONITOR=userfaultfd
export FI_CXI_DISABLE_HOST_REGISTER=1
export FI_CXI_DEFAULT_CQ_SIZE=131072
export HSA_FORCE_FINE_GRAIN_PCIE=1
export MPICH_GPU_SUPPORT_ENABLED=1
