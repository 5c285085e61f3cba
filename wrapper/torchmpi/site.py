"""Site files: find, read, parse and validate ``sites/<name>.yaml``.

This is the one site loader: render, sites, concretize and doctor all call
:func:`load`, so a file that one verb accepts no other verb rejects.  Every
error names the file, the line and column, the key path and what is allowed,
so an admin can fix a site file without reading this code.

Parsing is ruamel.yaml (the YAML library Spack itself uses), because PyYAML
lets a duplicated key silently win and reports undecodable bytes by byte
offset.  Validation is the JSON schema (``schema/site.schema.json``), with
``$`` read as end of input as JSON schema (ECMA-262) means it, plus the few
rules a schema cannot say well; nothing is rendered from a site that fails.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema
from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from torchmpi import paths, runtime
from torchmpi.errors import UserError

#: Largest site file read.  The shipped ones are under 5 KB; a file a
#: thousand times that size is a mistake (a log, a binary), and reading or
#: parsing it whole would take minutes and gigabytes before any message.
MAX_BYTES = 256 * 1024

#: The site that describes this host; the only one whose keys may be ``auto``.
LOCAL = "local"

#: Keys (dotted paths) that the local site may set to ``auto``, in the order
#: :func:`torchmpi.detect.fill_in` replaces them (the MPI choice depends on the GPU).
AUTO_KEYS = ("target", "compilers", "gpu", "mpi.kind", "externals")


def _get(data: dict[str, Any], dotted: str) -> Any:
    """The value at a dotted key path, or None where any level is missing."""
    value: Any = data
    for part in dotted.split("."):
        value = value.get(part) if isinstance(value, dict) else None
    return value


def auto_keys(data: dict[str, Any]) -> list[str]:
    """The keys of :data:`AUTO_KEYS` that ``data`` sets to ``auto``."""
    return [key for key in AUTO_KEYS if _get(data, key) == "auto"]


@dataclass
class Site:
    """A validated site file."""

    name: str
    path: Path
    data: dict[str, Any]
    raw: bytes
    detected: dict[str, Any] = field(default_factory=dict)

    #: Keys the local site may set to ``auto`` (see :data:`AUTO_KEYS`).
    auto_keys = AUTO_KEYS

    @property
    def is_local(self) -> bool:
        """Whether this is the host-detected local site (the only one allowed ``auto``)."""
        return self.name == LOCAL

    @property
    def cross_family(self) -> bool:
        """Whether the compute nodes' CPU family differs from this host's (aarch64 from x86_64).

        Spack considers a target outside the host's family only when a root spec
        names it; the local site is this host, so never cross-family.
        """
        import archspec.cpu

        target = archspec.cpu.TARGETS.get(str(self.data.get("target")))
        if self.is_local or target is None:
            return False
        return target.family != archspec.cpu.host().family

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
            what = "is not a regular file" if candidate.exists() else "no such site file"
            raise UserError(f"{name_or_path}: {what}")
        return candidate
    path = paths.sites_dir() / f"{name_or_path}.yaml"
    if path.is_file():
        return path
    if path.exists():  # a directory, a FIFO (open would block), /dev/zero behind a symlink
        raise UserError(f"{path}: is not a regular file")
    names = available()
    close = difflib.get_close_matches(name_or_path, names, n=3, cutoff=0.5)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise UserError(
        f"unknown site {name_or_path!r}{hint} (known sites: {', '.join(names) or 'none'};"
        f" site files live in {paths.sites_dir()})"
    )


# --- reading and parsing: every error at file:line:column ------------------

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


def parse(path: Path) -> tuple[dict[str, Any], dict, bytes]:
    """Read and parse a site file: (data, key path -> (line, column), raw bytes)."""
    raw = _read(path)
    text = _decode(path, raw)
    yaml = YAML(typ="safe", pure=True)
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
        raise UserError(f"{_at(path, line, column)}: character {err.character!r} is not"
                        " allowed in YAML (control characters other than tab and newline)"
                        ) from None
    except YAMLError as err:
        raise UserError(f"{path}: not valid YAML: {err}") from None
    except RecursionError:
        raise UserError(f"{path}: nested too deeply to be a site file") from None
    if not isinstance(data, dict):
        what = "an empty file" if data is None else f"a {type(data).__name__}"
        raise UserError(f"{path}:1:1: a site file is a YAML mapping (key: value), not {what}")
    return data, lines, raw


# --- validation ------------------------------------------------------------

_TYPE_NAMES = {"string": "a string", "integer": "an integer", "array": "a list",
               "object": "a mapping", "boolean": "true or false", "number": "a number"}


def _ecma_anchor(pattern: str) -> str:
    """``pattern`` with a final ``$`` meaning end of input, as in JSON schema (ECMA-262).

    Python's ``$`` also matches before a final newline, so ``^[a-z]+$`` would
    let ``"derecho\\n"`` through and a name with a newline would reach the
    rendered files.
    """
    if pattern.endswith("$") and not pattern.endswith("\\$"):
        return pattern[:-1] + r"\Z"
    return pattern


def _pattern(validator: Any, pattern: str, instance: Any, schema: dict) -> Iterator:
    """JSON schema's ``pattern`` keyword with ECMA-262 end anchoring (see _ecma_anchor)."""
    if validator.is_type(instance, "string") and not re.search(_ecma_anchor(pattern), instance):
        yield jsonschema.ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(
    jsonschema.Draft202012Validator, validators={"pattern": _pattern}
)


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
        if not relevant:  # no branch fits the instance's type: name them all
            wanted = [repr(b["const"]) if "const" in b else _TYPE_NAMES.get(b.get("type"), "?")
                      for b in err.validator_value]
            return path, (f"expected {' or '.join(wanted)},"
                          f" got {type(err.instance).__name__} {err.instance!r}")
        best = jsonschema.exceptions.best_match(relevant or err.context or [])
        if best is not None:
            sub_path, msg = _describe(best)
            return sub_path, msg
        return path, err.message
    if v == "pattern":
        allowed = schema.get("x-allowed") or f"text matching {err.validator_value}"
        return path, f"{err.instance!r} is not allowed; allowed: {allowed}"
    if v == "minLength":
        return path, "must not be empty"
    if v == "minItems":
        return path, "must not be an empty list"
    if v == "const":
        return path, f"{err.instance!r} is not allowed here (only {err.validator_value!r})"
    return path, err.message


