"""Site files: find, parse and validate ``sites/<name>.yaml``.

Every error names the file, the line, the key path and what is allowed, so an
admin can fix a site file without reading this code.  Validation is the JSON
schema (``schema/site.schema.json``) plus the few rules a schema cannot say
well; nothing is rendered from a site that fails either.
"""

from __future__ import annotations

import difflib
import hashlib
import json
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, ClassVar

import jsonschema
import yaml

from torchmpi import paths, runtime
from torchmpi.errors import UserError


@dataclass
class Site:
    """A validated site file."""

    name: str
    path: Path
    data: dict[str, Any]
    raw: bytes
    detected: dict[str, Any] = field(default_factory=dict)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def gpu(self) -> dict[str, Any] | None:
        gpu = self.data.get("gpu")
        return gpu if isinstance(gpu, dict) else None

    @property
    def cuda_arch(self) -> str | None:
        return str(self.gpu["cuda_arch"]) if self.gpu else None

    #: The keys that may be ``auto`` (detected on this host), as dotted paths.
    AUTO_KEYS: ClassVar[tuple[str, ...]] = ("target", "gpu", "compilers", "mpi.kind")

    @property
    def auto_keys(self) -> list[str]:
        """The keys this site file leaves to detection (``auto`` as written, before fill-in)."""
        written = yaml.safe_load(self.raw) if self.raw else self.data
        out = []
        for key in self.AUTO_KEYS:
            top, _, sub = key.partition(".")
            value = written.get(top)
            value = value.get(sub) if sub and isinstance(value, dict) else value
            if value == "auto":
                out.append(key)
        return out

    @property
    def is_local(self) -> bool:
        """Whether this site describes the host that renders it (some of it is detected).

        Such a site's rendering depends on the host, so it is never committed,
        and its target is this host's (no cross-target settings needed).
        """
        return bool(self.auto_keys)

    @property
    def cross_family(self) -> bool:
        """Whether the site's CPU family differs from this host's (e.g. aarch64 from x86_64)."""
        import archspec.cpu

        target = archspec.cpu.TARGETS.get(str(self.data.get("target")))
        return target is not None and target.family != archspec.cpu.host().family

    def summary(self) -> str:
        """One line for ``torchmpi sites``."""
        d = self.data
        gpu = f"sm_{self.cuda_arch}" if self.gpu else ("gpu:auto" if d.get("gpu") else "cpu-only")
        mpi = d["mpi"]["kind"] + (f"@{d['mpi']['version']}" if d["mpi"].get("version") else "")
        return f"{d['target']}, {gpu}, {mpi}, {d['fabric']}, {d['launcher']} -- {d['description']}"


def _schema() -> dict[str, Any]:
    text = resources.files("torchmpi").joinpath("schema/site.schema.json").read_text()
    return json.loads(text)


def available() -> list[str]:
    """Names of the shipped sites (file stems under sites/)."""
    return sorted(p.stem for p in paths.sites_dir().glob("*.yaml"))


