"""One parse-back per format (torchmpi.parseback): the check every written file passes.

A text that does not read back with its consumer's reader -- or reads back to
other data than it was built from -- is a torchmpi bug, reported as such
(``InternalError``), and never written.
"""

from __future__ import annotations

import pytest
from torchmpi import parseback
from torchmpi.errors import InternalError


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
