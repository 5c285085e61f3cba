"""torchmpi's ReFrame checks: the doctor, the all-reduce per backend, the NCCL network path.

Shipped as package data of the tool and run with a configuration that
``torchmpi reframe <site>`` writes from the site file.  Everything a check
needs to know about the site comes from the partition's ``extras['torchmpi']``
(site name and file, doctor findings the site expects, launcher options from
the fabric data, the pinned NCCL plugin, the bootstrap interface, performance
references with their sources) and its ``features``: the checks select
partitions and environments by feature, as CSCS's checks do
(eth-cscs/cscs-reframe-tests, checks/apps/pytorch/pytorch_allreduce.py:
``valid_systems = ['+nvgpu']``, a reference per GPU architecture).

The executables are ``torchmpi doctor`` and ``torchmpi allreduce`` from the
environment the configuration loads (the site's module or runtime.sh): the
checks test the installed stack, not a copy of it.
"""

from __future__ import annotations

import json
import re

import reframe as rfm
import reframe.utility.sanity as sn
import reframe.utility.typecheck as typ
from reframe.core.builtins import (
    parameter,
    performance_function,
    run_after,
    run_before,
    sanity_function,
    variable,
)

#: (backend, device) pairs of torchmpi_allreduce and the partition features each needs.
ALLREDUCE_VARIANTS = {
    ("gloo", "cpu"): ["+torchmpi"],
    ("mpi", "cpu"): ["+torchmpi +mpi"],
    ("mpi", "cuda"): ["+torchmpi +cuda-aware-mpi"],
    ("nccl", "cuda"): ["+torchmpi +nccl"],
}


def site_extras(partition) -> dict:
    """What ``torchmpi reframe`` put into the partition for these checks."""
    return dict(partition.extras.get("torchmpi") or {})


