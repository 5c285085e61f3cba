# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Same-name override of builtin ``aws-ofi-nccl`` for HPE Slingshot-11.

Adds: libfabric with the ``cxi`` provider (an external on Cray systems), the
GPU architecture recorded like the rest of the NCCL stack, a refusal of a
known-bad NCCL, and a run environment whose ``NCCL_NET`` matches the
plugin's version and never clashes with ``NCCL_NET_PLUGIN``.
"""

from spack_repo.builtin.build_systems.cuda import CudaPackage
from spack_repo.builtin.packages.aws_ofi_nccl.package import AwsOfiNccl as BuiltinAwsOfiNccl

from spack.package import *


class AwsOfiNccl(BuiltinAwsOfiNccl):
    """AWS OFI NCCL: the libfabric network plugin for NCCL (torchmpi override
    for HPE Slingshot-11 through libfabric's cxi provider)."""

    variant(
        "cxi",
        default=True,
        description="Require libfabric's cxi provider (HPE Slingshot-11)",
    )
    depends_on("libfabric fabrics=cxi", when="+cxi")

    # The plugin has no GPU kernels, but recording cuda_arch keeps the whole
    # NCCL stack of a DAG (torch, nccl, plugin) on one GPU generation, like
    # builtin lbann/aluminum do for their NCCL.
    variant(
        "cuda_arch",
        description="CUDA architecture of the NCCL this plugin serves",
        values=any_combination_of(*CudaPackage.cuda_arch_values),
        sticky=True,
        when="+cuda",
    )
    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"nccl cuda_arch={_arch}", when=f"+cuda cuda_arch={_arch}")

    # NCCL 2.28.9 deadlocks and crashes with the plugin, while 2.27.7 works:
    # https://github.com/aws/aws-ofi-nccl/issues/1055
    conflicts(
        "^nccl@2.28.9-1",
        when="+cuda",
        msg="NCCL 2.28.9 deadlocks with the aws-ofi-nccl plugin (aws/aws-ofi-nccl#1055); "
        "use nccl@2.27.7-1 or nccl@2.29.2-1",
    )

    @property
    def nccl_net(self) -> str:
        """The ``NCCL_NET`` value that selects this plugin.

        Up to 1.11 the plugin registers as "AWS Libfabric" only; from 1.12 it
        registers as "Libfabric" and accepts "AWS Libfabric" and "OFI" as
        aliases (aws/aws-ofi-nccl#530).  HPE's Slingshot guide now uses "OFI"
        (HewlettPackard/shs-ccl-docs#35), which has no space to quote.
        """
        return "AWS Libfabric" if self.spec.satisfies("@:1.11") else "OFI"

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        env.prepend_path("LD_LIBRARY_PATH", self.prefix.lib)
        # NCCL_NET makes NCCL abort instead of silently falling back to
        # sockets.  Setting NCCL_NET_PLUGIN as well broke plugin loading at
        # CSCS ("NET/Plugin: Could not find: ofi libnccl-net-ofi.so"), so it
        # is cleared: the plugin is found as libnccl-net.so on the path.
        env.set("NCCL_NET", self.nccl_net)
        env.unset("NCCL_NET_PLUGIN")
