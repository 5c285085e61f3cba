# Copyright Spack Project Developers. See COPYRIGHT file for details.
#
# SPDX-License-Identifier: (Apache-2.0 OR MIT)
"""NCCL for HPE Slingshot-11: builtin ``nccl`` + the aws-ofi-nccl plugin.

A bundle, so the DAG keeps exactly one ``nccl`` node, shared with builtin
dependents (py-torch, nccl-tests, ...).  Its versions are the NCCL releases of
``VOUCHED_PAIRS``; each allows only the plugin releases a public source pairs
with that NCCL (a build script, an environment deployed on Slingshot), or
whose release notes say they were tested with it or support it (each entry
quotes which).
"""

from spack_repo.builtin.build_systems.bundle import BundlePackage
from spack_repo.builtin.build_systems.cuda import CudaPackage

from spack.package import *

#: (NCCL, aws-ofi-nccl, libfabric the source used, fabric, who vouches,
#: source, evidence).  Only pairs a source vouches for; within builtin
#: spack-packages v2026.06.0's versions (it has no plugin after 1.19.0).
#: "slingshot": paired for Slingshot-11 by HPE, CSCS or NCAR; "efa": listed
#: as tested or supported in the plugin's release notes, which AWS runs on
#: EC2 (EFA).  Evidence is the kind of record the source is, one of
#: ``torchmpi.pairs.EVIDENCE``: CSCS's an environment it deploys on Alps
#: ("deployed environment"; its PyTorch uenv's 1.18.0-dev is a patched master
#: commit, not a release, so 1.18.0's row is AWS's), HPE's and NCAR's "build
#: script"s, AWS's "release notes"; none is a "job log", the one kind that records a run,
#: and messages and the rendered packages.yaml word each kind as it is.
#: The one home of this table: the torchmpi tool reads this literal
#: (torchmpi.pairs, through ast, without Spack) to refuse a pair at site
#: validation and to pin a pair vouched for Slingshot on a site that names
#: none; tests/test_pairs.py checks docs/design.md shows the same table.
VOUCHED_PAIRS = (
    (
        "2.29.7-1",
        "1.19.0",
        "-",
        "efa",
        "AWS",
        "aws/aws-ofi-nccl v1.19.0 RELEASENOTES.md:12 (tested with NCCL 2.29.7-1)",
        "release notes",
    ),
    (
        "2.29.2-1",
        "1.18.0",
        "-",
        "efa",
        "AWS",
        (
            "aws/aws-ofi-nccl v1.18.0 RELEASENOTES.md:12 (supports NCCL 2.29.2-1); :27 fixes"
            " FI_MR_ENDPOINT providers such as cxi, SENDRECV protocol only.  Not CSCS's:"
            " its PyTorch uenv v2.9.1 deploys 1.18.0-dev, master commit eb9877e9 with HPE's"
            " endpoint_mr.eb9877e.patch (RDMA protocol on such providers), eth-cscs/"
            "alps-uenv@0db6323 recipes/pytorch/v2.9.1/gh200/repo/packages/aws_ofi_nccl/"
            "package.py:22,69-72"
        ),
        "release notes",
    ),
    (
        "2.29.2-1",
        "1.17.2",
        "2.4.0",
        "slingshot",
        "CSCS",
        "CSCS prgenv-gnu 26.3, eth-cscs/cscs-docs@80abed1 docs/software/prgenv/prgenv-gnu.md",
        "deployed environment",
    ),
    (
        "2.28.7-1",
        "1.19.0",
        "-",
        "efa",
        "AWS",
        "aws/aws-ofi-nccl v1.19.0 RELEASENOTES.md:12 (tested with NCCL 2.28.7-1)",
        "release notes",
    ),
    (
        "2.28.7-1",
        "1.17.3",
        "-",
        "efa",
        "AWS",
        "aws/aws-ofi-nccl v1.17.3 RELEASENOTES.md:10 (supports NCCL 2.28.7-1)",
        "release notes",
    ),
    (
        "2.28.7-1",
        "1.17.2",
        "-",
        "efa",
        "AWS",
        "aws/aws-ofi-nccl v1.17.2 RELEASENOTES.md:10 (supports NCCL 2.28.7-1)",
        "release notes",
    ),
    (
        "2.27.7-1",
        "1.19.0",
        "1.22.0",
        "slingshot",
        "HPE",
        "HPE HewlettPackard/shs-ccl-docs@438fcce nccl/build_nccl_environment.sh:12-15",
        "build script",
    ),
    (
        "2.27.3-1",
        "1.19.0",
        "-",
        "efa",
        "AWS",
        "aws/aws-ofi-nccl v1.19.0 RELEASENOTES.md:12 (tested with NCCL 2.27.3-1)",
        "release notes",
    ),
    (
        "2.21.5-1",
        "1.6.0",
        "1.15.2.0",
        "slingshot",
        "NCAR",
        "NCAR Derecho, benkirk/derecho-pytorch-mpi@1adc9e4 utils/build_nccl-ofi-plugin.sh:19-42",
        "build script",
    ),
)


