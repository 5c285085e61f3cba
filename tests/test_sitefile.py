"""torchmpi.sitefile: reading a site file's bytes, and where a bad one is wrong."""

from __future__ import annotations

from pathlib import Path

import pytest
from torchmpi import paths, sitefile
from torchmpi import site as sitemod
from torchmpi.errors import UserError


def test_bad_byte_column_counts_characters_after_non_ascii(tmp_path: Path) -> None:
    """"description: éé \\xff": the bad byte is the 17th character (19th byte)."""
    path = tmp_path / "derecho.yaml"
    path.write_bytes(b"name: derecho\ndescription: \xc3\xa9\xc3\xa9 \xff\n")
    with pytest.raises(UserError) as err:
        sitemod.load(str(path))
    assert f"{path}:2:17:" in str(err.value), str(err.value)


def _refused(tmp_path: Path, raw: bytes) -> str:
    path = tmp_path / "site.yaml"
    path.write_bytes(raw)
    with pytest.raises(UserError) as err:
        sitefile.parse(path)
    return str(err.value).replace(str(path), "site.yaml")


@pytest.mark.parametrize("description", [b"y", b"yz"])  # the line before ends even / odd
def test_a_control_character_is_located_on_its_line_and_column(tmp_path: Path,
                                                                description: bytes) -> None:
    """Line 3, after 'fabric: ib' and a space: column 12 (1-based), not counted from
    the file's start and not 0-based."""
    message = _refused(tmp_path, b"name: x\ndescription: " + description
                       + b"\nfabric: ib \x07\n")
    assert message.startswith("site.yaml:3:12: control character U+0007 is not allowed"), message


def test_a_character_yaml_refuses_is_named_by_its_code_point(tmp_path: Path) -> None:
    """Not every character YAML refuses is a control character: U+FFFE is named as such."""
    message = _refused(tmp_path, "name: x\ndescription: a\ufffe\n".encode())
    assert message.startswith("site.yaml:2:15: character U+FFFE is not allowed"), message


def test_a_repeated_key_names_both_lines(tmp_path: Path) -> None:
    message = _refused(tmp_path, b"name: x\nfabric: ib\nname: y\n")
    assert message.startswith("site.yaml:3:1:") and "(first at line 1)" in message, message


def test_a_syntax_error_is_located_one_based(tmp_path: Path) -> None:
    message = _refused(tmp_path, b"name: x\nmpi: [kind\n")
    assert message.startswith("site.yaml:3:1: YAML syntax error"), message


@pytest.mark.parametrize("raw, what", [(b"", "an empty file"), (b"- a\n", "a list"),
                                       (b"# only a comment\n", "an empty file")])
def test_a_file_that_is_not_a_mapping(tmp_path: Path, raw: bytes, what: str) -> None:
    assert _refused(tmp_path, raw) == (
        f"site.yaml:1:1: a site file is a YAML mapping (key: value), not {what}")


def test_every_key_path_has_its_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "site.yaml"
    path.write_text("name: x\nmpi:\n  kind: cray-mpich\n  modules: [a, b]\n")
    data, lines, raw = sitefile.parse(path)
    assert data == {"name": "x", "mpi": {"kind": "cray-mpich", "modules": ["a", "b"]}}
    assert lines == {(): (1, 1), ("name",): (1, 1), ("mpi",): (2, 1), ("mpi", "kind"): (3, 3),
                     ("mpi", "modules"): (4, 3), ("mpi", "modules", 0): (4, 13),
                     ("mpi", "modules", 1): (4, 16)}
    assert raw == path.read_bytes()


def test_a_key_that_is_not_text_names_its_path(tmp_path: Path) -> None:
    message = _refused(tmp_path, b"name: x\nmpi:\n  1: a\n")
    assert message.startswith("site.yaml:3:3: mpi.1: key 1 (YAML reads it as int), not text"), \
        message


@pytest.mark.parametrize("opening", ["[", "{a: "], ids=["sequences", "mappings"])
def test_deep_flow_nesting_is_refused_at_the_bracket_past_the_limit(tmp_path: Path,
                                                                    opening: str) -> None:
    """3000 nested flow collections: refused at the first bracket past MAX_DEPTH (line and
    column), while scanning -- before the parser's recursion, which reached Python's limit
    only after seconds of ruamel's scanner (its simple-key bookkeeping is linear in the
    flow depth, so each token costs more the deeper it sits)."""
    depth = sitefile.MAX_DEPTH
    inner = opening * 3000
    message = _refused(tmp_path, f"name: x\nx: {inner}1\n".encode())
    # the top-level mapping is level 1, so the depth-th bracket is the first one past it
    column = len("x: ") + (depth - 1) * len(opening) + 1
    assert message.startswith(f"site.yaml:2:{column}: nested too deeply to be a site file"
                              f" (more than {depth} indentation levels and open brackets"
                              " together);"
                              f" allowed: at most {depth}"), message


