"""The one way a test copies a shipped site file and edits it.

Edits are made on the parsed data (a function that changes a dict), never on
the text, so that a test states which key it changes; the copy is written with
PyYAML under ``tmp_path`` with the shipped file's name, so errors name it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml
from torchmpi import paths
from torchmpi import site as sitemod

Edit = Callable[[dict], object]


def site_data(name: str, edit: Edit | None = None) -> dict:
    """``sites/<name>.yaml`` as data, after ``edit`` (which changes it in place)."""
    data = yaml.safe_load((paths.sites_dir() / f"{name}.yaml").read_text())
    if edit:
        edit(data)
    return data


def write_site(tmp_path: Path, name: str, edit: Edit | None = None, *,
               data: dict | None = None) -> Path:
    """The edited copy written as ``tmp_path/<name>.yaml`` (``data`` instead of the
    shipped file when given); the path, for a verb's command line."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    if data is None:
        data = site_data(name, edit)
    elif edit:
        edit(data)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def edited_site(tmp_path: Path, name: str, edit: Edit | None = None) -> sitemod.Site:
    """The edited copy loaded as the tools load a site (validation included)."""
    return sitemod.load(str(write_site(tmp_path, name, edit)))
