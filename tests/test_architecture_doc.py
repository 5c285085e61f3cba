"""docs/architecture.md matches the code: the file map, the import graph, the layering.

The page is a map a maintainer trusts without reading the code, so every claim
it makes that code can contradict is checked here against the checkout itself:
the paths it names exist, every module and package it should name is named,
its import table is the one :mod:`ast` reads from ``wrapper/torchmpi``, and the
layering rules it states hold.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "architecture.md"
WRAPPER = ROOT / "wrapper"
PACKAGE = WRAPPER / "torchmpi"
PACKAGES = ROOT / "spack_repo" / "torchmpi" / "packages"

#: Third-party modules the compute-node verbs (doctor, allreduce) must not need at
#: import time: a node with only py-torch-mpi installed may lack every one of them.
HEAVY = ("jsonschema", "ruamel", "spack", "yaml", "archspec")

#: Where an import of the command line is allowed: the verbs and the entry points.
CLI_SIDE = ("torchmpi.cli", "torchmpi.__main__", "torchmpi.commands")


def _text() -> str:
    return PAGE.read_text(encoding="utf-8")


def _backticked() -> set[str]:
    """Every `...` span of the page."""
    return set(re.findall(r"`([^`\n]+)`", _text()))


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(WRAPPER).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    """Module name -> file, for every module of the torchmpi package."""
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))
            if "__pycache__" not in p.parts}


def _resolve(mod: str, node: ast.ImportFrom | ast.Import, known: dict[str, Path]) -> list[str]:
    """The modules one import statement loads (submodules resolved, relative ones too)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        package = mod.split(".") if known[mod].name == "__init__.py" else mod.split(".")[:-1]
        package = package[:len(package) - (node.level - 1)]
        base = ".".join(package + ([base] if base else []))
    out = []
    for alias in node.names:
        sub = f"{base}.{alias.name}"
        out.append(sub if sub in known else base)  # `from pkg import module` vs a name
    return out


def imports(mod: str, known: dict[str, Path] | None = None) -> tuple[set[str], set[str]]:
    """(imported at module level, imported inside a function) by module ``mod``."""
    known = known or _modules()
    tree = ast.parse(known[mod].read_text(encoding="utf-8"))
    top_ids = {id(n) for n in tree.body}
    top: set[str] = set()
    lazy: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            (top if id(node) in top_ids else lazy).update(_resolve(mod, node, known))
    return top, lazy - top


def _internal(names: set[str]) -> set[str]:
    return {n for n in names if n == "torchmpi" or n.startswith("torchmpi.")}


# --- the file map ------------------------------------------------------------


def test_every_path_the_page_names_exists() -> None:
    """A path in backticks that looks like a checkout path (no placeholder) is there."""
    roots = ("wrapper/", "spack_repo/", "scripts/", "tests/", "sites/", "environments/",
             "docs/", ".ci/")
    named = [s for s in _backticked() if s.startswith(roots) and not re.search(r"[<*{]", s)]
    assert named, "the page names no checkout path at all"
    missing = sorted(s for s in named if not (ROOT / s.split()[0]).exists())
    assert not missing, f"docs/architecture.md names paths that do not exist: {missing}"


def test_every_module_is_listed() -> None:
    """Each module under wrapper/torchmpi (commands/, doctor/ included) has its line."""
    named = _backticked()
    unlisted = sorted(str(p.relative_to(ROOT)) for p in _modules().values()
                      if str(p.relative_to(ROOT)) not in named)
    assert not unlisted, f"modules missing from docs/architecture.md: {unlisted}"


def test_every_package_is_listed() -> None:
    """Each package directory of the torchmpi Spack repository has its line."""
    named = _backticked()
    dirs = sorted(p.parent for p in PACKAGES.glob("*/package.py"))
    assert dirs, "no packages found"
    unlisted = [str(d.relative_to(ROOT)) + "/" for d in dirs
                if str(d.relative_to(ROOT)) + "/" not in named]
    assert not unlisted, f"packages missing from docs/architecture.md: {unlisted}"


def test_every_package_data_directory_is_listed() -> None:
    """Package data (schema, fabric defaults) ships with the tool; the map names both."""
    named = _backticked()
    for data in ("wrapper/torchmpi/schema/", "wrapper/torchmpi/data/fabrics/"):
        assert data in named, data


# --- the import graph ----------------------------------------------------------


