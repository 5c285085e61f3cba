"""Reading a site file: bytes to data, with every key's line and column.

The first half of the one site loader (:mod:`torchmpi.site` validates what
this returns).  ruamel.yaml (the YAML library Spack itself uses) because
PyYAML lets a duplicated key silently win and reports undecodable bytes by byte
offset; here each of those is an error at file:line:column, and a file larger
than :data:`MAX_BYTES` is refused before it is parsed.
"""

from __future__ import annotations

import copy
import unicodedata
from functools import lru_cache
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError
from ruamel.yaml.scanner import Scanner

from torchmpi.errors import UserError

#: Largest site file read.  The shipped ones are under 5 KB; a file a
#: thousand times that size is a mistake (a log, a binary), and reading or
#: parsing it whole would take minutes and gigabytes before any message.
MAX_BYTES = 256 * 1024

#: Deepest nesting read, counted as ruamel.yaml's scanner sees it: indentation
#: levels and open brackets together.  That is not the data's depth (a list
#: written at its key's own indentation, or a one-pair mapping inside brackets,
#: adds no step), so a file may nest up to about twice this many collections;
#: what the limit bounds is the scanner's work.  The shipped files stay within 8
#: (tests/test_sitefile.py); a file thousands deep is garbage, and ruamel.yaml
#: would spend seconds on it (its scanner's simple-key check costs time linear
#: in the flow depth, per token) before Python's recursion limit stopped its
#: parser.
MAX_DEPTH = 32


#: Position of a key path in the file: (line, column), both 1-based.
Where = tuple[int, int]

_STR_TAG = "tag:yaml.org,2002:str"
_MERGE_TAG = "tag:yaml.org,2002:merge"


def _read(path: Path) -> bytes:
    """The file's bytes, refusing (without reading on) a file over MAX_BYTES."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BYTES + 1)
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror}") from None
    if len(raw) > MAX_BYTES:
        raise UserError(
            f"{path}: larger than {MAX_BYTES // 1024} KiB, the limit for a site file"
            " (the shipped ones are under 5 KB); is this the right file?"
        )
    return raw


def _decode(path: Path, raw: bytes) -> str:
    """UTF-8 text; an undecodable byte is reported by line and column, not offset."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw.count(b"\n", 0, err.start) + 1
        start = raw.rfind(b"\n", 0, err.start) + 1
        column = len(raw[start:err.start].decode("utf-8", "replace")) + 1
        raise UserError(
            f"{path}:{line}:{column}: not UTF-8 (byte 0x{raw[err.start]:02x});"
            " a site file is UTF-8 text: save it as UTF-8"
        ) from None
    return text.removeprefix("\ufeff")


class _TooDeep(Exception):
    """Raised by the scanner at the first collection past MAX_DEPTH: (line, column)."""


class _DepthScanner(Scanner):
    """ruamel.yaml's scanner, refusing nesting past MAX_DEPTH as it scans.

    A new level is a flow bracket (``[``, ``{``) or a block indentation
    step; counting there stops a deep file after MAX_DEPTH levels' work,
    before the parser and composer recurse into it.
    """

    def _check_depth(self, column: int) -> None:
        if len(self.indents) + self.flow_level > MAX_DEPTH:
            raise _TooDeep(self.reader.line + 1, column + 1)

    def fetch_flow_collection_start(self, TokenClass: Any, to_push: str) -> None:
        column = self.reader.column
        super().fetch_flow_collection_start(TokenClass, to_push)
        self._check_depth(column)

    def add_indent(self, column: int) -> bool:
        added = super().add_indent(column)
        if added:
            self._check_depth(column)
        return added


def _at(path: Path, line: int, column: int) -> str:
    return f"{path}:{line}:{column}"


def _mark(path: Path, mark: Any) -> str:
    return _at(path, mark.line + 1, mark.column + 1) if mark is not None else str(path)


def _key_text(node: Node) -> str:
    return str(node.value) if not isinstance(node.value, list) else "(a collection)"


