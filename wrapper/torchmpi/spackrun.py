"""Run the project's pinned Spack with the isolation setup-env.sh gives.

``torchmpi concretize`` must work from a plain shell too, so the variables that
setup-env.sh exports are filled in here when they are missing (never
overriding ones already set: the test fixture sets its own).
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable

from torchmpi import offsite, paths
from torchmpi.errors import UserError


def executable() -> Path:
    exe = paths.spack_root() / "bin" / "spack"
    if not exe.is_file():
        raise UserError(f"the pinned Spack is not set up ({exe} missing): run `make setup`")
    return exe


def environ() -> dict[str, str]:
    """The environment setup-env.sh gives, for variables not already set (paths.py rules)."""
    env = dict(os.environ)
    env.pop("SPACK_ENV", None)  # never act on an environment the user has active
    env.setdefault("TORCHMPI_ROOT", str(paths.root()))
    env.setdefault("TORCHMPI_BUILTIN_REPO", str(paths.builtin_repo()))
    env.setdefault("SPACK_USER_CONFIG_PATH", str(paths.root() / ".spack-user"))
    env.setdefault("SPACK_USER_CACHE_PATH", str(paths.user_cache()))
    env.setdefault("SPACK_PYTHON", sys.executable)
    return env


def run_streaming(
    args: list[str], on_line: Callable[[str], None], heartbeat_s: float = 15.0
) -> tuple[int, list[str], float]:
    """Run ``spack ARGS``, passing each output line on, with a heartbeat while silent.

    The solver prints nothing for minutes; the heartbeat ("still concretizing,
    45 s") is the visible progress.  Returns (exit status, all lines, seconds).
    """
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(executable()), *args], env=environ(), stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT, text=True, bufsize=1,
    )
    lines: list[str] = []
    done = threading.Event()
    last = [start]  # time of the last output line

    def beat() -> None:
        while not done.wait(heartbeat_s / 3):
            now = time.monotonic()
            if now - last[0] >= heartbeat_s:  # only while Spack itself is silent
                last[0] = now
                on_line(f"   ... still running, {now - start:.0f} s")

    ticker = threading.Thread(target=beat, daemon=True)
    ticker.start()
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            line = line.rstrip("\n")
            last[0] = time.monotonic()
            lines.append(line)
            on_line(line)
        rc = proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        proc.wait()
        raise
    finally:
        done.set()
    return rc, lines, time.monotonic() - start


def offsite_install_args(site_data: dict, cache_key: str) -> list[str]:
    """``-c`` override of the install tree when this host is not the site.

    Spack opens (and creates) the install tree while concretizing, to look for
    reusable installs.  Solving Derecho's environment on a laptop would create
    /glade/work/<user>/... or a literal ``$PSCRATCH`` directory; a private
    store under the user cache is used instead.  Whether this host is the site
    is decided by the paths the site file names (:func:`torchmpi.offsite.on_site`),
    never by a directory that anyone could have created.  On the site the
    configured tree is left alone, so the solve reuses its installs.
    """
    root = (site_data.get("install") or {}).get("root")
    if not root:
        return []
    user = os.environ.get("USER") or os.environ.get("LOGNAME") or "user"
    expanded = os.path.expandvars(root.replace("${user}", user).replace("$user", user))
    if "$" not in expanded and offsite.on_site(site_data):
        return []
    store = Path(environ()["SPACK_USER_CACHE_PATH"]) / "offsite-store" / cache_key
    return ["-c", f"config:install_tree:root:{store}"]
