# Rendered by torchmpi 0.1.0 from sites/generic-ib.yaml; do not edit by hand:
# change the site file and run `torchmpi render generic-ib` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 82b030ffa4c551dbd0ef1a102ded60634111936a46ee9f973c5e9596435af04c
# body-sha256: f8d8484211601ac0b08cf18413d84e570998307e2d4703dce4b816ad0898db58
# Runtime variables for jobs on 'generic-ib' (launcher: slurm, fabric: ib).
# Source this file in the job script; it changes nothing at build time.
# site values: NCCL user guide, "Environment Variables" (NCCL_SOCKET_IFNAME, NCCL_DEBUG)
export NCCL_SOCKET_IFNAME='^docker0,lo'
export NCCL_DEBUG=WARN