def _index(path: Path, root: Node) -> dict[tuple, Where]:
    """Map each key path of the composed tree to its (line, column).

    Also where duplicate keys and aliases are caught: a duplicate key is an
    error (PyYAML lets the last one win silently), and aliases are refused
    because a site file never needs them and nested ones expand exponentially
    when the tree is walked (a "billion laughs" file).
    """
    out: dict[tuple, Where] = {}
    seen: set[int] = set()
    stack: list[tuple[Node, tuple]] = [(root, ())]
    while stack:
        node, key_path = stack.pop()
        if id(node) in seen:
            line, col = _nearest(out, key_path)
            raise UserError(
                f"{_at(path, line, col)}: {_fmt_path(key_path)}: YAML aliases (*name) are"
                " not allowed in a site file; write the value out"
            )
        seen.add(id(node))
        out.setdefault(key_path, (node.start_mark.line + 1, node.start_mark.column + 1))
        children: list[tuple[Node, tuple]] = []
        if isinstance(node, MappingNode):
            first: dict[tuple[str, str], Any] = {}
            for key, value in node.value:
                ident = (str(key.tag), _key_text(key))
                sub = key_path + (_key_text(key),)
                if not isinstance(key, ScalarNode) or ident[0] != _STR_TAG:
                    kind = ident[0].rsplit(":", 1)[-1]
                    what = ("a '<<' merge" if ident[0] == _MERGE_TAG
                            else f"{ident[1]} (YAML reads it as {kind}), not text")
                    raise UserError(
                        f"{_mark(path, key.start_mark)}: {_fmt_path(sub)}: key {what};"
                        " allowed: keys are names such as fabric or NCCL_DEBUG (quote one that"
                        " YAML reads as a number, null or boolean)"
                    )
                if ident in first:
                    prev = first[ident]
                    raise UserError(
                        f"{_mark(path, key.start_mark)}: {_fmt_path(sub)}: duplicate key"
                        f" (first at line {prev.line + 1}); each key may appear once per"
                        " mapping: delete one of them"
                    )
                first[ident] = key.start_mark
                out[sub] = (key.start_mark.line + 1, key.start_mark.column + 1)
                children.append((value, sub))
        elif isinstance(node, SequenceNode):
            children = [(item, key_path + (i,)) for i, item in enumerate(node.value)]
        stack.extend(reversed(children))  # popped in file order: errors name the first
    return out


def _fmt_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def _syntax_error(path: Path, err: MarkedYAMLError) -> UserError:
    where = _mark(path, err.problem_mark or err.context_mark)
    problem = err.problem or err.context or "invalid YAML"
    context = ""
    if err.context and err.problem and err.context_mark is not None:
        context = (f" ({err.context} at line {err.context_mark.line + 1},"
                   f" column {err.context_mark.column + 1})")
    return UserError(f"{where}: YAML syntax error: {problem}{context}")


def _character(found: int | str) -> str:
    """A character YAML refuses, as a reader of the error can tell which: ``control
    character U+0007`` (ruamel.yaml's reader reports the code point as a bare ``7``)."""
    code = found if isinstance(found, int) else ord(found)
    kind = "control character" if unicodedata.category(chr(code)) == "Cc" else "character"
    return f"{kind} U+{code:04X}"


def parse(path: Path) -> tuple[dict[str, Any], dict, bytes]:
    """Read and parse a site file: (data, key path -> (line, column), raw bytes).

    The file is read every time; its parse is kept for the same path and text (a copy is
    returned, so no caller sees another's changes).  One verb parses a site once, but a
    process that loads it again -- the test suite does, about 1750 times per ``make
    check``, 12 ms each in ruamel.yaml's pure-Python composer -- parses it once."""
    raw = _read(path)
    data, lines = _parsed(path, _decode(path, raw), MAX_DEPTH)
    return copy.deepcopy(data), dict(lines), raw


@lru_cache(maxsize=32)
def _parsed(path: Path, text: str, max_depth: int) -> tuple[dict[str, Any], dict]:
    """:func:`parse` for a decoded text; a refusal is raised each time (never kept).
    ``max_depth`` is :data:`MAX_DEPTH`, which the scanner reads: part of the key, so a
    parse under another limit is not taken for this one."""
    yaml = YAML(typ="safe", pure=True)
    yaml.Scanner = _DepthScanner
    try:
        node = yaml.compose(text)
        lines = _index(path, node) if node is not None else {}
        data = yaml.constructor.construct_document(node) if node is not None else None
    except MarkedYAMLError as err:
        raise _syntax_error(path, err) from None
    except ReaderError as err:  # a control character YAML does not allow
        pos = max(0, min(err.position, len(text)))
        line = text.count("\n", 0, pos) + 1
        column = pos - (text.rfind("\n", 0, pos) + 1) + 1
        raise UserError(f"{_at(path, line, column)}: {_character(err.character)} is not"
                        " allowed in YAML (control characters other than tab and newline)"
                        ) from None
    except YAMLError as err:
        raise UserError(f"{path}: not valid YAML: {err}") from None
    except _TooDeep as err:
        line, column = err.args
        raise UserError(f"{_at(path, line, column)}: nested too deeply to be a site file"
                        f" (more than {MAX_DEPTH} indentation levels and open brackets"
                        f" together); allowed: at most {MAX_DEPTH}") from None
    except RecursionError:  # a guard only: MAX_DEPTH stops the scanner long before
        raise UserError(f"{path}: nested too deeply to be a site file") from None
    if not isinstance(data, dict):
        what = "an empty file" if data is None else f"a {type(data).__name__}"
        raise UserError(f"{path}:1:1: a site file is a YAML mapping (key: value), not {what}")
    return data, lines


# --- validation ------------------------------------------------------------


def _nearest(lines: dict, key_path: tuple) -> Where:
    """The position of ``key_path``, or of its nearest ancestor the file has."""
    while key_path and key_path not in lines:
        key_path = key_path[:-1]
    return lines.get(key_path, (1, 1))
