"""``torchmpi container`` refuses what it finds late at the key's file:line:column.

What no other verb needs (the GTL directory and /opt/cray root Cray MPICH's
prefix must give a bind model, a generic container target, a ``container``
key at all) is found when the container is planned, over broken copies of the
shipped sites; each refusal names the site file with the line and column of
the key it is about, the key path and what is allowed, exits 2 without a
traceback and writes nothing.  A runtime the site's MPI or fabric cannot serve
is refused at load by every verb (tests/test_checks_rules.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from support.sites import write_site
from torchmpi import site as sitemod
from torchmpi.checks import container as container_checks
from torchmpi.cli import main
from torchmpi.sitefile import parse


def _set_prefix(prefix: str):
    def edit(data: dict) -> None:
        data["mpi"]["prefix"] = prefix
    return edit


def _target(name: str):
    def edit(data: dict) -> None:
        data["target"] = name
        for comp in data["compilers"]:
            comp.pop("target", None)
    return edit


CASES = [
    # (site, edit, the key path refused, words the message must have)
    ("derecho", _set_prefix("/glade/u/apps/cray-mpich/8.1.27/ofi/gnu/9.1"), ("mpi", "prefix"),
     "is not below /opt/cray"),
    ("derecho", _set_prefix("/opt/cray/pe/mpich/default/ofi/gnu/9.1"), ("mpi", "prefix"),
     "has no directory named after mpi.version"),
    ("perlmutter", _target("power9le"), ("target",), "no generic container target for ppc64le"),
    ("generic-ib", lambda d: d.pop("container"), ("container",), "missing"),
]


@pytest.mark.parametrize("name, edit, key, words", CASES,
                         ids=[f"{c[0]}-{'.'.join(c[2])}-{i}" for i, c in enumerate(CASES)])
def test_a_late_container_refusal_names_the_keys_line(tmp_path: Path, capsys, name, edit,
                                                      key, words) -> None:
    path = write_site(tmp_path / "sites", name, edit)
    out = tmp_path / "out"
    assert main(["container", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and words in err, err
    dotted = ".".join(key)
    found = re.search(rf"{re.escape(str(path))}:(\d+):(\d+): {re.escape(dotted)}: ", err)
    assert found, err
    _, lines, _ = parse(path)
    expected = lines.get(key, (1, 1))  # a missing top-level key: the file's start
    assert (int(found.group(1)), int(found.group(2))) == expected, err
    assert "allowed:" in err, err
    assert not out.exists()


def test_every_late_refusal_is_reported_at_once(tmp_path: Path, capsys) -> None:
    """Two container-only problems in one file: both named, each at its key's line, as
    the load-time checks report every problem at once (the admin fixes both in one go)."""
    def both(data: dict) -> None:
        _set_prefix("/glade/u/apps/cray-mpich/8.1.27/ofi/gnu/9.1")(data)
        _target("power9le")(data)

    path = write_site(tmp_path / "sites", "derecho", both)
    assert main(["container", str(path), "-o", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    _, lines, _ = parse(path)
    for key, words in ((("mpi", "prefix"), "is not below /opt/cray"),
                       (("target",), "no generic container target for ppc64le")):
        line, column = lines[key]
        assert f"{path}:{line}:{column}: {'.'.join(key)}: " in err and words in err, err


@pytest.mark.parametrize("name, edit, key, words", CASES,
                         ids=[f"{c[0]}-{'.'.join(c[2])}-{i}" for i, c in enumerate(CASES)])
def test_a_container_only_refusal_is_no_load_time_one(tmp_path: Path, name, edit, key,
                                                      words) -> None:
    """docs/sites.md: a file one verb accepts no other rejects -- for the native path.
    What only the container needs is asked by `torchmpi container` alone
    (torchmpi.checks.container.for_container_verb), never by the loader."""
    path = write_site(tmp_path / "sites", name, edit)
    site = sitemod.load(str(path))  # every other verb loads it
    found = container_checks.for_container_verb(site.data, site.runtime)
    assert [k for k, _ in found] == [key] and words in found[0][1], found
