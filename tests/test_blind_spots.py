"""Planted bugs the suite did not notice, each with the test that now does.

Each test here was run against its planted one-line bug and failed, then kept:
they run the code path a user runs (the reduction over real ranks, the render
verb under a real write failure, the compiler a site names) instead of a helper
next to it.  No Spack.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from conftest import edited_site
from torchmpi import allreduce, offsite, paths, runtime
from torchmpi import render as renderer
from torchmpi import site as sitemod
from torchmpi.errors import UserError

SWITCH = runtime.GPU_SWITCH


def _derecho(edit=None) -> dict:
    data = yaml.safe_load((paths.sites_dir() / "derecho.yaml").read_text())
    if edit:
        edit(data)
    return data


# --- the implied MPICH_GPU_SUPPORT_ENABLED follows the site exactly -----------------


def test_switch_is_implied_on_a_cray_gpu_site() -> None:
    data = _derecho(lambda d: d.pop("runtime", None))
    assert runtime.environment(data)[SWITCH] == "1"


def test_switch_is_implied_when_cuda_aware_is_not_stated() -> None:
    """mpi.cuda_aware defaults to true (the schema's default): no key, switch on."""
    def edit(d):
        d.pop("runtime", None)
        d["mpi"].pop("cuda_aware", None)
    assert runtime.cray_gpu_switch(_derecho(edit)) == "1"
    assert runtime.environment(_derecho(edit))[SWITCH] == "1"


def test_a_stated_one_against_cuda_aware_false_is_refused(tmp_path: Path) -> None:
    """The site may state the switch only as the value its GTL linking needs:
    1 with cuda_aware: false would abort MPI_Init (no GTL linked)."""
    def edit(d):
        d["mpi"]["cuda_aware"] = False
        d["runtime"] = {"source": "this test", "env": {SWITCH: "1"}}
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "derecho", edit)
    assert f"runtime.env.{SWITCH}: must be 0 here" in str(err.value), str(err.value)


def test_switch_never_on_a_cpu_only_cray_site() -> None:
    """No GPU: no GTL is linked, and 1 would abort MPI_Init."""
    def edit(d):
        d.pop("runtime", None)
        d.pop("gpu")
    assert SWITCH not in runtime.environment(_derecho(edit))
    assert runtime.cray_gpu_switch(_derecho(edit)) is None


def test_switch_never_on_when_the_site_says_cuda_aware_false(tmp_path: Path) -> None:
    """cuda_aware: false gives "0" from cray_gpu_switch -- a value, not "unset":
    nothing may turn it into 1, in the data or in the rendered runtime.sh."""
    def edit(d):
        d.pop("runtime", None)
        d["mpi"]["cuda_aware"] = False
    assert runtime.cray_gpu_switch(_derecho(edit)) == "0"
    assert runtime.environment(_derecho(edit)).get(SWITCH) != "1"
    site = edited_site(tmp_path, "derecho", edit)
    text = renderer.render(site, tmp_path / "env")["runtime.sh"]
    assert f"{SWITCH}=1" not in text and f"{SWITCH}='1'" not in text


def test_site_zero_is_kept_as_zero() -> None:
    def edit(d):
        d["mpi"]["cuda_aware"] = False
        d["runtime"] = {"env": {SWITCH: "0"}}
    assert runtime.environment(_derecho(edit))[SWITCH] == "0"


# --- allreduce statistics: nccl-tests' definitions on known per-rank times --------

REDUCE = """
import json, sys
import torch.distributed as dist
from torchmpi import allreduce
dist.init_process_group("gloo")
rank, world = dist.get_rank(), dist.get_world_size()
times = [float(t) for t in sys.argv[2].split(",")]
out = {how: allreduce._reduce_time(times[rank], how, world, "cpu")
       for how in ("avg", "max", "min", "rank0")}
if rank == 0:
    with open(sys.argv[1], "w") as fh:
        json.dump(out, fh)
dist.destroy_process_group()
"""


def test_time_reduction_over_real_ranks(tmp_path: Path) -> None:
    """Three gloo ranks with times 2, 6, 1 (rank 0 not the extreme): avg divides by
    the ranks, max and min pick ranks 1 and 2, rank0 is rank 0's."""
    script = tmp_path / "reduce.py"
    script.write_text(REDUCE)
    out = tmp_path / "out.json"
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "3",
         str(script), str(out), "2,6,1"],
        capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(out.read_text())
    assert got == {"avg": 3.0, "max": 6.0, "min": 1.0, "rank0": 2.0}


def test_avg_bus_bandwidth_averages_busbw_not_algbw() -> None:
    """nccl-tests' "Avg bus bandwidth" is the mean of the busbw column."""
    rows = [allreduce.Result(1 << 20, 1 << 18, "float32", 10.0, 4.0,
                             allreduce.bus_bandwidth(4.0, 4), 0),
            allreduce.Result(1 << 21, 1 << 19, "float32", 10.0, 8.0,
                             allreduce.bus_bandwidth(8.0, 4), 0)]
    assert allreduce.bus_bandwidth(4.0, 4) == 6.0  # 2 (n-1)/n = 1.5
    assert allreduce.average_busbw(rows) == 9.0
    assert "# Avg bus bandwidth    : 9.000" in allreduce.format_footer(rows)