def test_deep_block_nesting_is_refused_at_the_entry_past_the_limit(tmp_path: Path) -> None:
    """``- - - ...`` on one line nests block sequences without growing the file: refused
    at the entry past MAX_DEPTH.  The top-level mapping is level 1; x's list starts in x's
    own column (YAML's indentless sequence: no new indentation level), and each further
    ``- `` is one level more, so the entry at index MAX_DEPTH (0-based) is refused."""
    depth = sitefile.MAX_DEPTH
    message = _refused(tmp_path, b"name: x\nx:\n" + b"- " * 3000 + b"1\n")
    column = 2 * depth + 1
    assert message.startswith(f"site.yaml:3:{column}: nested too deeply to be a site file"
                              f" (more than {depth} indentation levels and open brackets"
                              " together);"
                              f" allowed: at most {depth}"), message


def test_nesting_up_to_the_limit_is_read(tmp_path: Path) -> None:
    """The limit is no tighter than it says: MAX_DEPTH levels, flow inside block, parse.
    Keys k0..k(h-1) in columns 0..h-1 are levels 1..h, v in column h is level h+1, and
    its value's brackets take the rest up to MAX_DEPTH."""
    depth = sitefile.MAX_DEPTH
    path = tmp_path / "site.yaml"
    half = depth // 2
    brackets = depth - half - 1
    block = "".join(f"{' ' * i}k{i}:\n" for i in range(half))
    flow = "[" * brackets + "1" + "]" * brackets
    path.write_text(f"name: x\n{block}{' ' * half}v: {flow}\n")
    data, _, _ = sitefile.parse(path)
    value = data
    for i in range(half):
        value = value[f"k{i}"]
    value = value["v"]
    for _ in range(brackets - 1):
        value = value[0]
    assert value == [1]


def test_the_shipped_sites_nest_well_inside_the_limit(monkeypatch) -> None:
    """MAX_DEPTH's comment: the shipped files stay within 8 scanner levels, a quarter of
    the limit, so no real site file comes near it."""
    monkeypatch.setattr(sitefile, "MAX_DEPTH", 8)
    shipped = sorted((paths.root() / "sites").glob("*.yaml"))
    assert len(shipped) >= 9
    for path in shipped:
        sitefile.parse(path)


def test_a_deep_block_mapping_is_refused_at_the_key_past_the_limit(tmp_path: Path) -> None:
    """Keys k0, k1, ... each one column further in: the key past MAX_DEPTH is refused at
    its own line and column (the top-level mapping is level 1)."""
    depth = sitefile.MAX_DEPTH
    block = "".join(f"{' ' * i}k{i}:\n" for i in range(depth + 5)) + " " * (depth + 5) + "1\n"
    message = _refused(tmp_path, f"name: x\n{block}".encode())
    # k0 sits beside `name` (level 1), so k<depth>, on line depth + 2 in column depth + 1,
    # is the first key past the limit
    assert message.startswith(f"site.yaml:{depth + 2}:{depth + 1}: nested too deeply"), message


def test_a_file_parsed_again_is_the_same_data_and_no_caller_sees_anothers_changes(
        tmp_path: Path) -> None:
    """parse keeps a file's parse for its path and text: a second parse of the same text
    gives equal data that is not the first caller's object, and a changed file is parsed
    again (the file is read every time)."""
    path = tmp_path / "s.yaml"
    path.write_text("name: s\nmodules:\n  - a\n")
    first, lines, _ = sitefile.parse(path)
    first["modules"].append("changed by the first caller")
    lines.clear()
    second, lines_again, raw = sitefile.parse(path)
    assert second == {"name": "s", "modules": ["a"]}
    assert lines_again[("modules",)] == (2, 1) and raw == path.read_bytes()
    path.write_text("name: s\nmodules:\n  - b\n")
    assert sitefile.parse(path)[0]["modules"] == ["b"]


def test_the_same_text_at_the_same_path_is_composed_once(tmp_path: Path) -> None:
    """The claim behind the cache, apart from the copies: a second parse of an unchanged
    file reuses the first one's work; the same text at another path, or under another
    depth limit, does not."""
    path = tmp_path / "once.yaml"
    path.write_text("name: once\n")
    sitefile.parse(path)
    before = sitefile._parsed.cache_info()
    sitefile.parse(path)
    after = sitefile._parsed.cache_info()
    assert (after.hits, after.misses) == (before.hits + 1, before.misses)
    other = tmp_path / "twice.yaml"
    other.write_text("name: once\n")
    sitefile.parse(other)
    assert sitefile._parsed.cache_info().misses == after.misses + 1