def resolve(name_or_path: str) -> Path:
    """A site name or a path to a site file; unknown names get close suggestions."""
    candidate = Path(name_or_path)
    if candidate.suffix in (".yaml", ".yml") or "/" in name_or_path:
        if not candidate.is_file():
            raise UserError(f"{name_or_path}: no such site file")
        return candidate
    path = paths.sites_dir() / f"{name_or_path}.yaml"
    if path.is_file():
        return path
    names = available()
    close = difflib.get_close_matches(name_or_path, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UserError(
        f"unknown site '{name_or_path}'{hint} (known sites: {', '.join(names) or 'none'};"
        f" site files live in {paths.sites_dir()})"
    )


# --- YAML with line numbers ------------------------------------------------


def _line_index(node: yaml.Node, path: tuple = (), out: dict | None = None) -> dict:
    """Map each key path in a composed YAML tree to its 1-based line."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            sub = path + (key.value,)
            out[sub] = key.start_mark.line + 1
            _line_index(value, sub, out)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _line_index(item, path + (i,), out)
    return out


def _fmt_path(path: tuple) -> str:
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text or "(top level)"


def parse(path: Path) -> tuple[dict[str, Any], dict, bytes]:
    """Read a site file; YAML syntax errors become one message with the line."""
    try:
        raw = path.read_bytes()
    except OSError as err:
        raise UserError(f"{path}: cannot read: {err.strerror}") from None
    try:
        node = yaml.compose(raw.decode("utf-8"), Loader=yaml.SafeLoader)
        data = yaml.safe_load(raw)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise UserError(f"{where}: YAML syntax error: {err.problem or err}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as err:
        raise UserError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        kind = type(data).__name__
        raise UserError(f"{path}:1: a site file is a YAML mapping (key: value), not {kind}")
    return data, _line_index(node), raw


# --- validation ------------------------------------------------------------

_TYPE_NAMES = {"string": "a string", "integer": "an integer", "array": "a list",
               "object": "a mapping", "boolean": "true or false", "number": "a number"}


def _describe(err: jsonschema.ValidationError) -> tuple[tuple, str]:
    """(key path, message) for one schema error, worded for a site admin."""
    path = tuple(err.absolute_path)
    schema = err.schema if isinstance(err.schema, dict) else {}
    v = err.validator
    if v == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        key = extra[0] if extra else "?"
        close = difflib.get_close_matches(key, allowed, n=1)
        hint = f" (did you mean '{close[0]}'?)" if close else ""
        return path + (key,), f"unknown key '{key}'{hint}; allowed keys: {', '.join(allowed)}"
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
        return path + (missing,), f"missing required key '{missing}'{why}"
    if v == "enum":
        allowed = ", ".join(dict.fromkeys(str(x) for x in err.validator_value))
        what = "not a CUDA architecture" if path and path[-1] == "cuda_arch" else "not allowed"
        return path, f"{err.instance!r} is {what}; allowed: {allowed}"
    if v == "type":
        want = err.validator_value
        want = want if isinstance(want, list) else [want]
        names = " or ".join(_TYPE_NAMES.get(w, w) for w in want)
        return path, f"expected {names}, got {type(err.instance).__name__} {err.instance!r}"
    if v in ("anyOf", "oneOf"):
        if schema.get("x-message"):
            return path, schema["x-message"]
        # 'auto' or a mapping: report the branch that matches the instance's type best.
        # Drop the branches whose type does not fit at all (e.g. 'auto' vs a mapping).
        relevant = [e for e in err.context or []
                    if not (e.validator in ("const", "type") and not e.relative_path)]
        best = jsonschema.exceptions.best_match(relevant or err.context or [])
        if best is not None:
            sub_path, msg = _describe(best)
            return sub_path, msg
        return path, err.message
    if v == "pattern":
        return path, f"{err.instance!r} does not match the expected form ({err.validator_value})"
    if v == "const":
        return path, f"{err.instance!r} is not allowed here (only {err.validator_value!r})"
    return path, err.message


def _semantic_errors(data: dict[str, Any]) -> list[tuple[tuple, str]]:
    """Rules that read better in code than in JSON schema."""
    errors: list[tuple[tuple, str]] = []
    mpi = data.get("mpi", {})
    kind = mpi.get("kind")
    if kind == "openmpi-cuda" and data.get("gpu") is None:
        errors.append((("mpi", "kind"), ("openmpi-cuda is the CUDA-aware Open MPI: it needs a"
                                         " 'gpu' section (use kind: openmpi on a CPU-only site)")))
    nccl = data.get("nccl") or {}
    if nccl and data.get("gpu") in (None, "auto") and data.get("name") != "local":
        errors.append((("nccl",), "NCCL is for GPUs: this site has no 'gpu' section"))
    if nccl.get("plugin") and data.get("fabric") != "slingshot":
        errors.append((("nccl", "plugin"), (
            "the aws-ofi-nccl plugin is only built for fabric: slingshot"
            f" (this site says fabric: {data.get('fabric')})")))
    switch = runtime.cray_gpu_switch(data)
    stated = (data.get("runtime") or {}).get("env", {}).get(runtime.GPU_SWITCH)
    if switch is not None and stated is not None and str(stated) != switch:
        gtl = "links Cray's GTL" if switch == "1" else "links no GTL"
        errors.append((("runtime", "env", runtime.GPU_SWITCH), (
            f"must be {switch} here: mpi.cuda_aware is {str(switch == '1').lower()}, so torch"
            f" {gtl}; the switch and GTL go together or not at all (to run without GPU-aware"
            " MPI, e.g. for CSCS's MPI-with-NCCL deadlock warning, set mpi.cuda_aware: false)")))
    errors.extend(runtime.problems(data))  # `$` references, set-and-prepend
    if data.get("name") == "local":
        return errors
    for key in ("target", "gpu", "compilers", "mpi.kind"):
        top, _, sub = key.partition(".")
        value = data.get(top, {}).get(sub) if sub else data.get(top)
        if value == "auto":
            msg = ("'auto' (host detection) is only for the local site;"
                   " a site file states what its compute nodes are")
            errors.append((tuple(key.split(".")), msg))
    return errors


def validate(path: Path, data: dict[str, Any], lines: dict) -> None:
    """Raise one UserError listing every problem, each with file:line and key path."""
    validator = jsonschema.Draft202012Validator(_schema())
    problems = [_describe(e) for e in validator.iter_errors(data)]
    if not problems:
        problems = _semantic_errors(data)
    if data.get("name") not in (None, path.stem) and not problems:
        problems = [(("name",), f"name '{data['name']}' differs from the file name '{path.stem}'")]
    if not problems:
        return
    out = []
    for key_path, msg in sorted(set(problems), key=lambda p: (lines.get(p[0], 0), p[1])):
        line = _nearest_line(lines, key_path)
        out.append(f"{path}:{line}: {_fmt_path(key_path)}: {msg}")
    raise UserError("invalid site file\n  " + "\n  ".join(out))


def _nearest_line(lines: dict, key_path: tuple) -> int:
    while key_path and key_path not in lines:
        key_path = key_path[:-1]
    return lines.get(key_path, 1)


def load(name_or_path: str) -> Site:
    """Find, parse and validate a site; for ``local`` fill in detected host facts."""
    path = resolve(name_or_path)
    data, lines, raw = parse(path)
    validate(path, data, lines)
    site = Site(name=data["name"], path=path, data=data, raw=raw)
    kind = data["mpi"]["kind"]
    if "auto" in (data.get("target"), data.get("gpu"), data.get("compilers"), kind):
        from torchmpi import detect

        detect.fill_in(site)
    return site
