"""Defaults live in the site schema and are filled in at load; no producer repeats one.

A site file that leaves a key out gets the schema's ``default`` for it when it is
loaded (:func:`torchmpi.checks.schema.fill_defaults`, as stackinator fills its
recipes' defaults while validating), so every output reads the same value and a
``get(key, default)`` in a producer would be a second answer that can drift
from the first (two functions named ``cuda_aware`` once answered differently).
"""

from __future__ import annotations

import ast
import copy
import json
from pathlib import Path

import pytest
from support import ROOT
from support.sites import edited_site, site_data
from torchmpi import site as sitemod
from torchmpi.checks import schema

PACKAGE = ROOT / "wrapper" / "torchmpi"


def _defaults(node: object, out: set[str] | None = None) -> set[str]:
    """The names of every property the schema gives a ``default``."""
    out = set() if out is None else out
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict) and "default" in sub:
                out.add(name)
        for value in node.values():
            _defaults(value, out)
    elif isinstance(node, list):
        for value in node:
            _defaults(value, out)
    return out


def test_a_site_without_the_keys_gets_the_schemas_defaults() -> None:
    """generic-ib states none of these keys; loaded, it has the schema's values."""
    raw = site_data("generic-ib")
    assert "cuda_aware" not in raw["mpi"] and "install" not in raw and "checks" not in raw
    data = sitemod.load("generic-ib").data
    assert data["mpi"]["cuda_aware"] is True
    assert data["install"] == {"module_system": "lmod"}
    assert data["checks"] == {"gpus_per_node": 1, "ranks_per_node": 2,
                              "hostnames": [".*"], "access": [], "expected_fail": [],
                              "references": []}
    assert data["extra_specs"] == []
    assert data["launch"] == "srun"  # launcher: slurm


def _defaulted(node: object, where: tuple = ()) -> list[tuple[tuple, dict]]:
    """(key path, subschema) of every property the schema gives a ``default``."""
    out = []
    if isinstance(node, dict):
        for name, sub in (node.get("properties") or {}).items():
            if isinstance(sub, dict) and "default" in sub:
                out.append(((*where, name), sub))
        for key, value in node.items():
            out += _defaulted(value, (*where, key) if key != "properties" else where)
    elif isinstance(node, list):
        for value in node:
            out += _defaulted(value, where)
    return out


def test_every_default_is_a_value_the_schema_accepts_there() -> None:
    """A default a site file may not write (``cpus_per_node: 0`` under ``minimum: 1``)
    is a second meaning hidden in the filled-in data."""
    found = _defaulted(schema.site_schema())
    assert len(found) > 5
    bad = [(where, sub["default"]) for where, sub in found
           if not schema.Validator(sub).is_valid(sub["default"])]
    assert bad == []


def test_a_stated_value_is_kept_and_a_conditional_default_applies_only_where_it_holds(
        tmp_path: Path) -> None:
    site = edited_site(tmp_path, "generic-ib",
                       lambda d: d.update(launch="mpirun", checks={"ranks_per_node": 4}))
    assert site.data["launch"] == "mpirun"
    assert site.data["checks"]["ranks_per_node"] == 4
    assert site.data["checks"]["gpus_per_node"] == 1  # filled inside a stated mapping
    # launch is Slurm's choice only (checks.launch): derecho's PBS gets no default
    assert "launch" not in sitemod.load("derecho").data


def test_a_references_defaults_are_filled_per_item(tmp_path: Path) -> None:
    ref = {"backend": "nccl", "nodes": 2, "busbw": 80.0, "source": "a run"}
    site = edited_site(tmp_path, "generic-ib",
                       lambda d: d.update(checks={"references": [ref, {**ref, "size": "256M"}]}))
    first, second = site.data["checks"]["references"]
    assert (first["size"], first["tolerance"]) == ("1G", 0.1)
    assert (second["size"], second["tolerance"]) == ("256M", 0.1)


def test_the_answer_follows_the_schemas_default(monkeypatch) -> None:
    """Change the defaults in a copy of the schema: the loaded site's answers change.

    Proves the value comes from the schema, not from a constant in code.
    """
    changed = copy.deepcopy(schema.site_schema())
    props = changed["properties"]
    props["mpi"]["properties"]["cuda_aware"]["default"] = False
    props["install"]["properties"]["module_system"]["default"] = "tcl"
    props["checks"]["properties"]["ranks_per_node"]["default"] = 7
    props["container"]["properties"]["os"]["default"] = "debian12"
    monkeypatch.setattr(schema, "site_schema", lambda: changed)
    site = sitemod.load("generic-ib")
    assert site.torch_cuda_aware is False
    assert "~cuda_aware_mpi" in site.root_spec
    assert site.data["install"]["module_system"] == "tcl"
    assert site.data["checks"]["ranks_per_node"] == 7
    monkeypatch.undo()
    site = sitemod.load("generic-ib")
    assert site.torch_cuda_aware is True and "+cuda_aware_mpi" in site.root_spec


