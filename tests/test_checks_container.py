"""torchmpi.checks.container: what only ``torchmpi container`` refuses, on site data.

Each rule of :func:`for_container_verb` on a shipped site's loaded data with one
key changed, the site unchanged as the control: the key path it names and the
words that say what is allowed.  Through the verb, with file:line:column, in
tests/test_container_refusals.py; the load-time rules in tests/test_checks_rules.py.
"""

from __future__ import annotations

import copy
from collections.abc import Callable

import pytest
from support.sites import write_site
from torchmpi import runtime
from torchmpi import site as sitemod
from torchmpi.checks import container as rules
from torchmpi.errors import UserError


def _found(name: str, edit: Callable[[dict], object] | None = None) -> list:
    data = copy.deepcopy(sitemod.load(name).data)
    if edit:
        edit(data)
    return rules.for_container_verb(data, runtime.resolve(data))


def _set(*path_and_value):
    *path, value = path_and_value

    def edit(data: dict) -> None:
        node = data
        for key in path[:-1]:
            node = node.setdefault(key, {})
        node[path[-1]] = value
    return edit


@pytest.mark.parametrize("name", ["alps-gh200", "delta", "derecho", "frontier", "generic-ib",
                                  "jupiter", "lumi", "perlmutter"])
def test_a_shipped_site_with_a_container_passes(name: str) -> None:
    assert _found(name) == []


SHIFTER = {"runtime": "shifter", "nccl": {"version": "2.29.2-1", "plugin": "1.18.0"}}

CASES = [
    ("frontier", lambda d: d.pop("container"), ("container",), "missing"),
    ("perlmutter", _set("target", "power9le"), ("target",), "no generic container target"),
    ("perlmutter", lambda d: (d.update(container=dict(SHIFTER)),
                              d["runtime"].update(prepend_path={"PATH": "/opt/site/bin"})),
     ("runtime", "prepend_path"), "siteEnvPrepend"),
    ("perlmutter", lambda d: (d.update(container=dict(SHIFTER)),
                              d["runtime"].update(append_path={"X_LIST": "/opt/x"})),
     ("runtime", "append_path"), "siteEnvAppend"),
    ("alps-gh200", lambda d: (d["container"].pop("nccl"), d.pop("nccl", None)),
     ("container", "runtime"), "CE aws_ofi_nccl hook"),
    ("alps-gh200", _set("container", "nccl", {"version": "2.21.5-1", "plugin": "1.18.0"}),
     ("container", "nccl"), "not a vouched pair"),
    ("alps-gh200", _set("container", "nccl", {"version": "2.29.2-1", "plugin": "1.17.2"}),
     ("container", "nccl", "plugin"), "no recorded CE netstack artifact"),
    ("derecho", _set("mpi", "prefix", "/sw/cray-mpich/8.1.27/ofi/gnu/9.1"), ("mpi", "prefix"),
     "is not below /opt/cray"),
    ("derecho", _set("mpi", "prefix", "/opt/cray/pe/mpich/default/ofi/gnu/9.1"),
     ("mpi", "prefix"), "no directory named after mpi.version"),
]


@pytest.mark.parametrize("name, edit, key, words", CASES,
                         ids=[f"{c[0]}-{'.'.join(c[2])}-{i}" for i, c in enumerate(CASES)])
def test_each_rule_names_its_key_and_what_is_allowed(name, edit, key, words) -> None:
    found = _found(name, edit)
    assert [k for k, _ in found] == [key], found
    assert words in found[0][1] and "allowed:" in found[0][1], found


def test_the_gtl_directory_is_asked_only_where_torch_takes_device_buffers() -> None:
    """~cuda_aware_mpi loads no GTL, so a prefix without a version directory is fine."""
    def off(data: dict) -> None:
        _set("mpi", "prefix", "/opt/cray/pe/mpich/default/ofi/gnu/9.1")(data)
        data["mpi"]["cuda_aware"] = False

    assert _found("derecho", off) == []


def test_shifter_without_added_paths_passes() -> None:
    assert _found("perlmutter", lambda d: d.update(container=dict(SHIFTER))) == []


@pytest.mark.parametrize("name", ["lumi", "frontier", "derecho"])
def test_only_shifter_refuses_added_paths(name: str) -> None:
    """singularity (LUMI) and apptainer keep the job's lists: the shifter refusal is
    shifter's alone, even for a runtime whose name sorts after it."""
    def add(data: dict) -> None:
        data["runtime"]["prepend_path"] = {"PATH": "/opt/site/bin"}
        data["runtime"]["append_path"] = {"X_LIST": "/opt/x"}

    assert _found(name, add) == []


def test_an_amd_sites_rules_add_to_the_others() -> None:
    """An AMD site's own refusals come after the runtime-wide ones (both reported)."""
    def edit(data: dict) -> None:
        data["target"] = "power9le"
        data["container"]["nccl"] = {"version": "2.29.2-1", "plugin": "1.18.0"}

    assert [k for k, _ in _found("lumi", edit)] == [("target",), ("container", "nccl")]


def test_the_derivations_the_plan_reads() -> None:
    data = sitemod.load("derecho").data
    assert rules.gtl_dir(data) == "/opt/cray/pe/mpich/8.1.27/gtl/lib"
    assert str(rules.cray_root(data)) == "/"
    assert rules.netstack_artifact("1.18.0") == (
        "26.05.1", "gpu:cuda13,cxi:12.0.1,ofi:2.5.1,aws:1.18.0+dl")
    assert rules.netstack_artifact("1.17.2") is None


def test_singularity_without_the_centres_modules_is_refused_at_load(tmp_path) -> None:
    """Read from the file, as every verb reads it: the runtime is a string the YAML
    parser made, never the rule's interned literal, so only equality can match it."""
    def edit(data: dict) -> None:
        data["container"]["runtime"] = "singularity"
        data["container"].pop("modules")

    with pytest.raises(UserError) as refused:
        sitemod.load(str(write_site(tmp_path, "frontier", edit)))
    assert "container.runtime" in str(refused.value)
    assert "singularity runs here with the centre's binding modules" in str(refused.value)