# --- an interrupted render leaves the old files whole -----------------------------


def _limit_file_size(limit: int):
    def apply() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # EFBIG instead of death
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def test_render_interrupted_by_a_full_disk_leaves_old_files_whole(tmp_path: Path) -> None:
    """The render verb in a process whose writes fail past a size (RLIMIT_FSIZE):
    the largest file cannot be written; every file keeps its old bytes, no
    temporary file is left, and the error is a one-line refusal."""
    out = tmp_path / "env"
    old_site = edited_site(tmp_path, "derecho")
    renderer.write(out, renderer.render(old_site, out))
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new_site = edited_site(new_dir, "derecho",
                           lambda d: d.update(description=d["description"] + " (changed)"))
    new = renderer.render(new_site, out)
    assert all(new[name].encode() != old[name] for name in new), "every file must change"
    sizes = sorted(len(text.encode()) for text in new.values())
    limit = sizes[-2] + 1  # every file but the largest fits
    proc = subprocess.run(
        [sys.executable, "-m", "torchmpi", "render", str(new_site.path), "-o", str(out)],
        preexec_fn=_limit_file_size(limit), capture_output=True, text=True, timeout=300,
        env=dict(os.environ, PYTHONDONTWRITEBYTECODE="1"), check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "cannot write" in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old


# --- gpu: auto only on the local site ------------------------------------------------


def test_gpu_auto_is_refused_outside_local(tmp_path: Path) -> None:
    with pytest.raises(UserError) as err:
        edited_site(tmp_path, "derecho", lambda d: d.update(gpu="auto"))
    message = str(err.value)
    assert "gpu" in message and "only for the local site" in message, message


# --- the column of a bad byte, in characters -------------------------------------------


def test_bad_byte_column_counts_characters_after_non_ascii(tmp_path: Path) -> None:
    """"description: éé \\xff": the bad byte is the 17th character (19th byte)."""
    path = tmp_path / "derecho.yaml"
    path.write_bytes(b"name: derecho\ndescription: \xc3\xa9\xc3\xa9 \xff\n")
    with pytest.raises(UserError) as err:
        sitemod.load(str(path))
    assert f"{path}:2:17:" in str(err.value), str(err.value)


# --- a compiler's version is the full X.Y.Z -------------------------------------------


def _gcc_like(tmp_path: Path, full: str) -> Path:
    """A gcc-compatible driver answering as GCC >= 7 does: -dumpversion alone
    prints the major only, -dumpfullversion the whole version."""
    exe = tmp_path / "bin" / "gcc"
    exe.parent.mkdir(parents=True, exist_ok=True)
    exe.write_text("#!/bin/sh\nfor a in \"$@\"; do\n"
                   f"  [ \"$a\" = -dumpfullversion ] && {{ echo {full}; exit 0; }}\ndone\n"
                   f"echo {full.split('.')[0]}\n")
    exe.chmod(0o755)
    return exe


def test_compiler_version_is_the_full_version(tmp_path: Path) -> None:
    assert offsite.compiler_version(_gcc_like(tmp_path, "12.2.0")) == "12.2.0"


def test_compiler_version_of_the_real_gcc_is_full() -> None:
    import shutil

    gcc = shutil.which("gcc")
    if not gcc:
        pytest.skip("no gcc")
    full = subprocess.run([gcc, "-dumpfullversion"], capture_output=True, text=True,
                          check=True).stdout.strip()
    assert offsite.compiler_version(Path(gcc)) == full and full.count(".") == 2


def test_reframe_interrupted_by_a_full_disk_leaves_old_files_whole(tmp_path: Path) -> None:
    """The same for ``torchmpi reframe``: its files are replaced all or none, and a
    failed write leaves no temporary file beside them (it had its own writer)."""
    from torchmpi import reframe as rfmconf

    out = tmp_path / "rfm"
    cli = [sys.executable, "-m", "torchmpi", "reframe"]
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    old_site = edited_site(tmp_path, "derecho")
    subprocess.run([*cli, str(old_site.path), "-o", str(out)], check=True, env=env,
                   capture_output=True, text=True, timeout=300)
    old = {p.name: p.read_bytes() for p in out.iterdir()}
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    new_site = edited_site(new_dir, "derecho",
                           lambda d: d.update(description=d["description"] + " (changed)"))
    files = rfmconf.build(new_site, out).files
    assert all(files[name].encode() != old[name] for name in files), "every file must change"
    sizes = sorted(len(text.encode()) for text in files.values())
    proc = subprocess.run([*cli, str(new_site.path), "-o", str(out), "--force"],
                          preexec_fn=_limit_file_size(sizes[-2] + 1), capture_output=True,
                          text=True, timeout=300, env=env, check=False)
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr and "cannot write" in proc.stderr, proc.stderr
    assert {p.name: p.read_bytes() for p in out.iterdir()} == old
