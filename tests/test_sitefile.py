"""torchmpi.sitefile: reading a site file's bytes, and where a bad one is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchmpi import site as sitemod
from torchmpi.errors import UserError


def test_bad_byte_column_counts_characters_after_non_ascii(tmp_path: Path) -> None:
    """"description: éé \\xff": the bad byte is the 17th character (19th byte)."""
    path = tmp_path / "derecho.yaml"
    path.write_bytes(b"name: derecho\ndescription: \xc3\xa9\xc3\xa9 \xff\n")
    with pytest.raises(UserError) as err:
        sitemod.load(str(path))
    assert f"{path}:2:17:" in str(err.value), str(err.value)
