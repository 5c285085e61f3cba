"""What a sourced shell file leaves in a job's environment, in a clean bash."""

from __future__ import annotations

import subprocess
from pathlib import Path


def sourced(text: str, tmp_path: Path, before: dict[str, str] | None = None) -> dict[str, str]:
    """The variables a job has after `. runtime.sh` in a clean bash (what changed)."""
    script = tmp_path / "runtime.sh"
    script.write_text(text)
    base = {"PATH": "/usr/bin:/bin", **(before or {})}

    def dump(cmd: str) -> dict[str, str]:
        out = subprocess.run(["env", "-i", *(f"{k}={v}" for k, v in base.items()),
                              "bash", "--noprofile", "--norc", "-c", cmd + "; env -0"],
                             capture_output=True, check=True).stdout.decode()
        return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)

    empty, after = dump("true"), dump(f". {script}")
    return {k: v for k, v in after.items() if empty.get(k) != v}