class TorchmpiBase(rfm.RunOnlyRegressionTest):
    """What every torchmpi check shares: selection by feature, launcher options, ranks."""

    valid_systems = ["+torchmpi"]  # noqa: RUF012 (ReFrame reads class attributes)
    valid_prog_environs = ["+torchmpi"]  # noqa: RUF012 (ReFrame reads class attributes)
    sourcesdir = None
    maintainers = ["torchmpi"]  # noqa: RUF012 (ReFrame reads class attributes)
    tags = {"torchmpi"}  # noqa: RUF012 (ReFrame reads class attributes)
    #: nodes of the job; ``-S num_nodes=2`` puts the network in the path
    num_nodes = variable(int, value=1)
    #: ranks per node; 0 means one per GPU (GPU partition) or the partition's default
    ranks_per_node = variable(int, value=0)
    #: the command; the environment puts the site's ``torchmpi`` on PATH
    torchmpi = variable(str, value="torchmpi")

    def _ranks_per_node(self) -> int:
        if self.ranks_per_node:
            return self.ranks_per_node
        gpus = self.current_partition.select_devices("gpu")
        if gpus and gpus[0].num_devices:
            return gpus[0].num_devices
        return int(site_extras(self.current_partition).get("ranks_per_node", 1))

    def _place(self, ranks_per_node: int) -> None:
        """``num_nodes`` x ``ranks_per_node`` ranks, every GPU of each node, the cores shared.

        One place for what a check asks of the scheduler, so every check claims the
        partition's GPUs and its share of cores the same way (``--gpus-per-node``,
        PBS ``ngpus``/``ncpus``) and the job scripts differ only in their ranks.
        """
        self.num_tasks_per_node = ranks_per_node
        self.num_tasks = self.num_nodes * ranks_per_node
        gpus = self.current_partition.select_devices("gpu")
        if gpus:
            self.num_gpus_per_node = gpus[0].num_devices
        self._share_cpus()

    def _share_cpus(self) -> None:
        """Give each rank its share of the node's cores (PBS asks for ncpus per node)."""
        cpus = int(site_extras(self.current_partition).get("cpus_per_node", 0))
        if cpus and self.num_tasks_per_node:
            self.num_cpus_per_task = max(1, cpus // self.num_tasks_per_node)

    @run_before("run")
    def add_launcher_options(self):
        """Flags the site's runtime values need (fabric data ``launcher_flags``)."""
        self.job.launcher.options += list(
            site_extras(self.current_partition).get("launcher_options", []))


@rfm.simple_test
class torchmpi_doctor(TorchmpiBase):
    """``torchmpi doctor --json --site <site>``, one rank per node.

    Passes when no check FAILs except those the site file lists under
    ``checks.expected_fail`` (a finding the site knows and accepts).
    """

    descr = "torchmpi doctor on every node: no FAIL the site does not expect"
    #: run the doctor's one-rank probes (``-S probe=false``: the static checks only).
    #: typ.Bool, not bool: ReFrame casts a -S string with the type, and bool("false")
    #: is True (its typecheck.Bool docstring says so)
    probe = variable(typ.Bool, value=True)

    @run_after("setup")
    def set_job(self):
        extras = site_extras(self.current_partition)
        self._place(1)
        self.executable = self.torchmpi
        self.executable_opts = ["doctor", "--json"]
        if not self.probe:
            self.executable_opts.append("--no-probe")
        if extras.get("site_file"):
            self.executable_opts += ["--site", extras["site_file"]]

    @sanity_function
    def no_unexpected_fail(self):
        expected = site_extras(self.current_partition).get("expected_fail", [])
        return sn.assert_eq(_unexpected_fails(self.stdout, expected), [],
                            msg="doctor FAIL: {0}")


@sn.deferrable
def _unexpected_fails(stdout, expected) -> list[str]:
    """FAIL check names in every JSON report on stdout (one per rank), less the expected."""
    with open(stdout, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    decoder, pos, reports = json.JSONDecoder(), 0, []
    while True:
        start = text.find("{", pos)
        if start < 0:
            break
        report, pos = decoder.raw_decode(text, start)
        reports.append(report)
    if not reports:
        return ["no doctor report on stdout"]
    return sorted({c["name"] for r in reports for c in r.get("checks", [])
                   if c.get("status") == "FAIL" and c["name"] not in expected})


@rfm.simple_test
class torchmpi_allreduce(TorchmpiBase):
    """``torchmpi allreduce`` per backend: every rank checks the sum, then bus bandwidth.

    Performance variables are nccl-tests' figures as torchmpi prints them:
    ``busbw``, the bus bandwidth at the largest size (``max_bytes``), which is
    what a reference from the site file (``checks.references``, each with its
    source) is compared with, as CSCS compares nccl-tests at 1 GiB
    (cscs-reframe-tests checks/containers/container_engine/xccl_tests.py); and,
    for the record, the average over all sizes and the peak.
    """

    variant = parameter(list(ALLREDUCE_VARIANTS), fmt=lambda v: f"{v[0]}_{v[1]}")
    min_bytes = variable(str, value="8")
    #: the largest size, where ``busbw`` is read and a reference is taken
    max_bytes = variable(str, value="1G")
    warmup = variable(int, value=5)
    iters = variable(int, value=20)

    @run_after("init")
    def select_partitions(self):
        self.valid_systems = ALLREDUCE_VARIANTS[self.variant]
        self.descr = f"all-reduce over {self.variant[0]} with {self.variant[1]} tensors"

    @run_after("setup")
    def set_job(self):
        backend, device = self.variant
        self._place(self._ranks_per_node())
        self.executable = self.torchmpi
        self.executable_opts = ["allreduce", "--backend", backend, "--device", device,
                                "-b", self.min_bytes, "-e", self.max_bytes,
                                "-w", str(self.warmup), "-n", str(self.iters)]

    @run_before("performance")
    def set_reference(self):
        backend, device = self.variant
        for ref in site_extras(self.current_partition).get("references", []):
            if (ref["backend"], ref["device"], ref["nodes"], size_bytes(ref["size"])) != (
                    backend, device, self.num_nodes, size_bytes(self.max_bytes)):
                continue
            lower = -abs(float(ref["tolerance"]))
            self.reference = {"*": {"busbw": (float(ref["busbw"]), lower, None, "GB/s")}}
            self.descr += f"; reference: {ref['source']}"  # where the figure comes from

    @sanity_function
    def results_are_right(self):
        return sn.all([sn.assert_found(r"^# correctness: OK$", self.stdout),
                       sn.assert_found(r"^# Avg bus bandwidth\s*:", self.stdout)])

    @performance_function("GB/s")
    def busbw(self):
        """The bus bandwidth of the row of the largest size (the last one printed)."""
        rows = sn.extractall(r"^\s*(\d+)\s+\d+\s+\S+\s+sum\s+\S+\s+\S+\s+(\S+)\s+OK$",
                             self.stdout, 2, float)
        return sn.getitem(rows, -1)

    @performance_function("GB/s")
    def avg_busbw(self):
        return sn.extractsingle(r"^# Avg bus bandwidth\s*:\s*(\S+)", self.stdout, 1, float)

    @performance_function("GB/s")
    def peak_busbw(self):
        return sn.extractsingle(r"^# peak busbw (\S+) GB/s", self.stdout, 1, float)


@rfm.simple_test
class torchmpi_nccl_network(TorchmpiBase):
    """NCCL over the site's network: the pinned plugin, its provider, the bootstrap interface.

    What the log must say is what HPE and CSCS look for (``NET/OFI Selected
    provider is cxi``, ``Using network AWS Libfabric``; NCCL_DEBUG=INFO), with
    the version and interface from the site file.
    """

    valid_systems = ["+torchmpi +nccl"]  # noqa: RUF012 (ReFrame reads class attributes)
    num_nodes = 2  # across nodes: the network is what this check is about
    descr = "NCCL all-reduce across nodes through the site's network plugin"

    @run_after("setup")
    def set_job(self):
        self._place(self._ranks_per_node())
        # BOOTSTRAP: from NCCL 2.23 the "Bootstrap : Using <if>" line the sanity needs is
        # logged under it, not INIT (NVIDIA/nccl src/bootstrap.cc at v2.23.4-1); the
        # doctor's value (torchmpi.doctor.network.NCCL_DEBUG_SUBSYS).
        self.env_vars = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,BOOTSTRAP,NET"}
        self.executable = self.torchmpi
        self.executable_opts = ["allreduce", "--backend", "nccl", "--sizes", "1M",
                                "-w", "1", "-n", "2"]

    @sanity_function
    def network_is_the_sites(self):
        needles = network_needles(site_extras(self.current_partition).get("nccl", {}))
        return sn.all([sn.assert_found(n, self.stdout) for n in needles])


def size_bytes(text: str) -> int:
    """``"64K"``, ``"1G"``, ``"1024M"`` -> bytes, as ``torchmpi allreduce -e`` reads them
    (binary units), so a reference at 1G matches a run to 1024M."""
    match = re.fullmatch(r"\s*(\d+)\s*([KMG]?)(?:I?B)?\s*", str(text).upper())
    if not match:
        raise ValueError(f"not a size: {text!r}")
    return int(match.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[match.group(2)]


def network_needles(want: dict) -> list[str]:
    """The lines an NCCL_DEBUG=INFO all-reduce log must hold on the site (regular expressions)."""
    needles = [r"^# correctness: OK$"]
    if want.get("network"):
        needles.append(r"Using network " + re.escape(want["network"]))
    if want.get("plugin"):
        needles.append(r"(Initializing|Using) aws-ofi-nccl v?" + re.escape(want["plugin"]))
    if want.get("provider"):
        needles.append(r"Selected [Pp]rovider is " + re.escape(want["provider"]))
    if want.get("bootstrap"):
        needles.append(r"Bootstrap\s*:\s*Using\s+(\[\d+\])?(" + want["bootstrap"] + r")")
    return needles
