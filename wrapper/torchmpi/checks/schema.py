"""The JSON schema of a site file, and its errors worded for a site admin.

``schema/site.schema.json`` says every key, its type and what is allowed;
:data:`Validator` reads ``$`` as end of input as JSON schema (ECMA-262)
means it, and :func:`describe` turns one schema error into (key path,
message).  The rules a schema cannot say well are the other modules of
:mod:`torchmpi.checks`.
"""

from __future__ import annotations

import copy
import difflib
import json
import re
from collections.abc import Iterator
from functools import cache
from importlib import resources
from typing import Any

import jsonschema


@cache
def site_schema() -> dict[str, Any]:
    text = resources.files("torchmpi").joinpath("schema/site.schema.json").read_text()
    return json.loads(text)


TYPE_NAMES = {"string": "a string", "integer": "an integer", "array": "a list",
               "object": "a mapping", "boolean": "true or false", "number": "a number"}

def ecma_anchor(pattern: str) -> str:
    """``pattern`` with a final ``$`` meaning end of input, as in JSON schema (ECMA-262).

    Python's ``$`` also matches before a final newline, so ``^[a-z]+$`` would
    let ``"derecho\\n"`` through and a name with a newline would reach the
    rendered files.
    """
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        return pattern[:-1] + r"\Z"
    return pattern

def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator:
    """JSON schema's ``pattern`` keyword with ECMA-262 end anchoring (see ecma_anchor)."""
    if validator.is_type(instance, "string") and not re.search(ecma_anchor(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")

Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, validators={"pattern": _pattern}
)


def _properties_with_defaults(validator: Any, properties: dict, instance: Any,
                              schema: dict) -> Iterator:
    """JSON schema's ``properties``, first setting each absent key that has a ``default``.

    The schema is where a default lives (stackinator fills its recipes' defaults
    the same way while validating), so the producers read the key and never
    repeat the value: a ``get(key, default)`` in code would be a second answer.
    """
    if validator.is_type(instance, "object"):
        for name, sub in properties.items():
            if isinstance(sub, dict) and "default" in sub and name not in instance:
                instance[name] = copy.deepcopy(sub["default"])
    yield from Validator.VALIDATORS["properties"](validator, properties, instance, schema)


_Filler = jsonschema.validators.extend(
    Validator, validators={"properties": _properties_with_defaults})


def fill_defaults(data: dict[str, Any], schema: dict[str, Any] | None = None) -> None:
    """Set, in place, every default the schema states for a key ``data`` lacks.

    Run on data the schema accepts (errors are reported before, by
    :data:`Validator`): a default is set only where its mapping exists or has a
    default itself (``checks: {}`` brings ``checks.ranks_per_node``), and one
    under ``if``/``then`` only where the condition holds (``launch: srun`` for
    ``launcher: slurm``).
    """
    for _ in _Filler(schema if schema is not None else site_schema()).iter_errors(data):
        pass

def describe(err: jsonschema.ValidationError) -> tuple[tuple, str]:
    """(key path, message) for one schema error, worded for a site admin."""
    path = tuple(err.absolute_path)
    schema = err.schema if isinstance(err.schema, dict) else {}
    v = err.validator
    arch = next((i + 1 for i, k in enumerate(path) if k == "cuda_arch"), None)
    if arch and v in ("anyOf", "oneOf", "enum", "pattern", "type"):  # one, a list, or '80,86'
        return path[:arch], _cuda_arch_error(err.instance)
    if v == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        key = extra[0] if extra else "?"
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return path + (key,), f"unknown key {key!r}{hint}; allowed keys: {', '.join(allowed)}"
    if v == "required":
        missing = err.message.split("'")[1] if "'" in err.message else err.message
        why = ""
        if missing in ("libfabric", "gpu") and isinstance(err.instance, dict) \
                and err.instance.get("fabric") == "slingshot":
            why = " (required when fabric is slingshot: NCCL reaches Slingshot-11 only through" \
                  " aws-ofi-nccl and the site's libfabric with the cxi provider)"
        if missing == "cuda_arch":
            why = (" (a GPU site must say its CUDA architecture,"
                   " e.g. 80 for A100, 90 for H100/GH200)")
        where = ""
        top = site_schema().get("required", [])
        if not path and missing in top:  # the file's own mapping, unconditionally
            needs = ", ".join(top)
            where = f" at the top level of the site file; the top level needs: {needs}"
        return path + (missing,), f"missing required key '{missing}'{where}{why}"
    if v == "enum":
        allowed = ", ".join(dict.fromkeys(str(x) for x in err.validator_value))
        return path, f"{err.instance!r} is not allowed; allowed: {allowed}"
    if v == "type":
        want = err.validator_value
        want = want if isinstance(want, list) else [want]
        names = " or ".join(TYPE_NAMES.get(w, w) for w in want)
        return path, f"expected {names}, got {type(err.instance).__name__} {err.instance!r}"
    if v in ("anyOf", "oneOf"):
        if schema.get("x-message"):
            return path, schema["x-message"]
        # 'auto' or a mapping: report the branch that matches the instance's type best.
        # Drop the branches whose type does not fit at all (e.g. 'auto' vs a mapping).
        relevant = [e for e in err.context or []
                    if not (e.validator in ("const", "type") and not e.relative_path)]
        if not relevant:  # no branch fits the instance's type: name them all
            wanted = [repr(b["const"]) if "const" in b else TYPE_NAMES.get(b.get("type"), "?")
                      for b in err.validator_value]
            return path, (f"expected {' or '.join(wanted)},"
                          f" got {type(err.instance).__name__} {err.instance!r}")
        best = jsonschema.exceptions.best_match(relevant or err.context or [])
        if best is not None:
            sub_path, msg = describe(best)
            return sub_path, msg
        return path, err.message
    if v == "pattern":
        allowed = schema.get("x-allowed") or f"text matching {err.validator_value}"
        return path, f"{err.instance!r} is not allowed; allowed: {allowed}"
    if v == "minLength":
        return path, "must not be empty"
    if v == "minItems":
        return path, "must not be an empty list"
    if v == "uniqueItems":
        return path, "lists a value twice; allowed: each value once"
    if v == "const":
        return path, f"{err.instance!r} is not allowed here (only {err.validator_value!r})"
    return path, err.message

def _cuda_arch_error(value: Any) -> str:
    """Why ``gpu.cuda_arch`` (one value, a list, or ``'80,86'``) is not CUDA architectures."""
    allowed = [a for a in site_schema()["$defs"]["cuda_arch"]["enum"] if isinstance(a, str)]
    several = " or several: a list ([80, 86]) or as Spack writes them ('80,86')"
    if isinstance(value, list):
        if not value:
            return f"must not be an empty list; allowed: {', '.join(allowed)},{several}"
        if len({str(v) for v in value}) < len(value):
            return "lists a value twice; allowed: each value once"
        items = value
    elif isinstance(value, str) and "," in value:
        items = value.split(",")
    else:
        items = [value]
    bad = next((v for v in items if str(v) not in allowed or isinstance(v, (bool, float))),
               value)
    if isinstance(bad, (dict, list, bool, float)) or bad is None:
        return (f"expected a CUDA architecture, got {type(bad).__name__} {bad!r}; allowed:"
                f" {', '.join(allowed)},{several}")
    return f"{bad!r} is not a CUDA architecture; allowed: {', '.join(allowed)},{several}"
