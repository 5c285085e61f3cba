"""``make mutate`` itself: a mutant must be what its tests see.

``make mutate`` runs under ``setup-env.sh``, which exports ``TORCHMPI_ROOT`` (the
checkout).  ``paths.root()`` prefers that variable, and the Spack fixture builds
its ``repos.yaml`` from it, so a mutant's tests that inherit it read the
*unmutated* package files from the checkout: every package mutant "survived"
(0 / 4 on 2026-11-24) without a single test ever seeing it.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from torchmpi import paths

ROOT = paths.root()


def _mutate_module():
    spec = importlib.util.spec_from_file_location("mutate", ROOT / "scripts" / "mutate.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutate"] = mod  # dataclasses resolve annotations through sys.modules
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A scratch copy of the checkout, made as ``make mutate`` makes one."""
    tree = tmp_path_factory.mktemp("tree")
    _mutate_module()._copy_checkout(tree)
    return tree


def _probe(tree: Path, code: str) -> list[str]:
    """Lines printed by ``code`` run in ``tree`` under a mutant's environment,
    started from the one ``make mutate`` has (``TORCHMPI_ROOT`` = the checkout,
    as ``setup-env.sh`` exports it)."""
    outer = dict(os.environ, TORCHMPI_ROOT=str(ROOT))
    proc = subprocess.run([sys.executable, "-c", code], cwd=tree, capture_output=True,
                          text=True, check=True, env=_mutate_module().mutant_env(tree, outer))
    return proc.stdout.splitlines()


def test_a_mutants_tests_see_the_scratch_copy_not_the_checkout(scratch: Path) -> None:
    """The scratch copy's tests must resolve the root, the sites and the
    ``torchmpi`` import to the copy, where the mutant is."""
    root, sites, module = _probe(scratch, (
        "from torchmpi import paths\n"
        "print(paths.root())\n"
        "print(paths.sites_dir())\n"
        "import torchmpi; print(torchmpi.__file__)\n"
    ))
    assert Path(root) == scratch
    assert Path(sites) == scratch / "sites"
    assert Path(module).is_relative_to(scratch / "wrapper")


def test_a_scratch_copy_keeps_the_checkouts_links(scratch: Path) -> None:
    """``wrapper/torchmpi/sites`` is a link to ``sites/`` (what an installed tool ships):
    a copy that drops it fails the doctor's installed-tool test before any mutant, so no
    doctor module could be scored from the working tree."""
    link = scratch / "wrapper" / "torchmpi" / "sites"
    assert link.is_symlink() and os.readlink(link) == os.readlink(
        ROOT / "wrapper" / "torchmpi" / "sites")
    assert (link / "derecho.yaml").is_file()


def test_the_spack_fixture_in_a_scratch_copy_registers_the_copys_repo(scratch: Path) -> None:
    """The ``spack`` fixture writes ``${TORCHMPI_ROOT}/spack_repo/torchmpi`` into its
    repos.yaml and sets ``TORCHMPI_ROOT`` from ``paths.root()``: under the mutant's
    environment that must be the copy's package repository."""
    [root] = _probe(scratch, (
        "import sys; sys.path.insert(0, 'tests')\n"
        "from support import ROOT\n"
        "from support.spack import Spack\n"
        "s = Spack(ROOT, ROOT, ROOT, ROOT)\n"
        "print(s.env['TORCHMPI_ROOT'])\n"
    ))
    assert Path(root) == scratch


def test_an_equivalent_mutant_is_counted_apart_and_a_survivor_is_not() -> None:
    """The score is killed / non-equivalent: a listed equivalent mutant neither
    counts as killed nor drags the score; an unlisted survivor does."""
    mutate = _mutate_module()
    table = mutate.score_table(
        {"runtime": ["killed"] * 7 + ["equivalent"], "render": ["killed", "survived"]},
        ["runtime", "render", "packages"])
    rows = {line.split()[0]: line for line in table.splitlines()[1:]}
    assert rows["runtime"].split()[1:] == ["7", "/", "7", "(1", "equivalent)", "100", "%"]
    assert rows["render"].split()[1:] == ["1", "/", "2", "50", "%"]
    assert "not measured" in rows["packages"]


