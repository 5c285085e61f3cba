# Rendered by torchmpi 0.1.0 from sites/generic-ib.yaml; do not edit by hand:
# change the site file and run `torchmpi render generic-ib` (docs/sites.md).
# spack v1.1.0, builtin spack-packages v2026.06.0
# site-sha256: 064ad4923eabb20bfe4663093d1246c0daf642f0f40dfe1f8644a406aa7f0dc2
# body-sha256: cd5c0ef4de591953c76025c6d52a7fc4c0256a30b59685617d7bb0a8d575ea93
# Runtime variables for jobs on 'generic-ib' (launcher: slurm, fabric: ib).
# Source this file in the job script; it changes nothing at build time.
# site values: NCCL user guide, "Environment Variables" (NCCL_SOCKET_IFNAME, NCCL_DEBUG)
export NCCL_SOCKET_IFNAME='^lo,docker,virbr,lxcbr,cni,podman,veth,br'
export NCCL_DEBUG=WARN
