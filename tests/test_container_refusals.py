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
import yaml
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


def _amd_on_ib(data: dict) -> None:
    """LUMI-G's file on InfiniBand with a ROCm no RCCL/plugin pair names: the load-time
    rule asks a pair only of a Slingshot site, so the file loads."""
    data["fabric"] = "ib"
    data.pop("libfabric", None)
    data.pop("nccl", None)
    data["gpu"]["rocm"].update(version="7.0.2", prefix="/opt/rocm-7.0.2")
    ((data.get("runtime") or {}).get("env") or {}).clear()


def test_an_amd_image_on_ib_needs_no_vouched_rccl_pair(tmp_path: Path, capsys) -> None:
    """The RCCL/plugin pair is Slingshot's (the cxi provider; py-torch-mpi depends on
    aws-ofi-nccl only with fabric=slingshot): an AMD image for InfiniBand carries RCCL at
    the ROCm release and no plugin, so a ROCm no pair names is rendered, not refused."""
    path = write_site(tmp_path / "sites", "lumi", _amd_on_ib)
    out = tmp_path / "out"
    assert main(["container", str(path), "-o", str(out)]) == 0, capsys.readouterr().err
    packages = yaml.safe_load((out / "spack.yaml").read_text())["spack"]["packages"]
    assert (packages.get("rccl") or packages["rccl:"])["require"] == ["@7.0.2"]
    assert "aws-ofi-nccl" not in packages


def test_an_amd_image_without_a_vouched_rccl_pair_is_refused_at_the_key(
        tmp_path: Path, monkeypatch) -> None:
    """On Slingshot the AMD image carries RCCL with the plugin vouched for the site's
    ROCm; the loader refuses a ROCm without one first, and should that rule ever let one
    through, the plan refuses at gpu.rocm.version's line (it asserted, a traceback)."""
    import importlib

    from torchmpi.errors import UserError

    planmod = importlib.import_module("torchmpi.container.plan")  # the module, not plan()
    path = write_site(tmp_path / "sites", "lumi")
    site = sitemod.load(str(path))
    monkeypatch.setattr(planmod.pairs, "rccl", lambda rocm: None)
    with pytest.raises(UserError) as err:
        planmod.plan(site)
    _, lines, _ = parse(path)
    line, column = lines[("gpu", "rocm", "version")]
    text = str(err.value)
    assert f"{path}:{line}:{column}: gpu.rocm.version: ROCm 7.0.3" in text, text
    assert "allowed:" in text, text


def test_a_cray_root_the_checks_missed_is_still_a_refusal(tmp_path: Path,
                                                          monkeypatch) -> None:
    """The bind model needs Cray's /opt/cray root; checks.container refuses a prefix off
    it first, and should that check ever let one through, the plan refuses at
    mpi.prefix's line rather than assert on the data."""
    import importlib

    from torchmpi.errors import UserError

    planmod = importlib.import_module("torchmpi.container.plan")  # the module, not plan()

    path = write_site(tmp_path / "sites", "derecho",
                      _set_prefix("/glade/u/apps/cray-mpich/8.1.27/ofi/gnu/9.1"))
    site = sitemod.load(str(path))
    monkeypatch.setattr(planmod.checks, "for_container_verb", lambda *_: [])
    with pytest.raises(UserError) as err:
        planmod.plan(site)
    line, column = site.lines[("mpi", "prefix")]
    assert f"{path}:{line}:{column}: mpi.prefix: " in str(err.value), err.value
    assert "is not below /opt/cray" in str(err.value) and "allowed:" in str(err.value)


def _amd_with_open_mpi(data: dict) -> None:
    """LUMI-G's file on InfiniBand with the system's Open MPI, not Cray MPICH."""
    _amd_on_ib(data)
    data["mpi"] = {"kind": "openmpi", "version": "5.0.5", "prefix": "/usr",
                   "cuda_aware": False}


def test_an_amd_image_is_refused_for_a_site_whose_mpi_is_not_cray_mpich(
        tmp_path: Path, capsys) -> None:
    """The AMD image is built around Cray MPICH: MPICH 3.4.3 stands in for its ABI and
    the centre's binding modules put the host's Cray MPICH in (OLCF, LUMI).  A site
    whose MPI is another would get that stand-in and the Cray modules all the same, and
    its own MPI would never reach the container; so the request is refused at mpi.kind,
    before anything is written, naming what is allowed."""
    path = write_site(tmp_path / "sites", "lumi", _amd_with_open_mpi)
    sitemod.load(str(path))  # every other verb loads it
    out = tmp_path / "out"
    assert main(["container", str(path), "-o", str(out)]) == 2
    err = capsys.readouterr().err
    _, lines, _ = parse(path)
    line, column = lines[("mpi", "kind")]
    assert f"{path}:{line}:{column}: mpi.kind: " in err, err
    assert "Traceback" not in err and "allowed: cray-mpich" in err, err
    assert not out.exists()
