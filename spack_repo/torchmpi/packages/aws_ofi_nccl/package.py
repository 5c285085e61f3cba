# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""Same-name override of builtin ``aws-ofi-nccl`` for HPE Slingshot-11.

Neutral unless asked: with the default ``~cxi`` this recipe concretizes and
sets the run environment exactly as builtin does, so registering the torchmpi
repository site-wide changes nothing for other users.  ``+cxi`` (what
``nccl-ss11`` asks for) adds libfabric's ``cxi`` provider and a ``NCCL_NET``
that the installed version answers to (the names by release: ``nccl_net``);
with ``+rocm`` also the plugin name RCCL 2.27.7 opens (``link_rccl_default_name``).
"""

import os

from spack_repo.builtin.packages.aws_ofi_nccl.package import AwsOfiNccl as BuiltinAwsOfiNccl

from spack.package import *


class AwsOfiNccl(BuiltinAwsOfiNccl):
    """AWS OFI NCCL: the libfabric network plugin for NCCL (torchmpi override:
    optional HPE Slingshot-11 support through libfabric's cxi provider)."""

    license("Apache-2.0")

    # The plugin OLCF builds for RCCL on Frontier (olcf/olcf-user-docs@f0571fe
    # software/analytics/pytorch_frontier.rst:649-650, the v1.19.2 release), one
    # of nccl-ss11's VOUCHED_RCCL_PAIRS; builtin stops at 1.19.0.  From the tag's
    # commit (git: builtin's `git`), since the release tarball's checksum is not
    # published in a source this repository can cite; a checkout has no configure,
    # which builtin's AutotoolsBuilder.autoreconf then generates (autoreconf -ivf,
    # with the autoconf, automake and libtool builtin's package depends on).
    version("1.19.2", commit="17120adbfd9721f4d0861360b09f05a8d9c5fba4")
    # The plugin LUMI builds for RCCL against its ROCm 7.0.3, the same way, from the
    # v1.20.0 tag (Lumi-supercomputer/LUMI-EasyBuild-contrib@0baa99f
    # easybuild/easyconfigs/a/aws-ofi-nccl/aws-ofi-nccl-1.20.0-rocm7.eb:28-46), the
    # other ROCm pair builtin lacks.
    version("1.20.0", commit="a2a6d08ea98296f99596b5c18b30b8a20d74f609")

    variant(
        "cxi",
        default=False,
        description="Require libfabric's cxi provider (HPE Slingshot-11) and set NCCL_NET "
        "for this plugin version",
    )
    # configure refuses libfabric < 1.11 (m4/check_pkg_libfabric.m4:41, v1.14.0-v1.21.1;
    # v1.6.0 RELEASENOTES.md states the same minimum).
    depends_on("libfabric@1.11: fabrics=cxi", when="+cxi")

    @property
    def nccl_net(self) -> str:
        """The ``NCCL_NET`` value that selects this plugin.

        Through 1.12.x the plugin registers only as "AWS Libfabric".  From
        v1.13.0-aws (aws/aws-ofi-nccl#530) it registers as "Libfabric", and a
        constructor (``nvidia_plugin_name_fixup``) renames it to "AWS
        Libfabric" or "OFI" when ``NCCL_NET`` names one of them
        (tests/fixtures/aws_ofi_nccl_net_names.json, read at the tags).  So
        "OFI" selects 1.13.0 and later, and has no space to quote in job
        scripts; HPE's ``ccl_env.sh`` (HewlettPackard/shs-ccl-docs) sets
        ``NCCL_NET="AWS Libfabric"``, which every release answers to, and
        torchmpi's Slingshot defaults (data/fabrics/slingshot.yaml) set that.
        """
        return "AWS Libfabric" if self.spec.satisfies("@:1.12") else "OFI"

    @run_after("install", when="+rocm +cxi")
    def link_rccl_default_name(self) -> None:
        """Install ``libnccl-net.so`` beside ``librccl-net.so``, as OLCF's build of
        the plugin for Frontier does ("a symlink that some versions of RCCL need to
        find the plugin": olcf/olcf-user-docs@f0571fe
        software/analytics/pytorch_frontier.rst:663-664).

        With ``NCCL_NET_PLUGIN`` unset RCCL opens one default name, which changed
        twice: ``librccl-net.so`` up to NCCL 2.26's loader; ``libnccl-net.so`` on
        NCCL 2.27's (ROCm/rccl@0123763f ``src/plugin/net.cc``, defaultNetPlugin),
        which RCCL 2.27.7 ships from ROCm 7.1.0 (ROCm/rocm-systems
        ``projects/rccl/CHANGELOG.md``) -- Frontier's rocm/7.1.1; ``librccl-net.so``
        again after ROCm/rocm-systems#4201.  ``--with-rocm`` installs only
        ``librccl-net.so`` and ``librccl-net-ofi.so`` (``src/Makefile.am`` at
        v1.19.2 and v1.20.0), so on ROCm 7.1 RCCL found no plugin and a multi-node
        job with ``NCCL_NET=OFI`` stopped.  With both names every RCCL finds it on
        ``LD_LIBRARY_PATH`` (builtin's run environment); a CUDA build is untouched.
        """
        lib = join_path(self.prefix.lib, "librccl-net.so")
        link = join_path(self.prefix.lib, "libnccl-net.so")
        if os.path.exists(lib) and not os.path.lexists(link):
            symlink("librccl-net.so", link)

    def setup_run_environment(self, env: EnvironmentModifications) -> None:
        super().setup_run_environment(env)
        if self.spec.satisfies("+cxi"):
            # NCCL_NET makes NCCL abort instead of silently falling back to
            # sockets (HPE).  NCCL_NET_PLUGIN is left to the user: from 1.15
            # the plugin documents NCCL_NET_PLUGIN=ofi, which works with it.
            env.set("NCCL_NET", self.nccl_net)