def _target_error(value: Any, what: str) -> str | None:
    """Why ``value`` is not an archspec microarchitecture (with close names), or None."""
    import archspec.cpu

    if not isinstance(value, str) or value in archspec.cpu.TARGETS:
        return None
    close = difflib.get_close_matches(value, list(archspec.cpu.TARGETS), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    return (f"{value!r} is not a microarchitecture archspec knows; {hint}allowed: {what}"
            "an archspec name such as zen3, zen4, icelake, sapphirerapids, neoverse_v2,"
            " x86_64_v3 (`spack arch -t` on a compute node prints it)")


def _semantic_errors(data: dict[str, Any]) -> list[tuple[tuple, str]]:
    """Rules that read better in code than in JSON schema."""
    errors: list[tuple[tuple, str]] = []
    local = data.get("name") == LOCAL
    target = data.get("target")
    why = _target_error(target, "'auto' (this host) or " if local else "")
    if target != "auto" and why:
        errors.append((("target",), why))
    for i, comp in enumerate(data["compilers"] if isinstance(data["compilers"], list) else []):
        why = _target_error(comp.get("target"), "")
        if why:
            errors.append((("compilers", i, "target"), why))
    mpi = data.get("mpi", {})
    kind = mpi.get("kind")
    if kind == "openmpi-cuda" and data.get("gpu") is None:
        errors.append((("mpi", "kind"), ("openmpi-cuda is the CUDA-aware Open MPI: it needs a"
                                         " 'gpu' section (use kind: openmpi on a CPU-only site)")))
    nccl = data.get("nccl") or {}
    if nccl and data.get("gpu") in (None, "auto") and not local:
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
    if local:
        return errors
    for key in auto_keys(data):
        msg = ("'auto' (host detection) is only for the local site;"
               " a site file states what its compute nodes are")
        errors.append((tuple(key.split(".")), msg))
    return errors


def validate(path: Path, data: dict[str, Any], lines: dict) -> None:
    """Raise one UserError listing every problem, each with file:line:column and key path."""
    validator = _Validator(_schema())
    problems = [_describe(e) for e in validator.iter_errors(data)]
    if not problems:
        problems = _semantic_errors(data)
    if data.get("name") not in (None, path.stem) and not problems:
        msg = (f"name {data['name']!r} differs from the file name {path.stem!r};"
               " allowed: the file name without .yaml")
        problems = [(("name",), msg)]
    if not problems:
        return
    out = []
    unique = sorted(set(problems), key=lambda p: (_nearest(lines, p[0]), p[1]))
    for key_path, msg in unique:
        line, column = _nearest(lines, key_path)
        out.append(f"{path}:{line}:{column}: {_fmt_path(key_path)}: {msg}")
    raise UserError("invalid site file\n  " + "\n  ".join(out))


def _nearest(lines: dict, key_path: tuple) -> Where:
    while key_path and key_path not in lines:
        key_path = key_path[:-1]
    return lines.get(key_path, (1, 1))


def load(name_or_path: str) -> Site:
    """Find, read, parse and validate a site; for ``local`` fill in detected host facts."""
    path = resolve(name_or_path)
    data, lines, raw = parse(path)
    validate(path, data, lines)
    site = Site(name=data["name"], path=path, data=data, raw=raw)
    if auto_keys(data):
        from torchmpi import detect

        detect.fill_in(site)
    return site
