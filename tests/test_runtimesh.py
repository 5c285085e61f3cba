"""runtime.sh as text (torchmpi.runtimesh): the one body render and reframe both write."""

from __future__ import annotations

import subprocess
from pathlib import Path

from torchmpi import output, runtime, runtimesh
from torchmpi import site as sitemod
from torchmpi.cli import main


def _body(text: str) -> str:
    """What follows the header (the writer's body-sha256 line)."""
    return text.split("# body-sha256: ", 1)[1].split("\n", 1)[1]


def test_render_and_reframe_write_the_same_lines(tmp_path: Path) -> None:
    assert main(["render", "derecho", "-o", str(tmp_path / "env")]) == 0
    assert main(["reframe", "derecho", "--env", "runtime-sh", "--prepare", "true",
                 "-o", str(tmp_path / "rfm")]) == 0
    rendered = (tmp_path / "env" / runtimesh.NAME).read_text()
    beside = (tmp_path / "rfm" / runtimesh.NAME).read_text()
    assert output.written_by(rendered) == "render" and output.written_by(beside) == "reframe"
    assert _body(rendered) == _body(beside) == runtimesh.body(sitemod.load("derecho"))


def test_sourcing_it_sets_every_resolved_variable() -> None:
    site = sitemod.load("derecho")
    env = runtime.environment(site.data)
    assert env, "derecho has runtime variables"
    script = runtimesh.body(site) + "".join(f'printf "%s=%s\\n" {k} "${k}"\n' for k in env)
    proc = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    assert dict(line.split("=", 1) for line in proc.stdout.splitlines()) == env