def test_fill_defaults_takes_any_schema() -> None:
    tiny = {"type": "object", "properties": {
        "a": {"type": "object", "default": {}, "properties": {"b": {"default": 3}}},
        "c": {"default": [1]}}}
    data: dict = {"c": [2]}
    schema.fill_defaults(data, tiny)
    assert data == {"c": [2], "a": {"b": 3}}
    other: dict = {}
    schema.fill_defaults(other, tiny)
    other["c"].append(5)  # a copy: the schema's own default list is not shared
    assert tiny["properties"]["c"]["default"] == [1]


def _get_with_default(tree: ast.AST, keys: set[str]) -> list[tuple[int, str]]:
    """``x.get("key", default)`` calls for a key the schema gives a default."""
    out = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("get", "setdefault") and len(node.args) == 2
                and isinstance(node.args[0], ast.Constant) and node.args[0].value in keys):
            out.append((node.lineno, node.args[0].value))
    return out


def test_no_producer_repeats_a_schema_default() -> None:
    """No wrapper module reads a defaulted key with a default of its own.

    Not ``data/``: the ReFrame check library there reads settings.py, which
    torchmpi reframe wrote with every default already in it, not the site file.
    """
    keys = _defaults(json.loads((PACKAGE / "schema" / "site.schema.json").read_text()))
    assert {"cuda_aware", "module_system", "ranks_per_node", "launch", "os"} <= keys
    found = []
    for path in sorted(p for p in PACKAGE.rglob("*.py") if "data" not in p.parts):
        for line, key in _get_with_default(ast.parse(path.read_text()), keys):
            found.append(f"{path.relative_to(ROOT)}:{line}: .get({key!r}, ...)")
    assert not found, "defaults repeated in code (the schema has them):\n" + "\n".join(found)


@pytest.mark.parametrize("source, key", [
    ('mpi.get("cuda_aware", True)', "cuda_aware"),
    ('checks.get("ranks_per_node", 2)', "ranks_per_node"),
])
def test_the_repeat_finder_finds_a_repeat(source: str, key: str) -> None:
    assert _get_with_default(ast.parse(source), {key}) == [(1, key)]
    assert _get_with_default(ast.parse(f'x.get("{key}")'), {key}) == []


def _described(data: dict) -> list[tuple[tuple, str]]:
    """What a site admin is told for each schema error of ``data``."""
    validator = schema.Validator(schema.site_schema())
    return [schema.describe(err) for err in validator.iter_errors(data)]


def test_an_error_beside_cuda_arch_is_not_worded_as_one_of_cuda_arch() -> None:
    """A bad ``gpu.vendor`` names that key and the vendors; a bad ``gpu.cuda_arch`` names
    ``gpu.cuda_arch`` whole (the key, under ``gpu``) and the architectures."""
    vendor = _described(site_data("perlmutter", lambda d: d["gpu"].update(vendor="intel")))
    assert vendor == [(("gpu", "vendor"), "'intel' is not allowed; allowed: nvidia, amd")]
    arch = _described(site_data("perlmutter", lambda d: d["gpu"].update(cuda_arch="sm80")))
    assert [p for p, _ in arch] == [("gpu", "cuda_arch")]
    assert arch[0][1].startswith("'sm80' is not a CUDA architecture; allowed: 50, ")


def test_a_slingshot_site_without_libfabric_is_told_why_it_needs_one() -> None:
    got = _described(site_data("perlmutter", lambda d: d.pop("libfabric")))
    assert got == [(("libfabric",), ("missing required key 'libfabric' (required when fabric "
                    "is slingshot: NCCL reaches Slingshot-11 only through aws-ofi-nccl and "
                    "the site's libfabric with the cxi provider)"))]


def test_an_unknown_key_is_named_with_the_closest_allowed_one() -> None:
    got = _described(site_data("derecho", lambda d: d.update(fabirc="slingshot")))
    assert len(got) == 1 and got[0][0] == ("fabirc",)
    assert got[0][1].startswith("unknown key 'fabirc' (did you mean 'fabric'?); allowed keys: ")
    assert "fabric, gpu" in got[0][1] and "fabirc," not in got[0][1]


def test_a_bound_keeps_jsonschemas_own_words() -> None:
    """A minimum (or any check without wording of its own) is told as jsonschema says it,
    never as a constant the key must equal."""
    got = _described(site_data("derecho",
                               lambda d: d.setdefault("checks", {}).update(cpus_per_node=0)))
    assert got == [(("checks", "cpus_per_node"), "0 is less than the minimum of 1")]
