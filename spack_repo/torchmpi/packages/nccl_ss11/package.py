# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""NCCL for HPE Slingshot-11: builtin ``nccl`` + the aws-ofi-nccl plugin.

A bundle, so the DAG keeps exactly one ``nccl`` node, shared with builtin
dependents (py-torch, nccl-tests, ...).  Its versions are the NCCL releases it
pins, each known to work with the plugin on Slingshot-11.
"""

from spack_repo.builtin.build_systems.bundle import BundlePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *


class NcclSs11(BundlePackage, CudaPackage):
    """NCCL pinned and configured for HPE Slingshot-11 (libfabric cxi provider
    through the aws-ofi-nccl plugin), with HPE's recommended runtime settings."""

    homepage = "https://github.com/HewlettPackard/shs-ccl-docs"

    # Each release here is known to work with the plugin on Slingshot-11:
    # 2.29.2-1 is what CSCS ships (with plugin 1.18.0), 2.27.7-1 is HPE's
    # current default (with 1.19.0), 2.21.5-1 ran on NCAR Derecho (with 1.6.0).
    # No `preferred`: the solver weighs builtin nccl's own version order too,
    # so a preference here would not hold; a site pins one in its site file.
    # 2.28.x is left out on purpose: 2.28.9 deadlocks with the plugin
    # (aws/aws-ofi-nccl#1055; aws-ofi-nccl refuses that pair itself).
    version("2.29.2-1")
    version("2.27.7-1")
    version("2.21.5-1")

    for _v in ("2.29.2-1", "2.27.7-1", "2.21.5-1"):
        depends_on(f"nccl@{_v}", when=f"@{_v}")

    # fabrics=auto: no verbs (rdma-core); NCCL loads the plugin at runtime.
    depends_on("nccl +cuda fabrics=auto", type=("link", "run"))
    # 1.6.0 was the last general release before 1.14.0; master is unreleased.
    depends_on("aws-ofi-nccl@1.6.0:1.19.0 +cuda +cxi", type=("link", "run"))

    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"nccl cuda_arch={_arch}", when=f"cuda_arch={_arch}")
        depends_on(f"aws-ofi-nccl cuda_arch={_arch}", when=f"cuda_arch={_arch}")

    requires("+cuda", msg="nccl-ss11 is NCCL for NVIDIA GPUs: use +cuda cuda_arch=<arch>")
    conflicts(
        "cuda_arch=none",
        when="+cuda",
        msg="nccl-ss11 needs the GPU architecture, e.g. cuda_arch=80 (A100) or 90 (H100/GH200)",
    )

    # Plugin releases 1.7-1.13 carry the "-aws" suffix: tested only on EC2/EFA
    # (aws/aws-ofi-nccl README), not on Slingshot.
    conflicts(
        "^aws-ofi-nccl@1.7:1.13",
        msg="aws-ofi-nccl 1.7-1.13 are AWS-only (EFA) releases; use 1.17.2 or later "
        "(or 1.6.0 with NCCL 2.21) on Slingshot-11",
    )
    # 1.17.2 fixed a shutdown-ordering bug seen on Slingshot (HPE shs-ccl-docs).
    conflicts(
        "^aws-ofi-nccl@1.14:1.17.1",
        msg="aws-ofi-nccl before 1.17.2 has a shutdown-ordering bug on Slingshot-11; "
        "use 1.17.2 or later",
    )

    #: HPE's Slingshot-11 defaults (shs-ccl-docs ccl_env.sh, 2026) on which
    #: HPE, CSCS, OLCF and NCAR agree.  Site files override any of them.
    slingshot_defaults = (
        ("NCCL_CROSS_NIC", "1"),
        ("NCCL_NET_GDR_LEVEL", "PHB"),
        ("FI_CXI_DISABLE_HOST_REGISTER", "1"),
        ("FI_MR_CACHE_MONITOR", "userfaultfd"),
        ("FI_CXI_DEFAULT_CQ_SIZE", "131072"),
    )

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        for name, value in self.slingshot_defaults:
            env.set(name, value)