#: (ROCm release of RCCL, aws-ofi-nccl built ``--with-rocm``, libfabric the
#: source used, fabric, who vouches, source, evidence): the pairs of RCCL and
#: the plugin that ``py-torch-mpi +rocm fabric=slingshot`` allows.  Evidence
#: is the kind of record the source is, one of ``torchmpi.pairs.EVIDENCE``
#: (here "build recipe", "build steps", "build script"): only a "job log"
#: records a run, and the rendered packages.yaml words each kind as it is.
#: Its columns are ``VOUCHED_PAIRS``', but a table of its own: column 0 is a
#: ROCm/RCCL release, not an NCCL one, and ``torchmpi.pairs`` reads
#: ``VOUCHED_PAIRS`` row by row (``Pair(*row)``) to pin ``nccl`` on NVIDIA
#: sites; an RCCL row there would be offered as an NCCL pin, and an eighth
#: "vendor" column would break that reader.  OLCF's pair needs aws-ofi-nccl
#: 1.19.2 and LUMI's 1.20.0, which builtin v2026.06.0 lacks (newest: 1.19.0):
#: torchmpi's aws-ofi-nccl override adds both from their tags' commits.  LUMI
#: names no libfabric release (its recipe asks pkg-config for the system's):
#: "-", as for the release notes' pairs.  docs/design.md shows this table.
VOUCHED_RCCL_PAIRS = (
    (
        "7.0.3",
        "1.20.0",
        "-",
        "slingshot",
        "LUMI",
        (
            "LUMI's build for its ROCm 7.0.3 (the system libfabric, release not named), "
            "Lumi-supercomputer/LUMI-EasyBuild-contrib@0baa99f "
            "easybuild/easyconfigs/a/aws-ofi-nccl/aws-ofi-nccl-1.20.0-rocm7.eb:28-46"
        ),
        "build recipe",
    ),
    (
        "7.1.1",
        "1.19.2",
        "2.3.1",
        "slingshot",
        "OLCF",
        (
            "OLCF Frontier build steps (ROCm 7.1.1 as their example), olcf/olcf-user-docs@f0571fe "
            "software/analytics/pytorch_frontier.rst:638-658"
        ),
        "build steps",
    ),
    (
        "6.4.0",
        "1.19.0",
        "1.22.0",
        "slingshot",
        "HPE",
        "HPE HewlettPackard/shs-ccl-docs@438fcce rccl/build_rccl_environment.sh:12-15",
        "build script",
    ),
)


def vouched_plugins(nccl: str) -> list:
    """The plugin releases vouched for with NCCL ``nccl``, newest first."""
    return [pair[1] for pair in VOUCHED_PAIRS if pair[0] == nccl]


class NcclSs11(BundlePackage, CudaPackage):
    """NCCL pinned and configured for HPE Slingshot-11 (libfabric cxi provider
    through the aws-ofi-nccl plugin), with HPE's recommended runtime settings."""

    homepage = "https://github.com/HewlettPackard/shs-ccl-docs"

    # No `preferred`: the solver weighs builtin nccl's own version order too,
    # so a preference here would not hold; a site pins one in its site file
    # (`nccl:` in sites/<site>.yaml).
    for _nccl in dict.fromkeys(pair[0] for pair in VOUCHED_PAIRS):
        version(_nccl)
        depends_on(f"nccl@{_nccl}", when=f"@{_nccl}")
        _plugins = vouched_plugins(_nccl)
        requires(
            f"^aws-ofi-nccl@{','.join(_plugins)}",
            when=f"@{_nccl}",
            msg=f"nccl-ss11@{_nccl}: no source vouches for this aws-ofi-nccl with NCCL "
            f"{_nccl}; use aws-ofi-nccl@{' or @'.join(_plugins)} (docs/design.md)",
        )

    # fabrics=auto: no verbs (rdma-core); NCCL loads the plugin at runtime.
    depends_on("nccl +cuda fabrics=auto", type=("link", "run"))
    depends_on("aws-ofi-nccl +cuda +cxi", type=("link", "run"))

    for _arch in CudaPackage.cuda_arch_values:
        depends_on(f"nccl cuda_arch={_arch}", when=f"cuda_arch={_arch}")

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
    # v1.17.2 RELEASENOTES.md: "Fixed shutdown ordering issue on NICs that
    # require per-endpoint memory registration (Cray Slingshot)".  The fix
    # (b96292b9, src/cm/nccl_ofi_cm_resources.cpp) orders the connection
    # manager's MR and endpoint cleanup; src/cm/ first ships in 1.16.0
    # (38215531, fddaa3ea): 1.14-1.15 have no such code.  1.17.1 took HPE's first
    # fix (c386e733, from 9e0f5ba9) and reverted it before release (4e14e25c).
    conflicts(
        "^aws-ofi-nccl@1.16:1.17.1",
        msg="aws-ofi-nccl 1.16.0-1.17.1 have a shutdown-ordering bug on Slingshot-11 "
        "(fixed in 1.17.2); use 1.17.2 or later",
    )
    # NVIDIA/nccl v2.29.3-1 (25368a7f): "Fixes CAS usage in case of weak
    # failure which was causing a hang on ARM ... when compiled with gcc
    # versions prior to 10" (aarch64 deadlocks with 2.28.9 and 2.29.2,
    # NVIDIA/nccl#2353).  The weak-CAS loop it replaces in src/proxy.cc is in
    # v2.28.9-1 and v2.29.2-1 only (2.28.3/2.28.7 use __sync_val_compare_and_swap).
    # The target comes before %gcc: Spack binds what follows %gcc to gcc's node.
    conflicts(
        "^nccl@2.28.9-1:2.29.2-1 target=aarch64: %gcc@:9",
        msg="NCCL 2.28.9-2.29.2 built with gcc < 10 hangs on ARM (fixed in 2.29.3, "
        "NVIDIA/nccl#2353): build NCCL with gcc 10 or later",
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