def _page_graph() -> dict[str, tuple[set[str], set[str]]]:
    """The page's import table: module -> (module-level imports, function-level imports)."""
    section = _text().split("## Import graph", 1)[1].split("\n## ", 1)[0]
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`torchmpi"):
            continue
        names = [set(re.findall(r"`([^`]+)`", c)) for c in cells]
        (module,) = names[0]
        out[module] = (names[1], names[2])
    return out


def test_import_table_is_the_code() -> None:
    """The page's table lists exactly the torchmpi imports ast finds, row by row."""
    known = _modules()
    code = {}
    for mod in known:
        top, lazy = imports(mod, known)
        code[mod] = (_internal(top), _internal(lazy))
    page = _page_graph()
    assert sorted(page) == sorted(code), "rows differ from the modules"
    wrong = {m: {"page": page[m], "code": code[m]} for m in code if page[m] != code[m]}
    assert not wrong, f"import table disagrees with the code: {wrong}"


# --- the layering rules ----------------------------------------------------------


def test_only_the_command_line_imports_the_command_line() -> None:
    """No library module imports torchmpi.cli or torchmpi.commands (entry points may)."""
    known = _modules()
    offenders = {}
    for mod in known:
        if mod.startswith(CLI_SIDE):
            continue
        top, lazy = imports(mod, known)
        bad = sorted(n for n in top | lazy if n.startswith(("torchmpi.cli", "torchmpi.commands")))
        if bad:
            offenders[mod] = bad
    assert not offenders, offenders


def test_errors_is_at_the_bottom() -> None:
    """torchmpi.errors imports nothing from torchmpi, so every module can import it."""
    top, lazy = imports("torchmpi.errors")
    assert not _internal(top | lazy)


def _assert_acyclic(graph: dict[str, set[str]]) -> None:
    """Fail naming the first import cycle of ``graph`` (depth-first, in name order), so
    both cycle rules below report a cycle the same way."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done

    def visit(mod: str, trail: list[str]) -> None:
        if state.get(mod) == 2:
            return
        assert state.get(mod) != 1, "import cycle: " + " -> ".join(trail + [mod])
        state[mod] = 1
        for dep in sorted(graph.get(mod, ())):
            visit(dep, trail + [mod])
        state[mod] = 2

    for mod in sorted(graph):
        visit(mod, [])


def test_module_level_imports_have_no_cycle() -> None:
    """Nothing runs back up: the module-level import graph inside torchmpi is acyclic."""
    known = _modules()
    graph = {m: _internal(imports(m, known)[0]) - {m} for m in known}
    _assert_acyclic(graph)


def _module_level_closure(start: str, known: dict[str, Path]) -> set[str]:
    """Every module loaded by importing ``start`` (module level only, parents included)."""
    seen: set[str] = set()
    todo = [start]
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        if mod not in known:
            continue  # third party: a leaf here
        parts = mod.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # parent packages run too
        todo += sorted(imports(mod, known)[0])
    return seen


@pytest.mark.parametrize("start", ["torchmpi.doctor", "torchmpi.doctor.report",
                                   "torchmpi.commands.doctor", "torchmpi.commands.allreduce"])
def test_compute_node_verbs_import_nothing_heavy(start: str) -> None:
    """doctor and allreduce import no jsonschema, ruamel, Spack, PyYAML or archspec at load."""
    known = _modules()
    loaded = _module_level_closure(start, known)
    heavy = sorted(m for m in loaded if m.split(".")[0] in HEAVY)
    assert not heavy, f"{start} loads {heavy} at import time"


def test_no_cycle_even_through_function_level_imports() -> None:
    """Function-level imports point only downward too: the whole import graph is acyclic.

    A lazy import hides a cycle from Python's import machinery but not from a
    reader: two modules that each need the other have no single home for the
    facts they share (site.py and detect.py once did).
    """
    known = _modules()
    graph = {m: _internal(set().union(*imports(m, known))) - {m} for m in known}
    _assert_acyclic(graph)


# --- the writer layer ------------------------------------------------------------------

#: The verbs' producers: they build file contents and hand them to the writer.
OUTPUTS = ("torchmpi.render", "torchmpi.container", "torchmpi.reframe")
#: The writer: one header, one parse-back per format, one write policy, one folder rule.
WRITER = ("torchmpi.output", "torchmpi.parseback")


def _family(mod: str, known: dict[str, Path]) -> set[str]:
    return {m for m in known if m == mod or m.startswith(mod + ".")}


def test_the_outputs_sit_side_by_side_above_the_writer() -> None:
    """render, container and reframe import none of each other (function level
    included), and the writer imports none of them: nothing runs back up."""
    known = _modules()
    for out in OUTPUTS:
        for mod in _family(out, known):
            used = _internal(set().union(*imports(mod, known)))
            others = {m for o in OUTPUTS if o != out for m in _family(o, known)}
            assert not used & others, f"{mod} imports {sorted(used & others)}"
    for mod in WRITER:
        used = _internal(set().union(*imports(mod, known)))
        above = {m for o in OUTPUTS for m in _family(o, known)} | {
            m for m in used if m.startswith(("torchmpi.commands", "torchmpi.cli"))}
        assert not used & above, f"{mod} imports {sorted(used & above)}"


#: What writes a file: a producer calling one of these writes around the writer's policy.
_WRITES = {"write_text", "write_bytes", "mkstemp", "fdopen", "open", "os.replace", "os.rename"}


def _called(node: ast.Call) -> str:
    """``name``, ``attr`` or ``os.attr``: the called function as the check names it."""
    func = node.func
    if isinstance(func, ast.Attribute):
        owner = func.value.id if isinstance(func.value, ast.Name) else ""
        return f"os.{func.attr}" if owner == "os" else func.attr
    return getattr(func, "id", "")


def test_only_the_writer_writes_the_outputs_files() -> None:
    """The producers of render, container and reframe call no file-writing function;
    their files reach the disk only through torchmpi.output (header, policy, modes)."""
    known = _modules()
    offenders = {}
    for out in OUTPUTS:
        for mod in _family(out, known):
            tree = ast.parse(known[mod].read_text(encoding="utf-8"))
            calls = {_called(node) for node in ast.walk(tree) if isinstance(node, ast.Call)}
            if calls & _WRITES:
                offenders[mod] = sorted(calls & _WRITES)
    assert not offenders, offenders
    assert "replace_files" in (PACKAGE / "output.py").read_text(encoding="utf-8")
