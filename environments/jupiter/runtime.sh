# Rendered by torchmpi 0.1.0 from sites/jupiter.yaml; do not edit by hand:
# change the site file and run `torchmpi render jupiter` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 55fa563949abe331a2718d4eea1b4320b3f0e7d182ced9642b62c7f56132f72b
# body-sha256: 09bb6f446e2737415c45f277f5b1570d7ece8219e9569ab15305c03b2f964d0d
# Runtime variables for jobs on 'jupiter' (launcher: slurm, fabric: ib).
# Source this file in the job script; it changes nothing at build time.
# No runtime variables for this site.
