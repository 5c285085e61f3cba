"""One parse-back per format (torchmpi.parseback): the check every written file passes.

A text that does not read back with its consumer's reader -- or reads back to
other data than it was built from -- is a torchmpi bug, reported as such
(``InternalError``), and never written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from torchmpi import parseback
from torchmpi.errors import InternalError

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(("name", "text", "data", "message"), [
    ("a.yaml", "a: [1\n", None, "not valid YAML"),
    ("a.yaml", "a: 1\n", {"a": "1"}, "does not load back"),
    ("a.toml", "a = \n", None, "does not parse"),
    ("a.toml", "a = 1\n", {"a": 2}, "does not load back"),
    ("a.sh", "export X='open\n", None, "does not parse"),
    ("a.py", "x = (\n", None, "does not parse back"),
    ("a.py", "x = {'a': 1}\n", {"x": {"a": 2}}, "does not load back"),
    ("a.py", "y = 1\n", {"x": 1}, "does not parse back"),
    ("pip.conf", "[install\nconstraint = /a\n", None, "does not parse"),
    ("pip.conf", "[install]\nconstraint = /a\n", {"install": {"constraint": "/b"}},
     "does not load back"),
    ("constraints.txt", "torch>=2.1\n", None, "not one `name==version` pin"),
    ("constraints.txt", "# pins\ntorch==2.1\n", {"torch": "2.2"}, "does not load back"),
])
def test_a_text_that_does_not_parse_back_is_a_torchmpi_bug(name, text, data, message) -> None:
    with pytest.raises(InternalError, match=message):
        parseback.check(name, text, data)


def test_a_good_text_of_every_format_passes() -> None:
    parseback.check("a.yaml", "a: 1\n", {"a": 1})
    parseback.check("a.toml", "a = 1\n", {"a": 1})
    parseback.check("a.sh", "#!/bin/sh\nexport X=1\n")
    parseback.check("a.py", "x = {'a': [1]}\n", {"x": {"a": [1]}})
    parseback.check("pip.conf", "# c\n[install]\nconstraint = /a b\n",
                    {"install": {"constraint": "/a b"}})
    parseback.check("constraints.txt", "# c\ntorch==2.1\nnumpy==1.25.2\n",
                    {"torch": "2.1", "numpy": "1.25.2"})
    parseback.check("Containerfile", "not checked here\n")  # its module parses it back


def test_the_yaml_parse_back_reads_what_pyyaml_reads() -> None:
    """Parse-back reads with libyaml where PyYAML has it: every committed environment's
    YAML loads to the same data as with PyYAML's own parser, and a text libyaml refuses
    is still a torchmpi bug."""
    import yaml

    files = sorted((ROOT / "environments").glob("*/*.yaml"))
    assert len(files) >= 9
    for path in files:
        text = path.read_text(encoding="utf-8")
        parseback.yaml_text(text, yaml.load(text, Loader=yaml.SafeLoader), str(path))
    if yaml.__with_libyaml__:
        assert parseback.SAFE_LOADER is yaml.CSafeLoader
    with pytest.raises(InternalError, match="text is not valid YAML"):
        parseback.yaml_text("a: [1, 2\n", None, "x.yaml")
