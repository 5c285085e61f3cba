"""Runtime variables: one mapping, rendered three ways, read back from the real files.

runtime.sh is run by bash (not parsed here); spack.yaml and modules.yaml are
loaded as YAML.  No Spack needed.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml
from torchmpi import paths, runtime
from torchmpi import render as renderer
from torchmpi import site as sitemod


def _site(tmp_path: Path, name: str, edit=None) -> sitemod.Site:
    """A copy of a shipped site, edited, loaded from a private sites/ directory."""
    data = yaml.safe_load((paths.sites_dir() / f"{name}.yaml").read_text())
    if edit:
        edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return sitemod.load(str(path))


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


def _three(files: dict[str, str], tmp_path: Path) -> tuple[dict, dict, dict]:
    spack = yaml.safe_load(files["spack.yaml"])["spack"].get("env_vars", {}).get("set", {})
    default = yaml.safe_load(files["modules.yaml"])["modules"]["default"]
    system = default["enable:"][0]
    module = default[system].get("py-torch-mpi", {}).get("environment", {}).get("set", {})
    return sourced(files["runtime.sh"], tmp_path), spack, module


def test_site_without_runtime_section_gets_the_same_variables_everywhere(tmp_path: Path) -> None:
    """Derecho without `runtime:`: the GPU switch (and fabric defaults) reach runtime.sh too.

    Before the fix runtime.sh guarded on the raw `runtime` key and said "No
    fabric-specific variables" while spack.yaml and modules.yaml set
    MPICH_GPU_SUPPORT_ENABLED=1.
    """
    site = _site(tmp_path, "derecho", lambda d: d.pop("runtime"))
    files = renderer.render(site, tmp_path / "env")
    sh, spack, module = _three(files, tmp_path)
    expected = runtime.environment(site.data)
    assert expected["MPICH_GPU_SUPPORT_ENABLED"] == "1"
    assert sh == spack == module == expected
