"""Write rendered files from data: YAML through an emitter, comments that stay comments.

Rendered files used to be Jinja2 templates with values pasted into YAML and
shell text; a newline in free text (a site's ``description``) then became a
new YAML key.  Here every value goes through PyYAML's emitter (the same safe
dumper that reads it back), and free text reaches a comment only through
:func:`comment`, which escapes every character that could end the line.

A file is a list of parts -- comment lines and YAML blocks -- so that the
explanations can sit next to the keys they explain.  :func:`document` joins
them and checks that the text loads back to exactly the data it was built
from; a mismatch is a bug here, never written to disk.
"""

from __future__ import annotations

import unicodedata
from typing import Any, Union

import yaml

from torchmpi import parseback

#: Characters YAML (1.1, PyYAML) or a shell treat as ending a line, and other
#: control or format characters that have no business in a comment.
_LINE_CATEGORIES = ("Cc", "Cf", "Zl", "Zp")


def escape(text: str) -> str:
    """Text safe for one comment line: control/line-break characters become ``\\xNN``/``\\uNNNN``.

    Tabs stay (harmless in a comment); everything else a reader could not see,
    or that a YAML parser or bash would take as a line end, is shown escaped.
    """
    out = []
    for ch in str(text):
        if ch != "\t" and unicodedata.category(ch) in _LINE_CATEGORIES:
            code = ord(ch)
            out.append(f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}")
        else:
            out.append(ch)
    return "".join(out)


def comment(*lines: str, indent: int = 0) -> str:
    """Comment lines; each argument is one line, escaped so it cannot leave it."""
    pad = " " * indent
    return "".join(f"{pad}# {escape(line)}".rstrip() + "\n" for line in lines)


class Block:
    """A YAML mapping rendered at an indentation level, as part of a bigger document."""

    def __init__(self, data: dict[str, Any], indent: int = 0) -> None:
        self.data = data
        self.indent = indent

    def text(self) -> str:
        if not self.data:
            return ""  # an empty mapping would be `{}`, not valid inside a block
        dumped = yaml.safe_dump(self.data, sort_keys=False, default_flow_style=False,
                                allow_unicode=True, width=10_000, indent=2)
        pad = " " * self.indent
        return "".join(pad + line if line.strip() else line
                       for line in dumped.splitlines(keepends=True))


Part = Union[str, Block]


def join(parts: list[Part]) -> str:
    """The text of comment parts and YAML blocks, in order."""
    return "".join(p.text() if isinstance(p, Block) else p for p in parts)


def document(parts: list[Part], expected: dict[str, Any], name: str) -> str:
    """Join comment text and YAML blocks; refuse a text that does not load back to ``expected``
    (:func:`torchmpi.parseback.yaml_text`, the writer's YAML check)."""
    text = join(parts)
    parseback.yaml_text(text, expected, name)
    return text
