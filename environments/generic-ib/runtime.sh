# Rendered by torchmpi 0.1.0 from sites/generic-ib.yaml; do not edit by hand:
# change the site file and run `torchmpi render generic-ib` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: f4efae234d0a692ae36b2fa55ba2bc1f523a0033cb4641e60ebba3699cbcba98
# body-sha256: 49f163488f169442772cf5d610ddcc99123e942273fb2fef1d0a6910388ec742
# Runtime variables for jobs on 'generic-ib' (launcher: slurm).
# Source this file in the job script; it changes nothing at build time.
# Source: NCCL user guide, "Environment Variables" (NCCL_SOCKET_IFNAME, NCCL_DEBUG)
export NCCL_SOCKET_IFNAME='^docker0,lo'
export NCCL_DEBUG=WARN