def test_docs_give_a_score_for_every_area_over_its_mutants() -> None:
    """docs/testing.md's table has a row per area of scripts/mutate.py, and the
    row's "measured" is the number of mutants the area has now: adding a mutant
    without running it (or an area without a score) fails here."""
    mutate = _mutate_module()
    counts: dict[str, int] = {}
    for m in mutate.MUTANTS:
        counts[m.area] = counts.get(m.area, 0) + 1
    text = (ROOT / "docs" / "testing.md").read_text()
    section = text.split("## Strength: planted bugs", 1)[1].split("\n## ", 1)[0]
    rows = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 2 and cells[0] and cells[0][0] == "`":
            rows[cells[0].split("`")[1]] = cells[1]
    assert set(rows) == set(counts), (sorted(rows), sorted(counts))
    for area, cell in rows.items():
        killed, measured = (int(x) for x in cell.split()[0:3:2])
        assert measured == counts[area], (area, cell, counts[area])
        assert killed <= measured


def test_a_wrapper_mutants_tests_are_derived_from_the_layout() -> None:
    """No hand-kept map: a wrapper module's mutants run the files the layout names
    (tests/support/layout.py); only package files list theirs."""
    from support import layout

    for m in _mutate_module().MUTANTS:
        if m.file.startswith("wrapper/"):
            assert not m.package_tests, m.name
            assert m.tests == layout.tests_for(m.file), m.name
        else:
            assert m.package_tests, m.name


def _generated():
    sys.path.insert(0, str(ROOT / "scripts"))
    _mutate_module()
    spec = importlib.util.spec_from_file_location(
        "mutate_generated", ROOT / "scripts" / "mutate_generated.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules["mutate_generated"] = mod
    spec.loader.exec_module(mod)
    return mod


def test_generated_mutants_are_cosmic_rays_sampled_reproducibly() -> None:
    """The same seed draws the same mutants; each one compiles and differs from the
    module in the line it names."""
    gen = _generated()
    first = gen.sample("lock.py", 4, seed=7)
    again = gen.sample("lock.py", 4, seed=7)
    assert [m for m, _ in first] == [m for m, _ in again] and len(first) == 4
    source = (ROOT / "wrapper" / "torchmpi" / "lock.py").read_text().splitlines()
    for mutant, text in first:
        assert mutant.operator.startswith("core/")
        compile(text, "lock.py", "exec")
        assert text.splitlines() != source
        assert source[mutant.line - 1] == mutant.old


def test_generated_score_counts_timeouts_killed_and_errors_apart() -> None:
    gen = _generated()
    verdicts = ["killed", "timeout", "survived", "equivalent", "error: pytest exit 4"]
    assert gen.score([{"verdict": v} for v in verdicts]) == (2, 3, 1)
    assert [m for m in gen.round_robin({"a": [1, 2, 3], "b": [4]})] == [1, 4, 2, 3]


def test_a_mutant_of_annotations_only_is_equivalent_and_others_are_not() -> None:
    """With postponed annotations, ``str | None`` -> ``str * None`` changes nothing."""
    gen = _generated()
    src = "from __future__ import annotations\nx: int | None = 1\n" \
          "def f(a: str | None) -> str | None:\n    return a or 'x'\n"
    assert gen.annotation_only(src, src.replace("-> str | None", "-> str * None"))
    assert gen.annotation_only(src, src.replace("x: int | None", "x: int & None"))
    assert not gen.annotation_only(src, src.replace("a or 'x'", "a and 'x'"))
    assert not gen.annotation_only(src.split("\n", 1)[1],
                                   src.split("\n", 1)[1].replace("-> str |", "-> str *"))


def test_every_equivalent_mutant_names_a_line_of_its_module() -> None:
    """A triaged equivalent whose line has gone is stale: the code it was judged on
    changed, so the judgement must be made again (docs/testing.md keeps the reasons)."""
    gen = _generated()
    for key in gen.EQUIVALENT:
        module, change = key.split(": ", 1)
        old = change.split(" -> ", 1)[0].strip()
        lines = [line.strip() for line in
                 (ROOT / "wrapper" / "torchmpi" / module).read_text().splitlines()]
        assert not old or old in lines, key


def test_match_picks_survivors_out_of_the_drawn_sample() -> None:
    """``--match TEXT`` re-runs mutants of the seeded sample by their text, none else."""
    gen = _generated()
    drawn = gen.sample("lock.py", 6, seed=7)
    one = drawn[3][0]
    assert gen.matching(drawn, []) == drawn
    picked = gen.matching(drawn, [f"{one.old.strip()} -> {one.new.strip()}"])
    assert one in [m for m, _ in picked] and len(picked) < len(drawn)


def test_every_hand_written_mutant_applies_to_the_code_as_it_is() -> None:
    """``make mutate`` stops at a mutant whose line no longer occurs exactly once in its
    file (the code moved on); the suite says so first, naming each such mutant."""
    stale = [f"{m.file}: {m.old.strip()[:80]!r} occurs {n} times"
             for m in _mutate_module().MUTANTS
             if (n := (ROOT / m.file).read_text().count(m.old)) != 1]
    assert stale == []
