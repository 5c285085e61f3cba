"""Site files: find, read, parse and validate ``sites/<name>.yaml``.

This is the one site loader: render, sites, concretize and doctor all call
:func:`load`, so a file that one verb accepts no other verb rejects.  Every
error names the file, the line and column, the key path and what is allowed,
so an admin can fix a site file without reading this code.

Reading and parsing (ruamel.yaml: duplicate keys, non-UTF-8 and size, each
at file:line:column) is :mod:`torchmpi.sitefile`.  Validation is the JSON
schema (``schema/site.schema.json``), with
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

from torchmpi import detect, pairs, paths, runtime, siterules, torches
from torchmpi.autokeys import AUTO_KEYS, auto_keys
from torchmpi.errors import UserError
from torchmpi.sitefile import MAX_BYTES, _fmt_path, _nearest, parse  # noqa: F401 (re-exported)

#: The site that describes this host; the only one whose keys may be ``auto``.
LOCAL = "local"

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
        return target.family != detect.host().family

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.raw).hexdigest()

    @property
    def gpu(self) -> dict[str, Any] | None:
        gpu = self.data.get("gpu")
        return gpu if isinstance(gpu, dict) else None

    @property
    def cuda_archs(self) -> list[str]:
        """The site's CUDA architectures, one per GPU model (``[80, 86]``, ``'80,86'``)."""
        return siterules.cuda_archs(self.gpu) if self.gpu else []

    @property
    def cuda_arch(self) -> str | None:
        """``cuda_arch`` as Spack writes the variant: ``80``, or ``80,86`` for several."""
        return ",".join(self.cuda_archs) if self.gpu else None

    @property
    def sm_arch(self) -> str | None:
        """The architectures as NVIDIA names them for people and ReFrame: ``sm_80,sm_86``."""
        return ",".join(f"sm_{a}" for a in self.cuda_archs) if self.gpu else None

    @property
    def torch_cuda_aware(self) -> bool:
        """The torch variant: the root is ``+cuda_aware_mpi``, so PyTorch's MPI backend
        takes CUDA tensors (a GPU site, unless ``mpi.cuda_aware: false``)."""
        return torches.cuda_aware(self.data)

    @property
    def mpi_moves_device_buffers(self) -> bool:
        """The MPI itself moves CUDA buffers (mpi4py's, or torch's where the variant is on).

        Not the same question as :attr:`torch_cuda_aware`: ``openmpi-cuda`` and a
        centre's MPI declared ``+cuda`` move them even under ``~cuda_aware_mpi``; a
        Spack-built Open MPI is solved ``+cuda`` only because ``+cuda_aware_mpi`` asks
        for it (py-torch's conflicts); Cray MPICH moves them only with GTL, which the
        tool loads exactly for ``+cuda_aware_mpi``.
        """
        if not self.gpu:
            return False
        mpi = self.data["mpi"]
        declared = "+cuda" in str(mpi.get("variants") or "").split()
        return mpi["kind"] == "openmpi-cuda" or declared or self.torch_cuda_aware

    @property
    def root_spec(self) -> str:
        """The ``py-torch-mpi`` root every environment of the site installs (native and
        container), before the target and torch release each adds."""
        root = "py-torch-mpi"
        if self.gpu:
            root += f" +cuda cuda_arch={self.cuda_arch}"
            # Explicit either way: the solver does not have to honour a variant default.
            root += " +cuda_aware_mpi" if self.torch_cuda_aware else " ~cuda_aware_mpi"
        else:
            root += " ~cuda"
        return root + f" fabric={self.data['fabric']}"

    def summary(self) -> str:
        """One line for ``torchmpi sites``."""
        d = self.data
        gpu = self.sm_arch if self.gpu else ("gpu:auto" if d.get("gpu") else "cpu-only")
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
        top = _schema().get("required", [])
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
    if v == "uniqueItems":
        return path, "lists a value twice; allowed: each value once"
    if v == "const":
        return path, f"{err.instance!r} is not allowed here (only {err.validator_value!r})"
    return path, err.message


def _cuda_arch_error(value: Any) -> str:
    """Why ``gpu.cuda_arch`` (one value, a list, or ``'80,86'``) is not CUDA architectures."""
    allowed = [a for a in _schema()["$defs"]["cuda_arch"]["enum"] if isinstance(a, str)]
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


def _target_error(value: Any, what: str) -> str | None:
    """Why ``value`` is not an archspec microarchitecture (with close names), or None."""
    import archspec.cpu

    if not isinstance(value, str) or value in archspec.cpu.TARGETS:
        return None
    vendor = siterules.vendor_hint(value)
    close = [vendor] if vendor else difflib.get_close_matches(
        value, list(archspec.cpu.TARGETS), n=3, cutoff=0.6)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    if vendor:
        hint = f"{value!r} is a vendor's name; did you mean {vendor}? "
    return (f"{value!r} is not a microarchitecture archspec knows; {hint}allowed: {what}"
            "an archspec name such as zen3, zen4, icelake, sapphirerapids, neoverse_v2,"
            " x86_64_v3 (`spack arch -t` on a compute node prints it)")


def notes(data: dict[str, Any]) -> list[str]:
    """What to tell the admin at render about a file that loads, one line each.

    A Slingshot site whose libfabric's major version differs from the one the
    chosen NCCL/aws-ofi-nccl pair was run with (libfabric 1.15 against a pair
    CSCS ran with 2.4.0): nothing vouches for that combination, and a pair run
    with the site's major is named where there is one.  A note, not an error:
    the pair may well work (the plugin's libfabric ABI is stable), but no
    source says so.
    """
    lib = data.get("libfabric")
    if data.get("fabric") != "slingshot" or not isinstance(lib, dict):
        return []
    found = re.match(r"libfabric@(\d+)(\S*)", str(lib.get("spec", "")))
    chosen = pairs.choose(dict(data.get("nccl") or {}))
    if not found or chosen is None or not re.match(r"\d+", chosen.libfabric):
        return []
    have, ran = found.group(1), chosen.libfabric.split(".")[0]
    if have == ran:
        return []
    minor = ".".join(re.findall(r"\d+", found.group(0))[:2])
    same = sorted((p for p in pairs.vouched() if p.fabric == "slingshot"
                   and p.libfabric.split(".")[0] == have),  # the site's minor first
                  key=lambda p: ".".join(p.libfabric.split(".")[:2]) != minor)
    hint = (f"; a pair run with libfabric {have}.x: nccl: {{version: {same[0].nccl}, plugin:"
            f" {same[0].plugin}}} ({same[0].label})"
            if same else f"; no vouched pair was run with libfabric {have}.x")
    return [(f"libfabric {found.group(1)}{found.group(2)}: NCCL {chosen.nccl} with"
             f" aws-ofi-nccl {chosen.plugin} was {chosen.label}"
             f", and no source vouches for it with libfabric"
             f" {have}.x{hint} (docs/design.md)")]


def _launch_errors(data: dict[str, Any]) -> list[tuple[tuple, str]]:
    """``launch`` (what starts the ranks) where it cannot apply.

    It is Slurm's choice only: PBS sites launch with HPE PALS ``mpiexec`` and
    ``launcher: mpiexec`` is the MPI's own launcher already.  A runtime value
    that needs an srun flag (HPE's alt_read, fabric data ``launcher_flags``)
    cannot be passed by mpirun/mpiexec.
    """
    launch = data.get("launch")
    if launch is None:
        return []
    if data.get("launcher") != "slurm":
        return [(("launch",), (
            f"{launch!r} says what starts the ranks in a Slurm allocation, and launcher is"
            f" {data.get('launcher')}; allowed: no launch key (launcher pbs: PALS mpiexec;"
            " mpiexec: the MPI's own), or launcher: slurm"))]
    if launch == "srun":
        return []
    env = runtime.environment(data)
    for rule in runtime.launcher_flags():
        if env.get(rule["variable"]) == rule["value"]:
            return [(("launch",), (
                f"{launch}: {rule['variable']}={rule['value']} needs `{rule['slurm_flag']}`"
                f" ({rule['source']}), which {launch} cannot pass; allowed: launch: srun, or"
                f" a site without {rule['variable']}={rule['value']}"))]
    return []


def _semantic_errors(data: dict[str, Any], build_rules: bool = True,
                     ) -> list[tuple[tuple, str]]:
    """Rules that read better in code than in JSON schema.

    ``build_rules``: also the rules about what Spack will build (vouched pairs,
    torch releases, CUDA ranges), which read the package repositories; an
    installed tool has none of them and needs only the site's runtime.
    """
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
    if build_rules and nccl and data.get("fabric") == "slingshot":  # not after a solve
        unvouched = pairs.problem(nccl)
        if unvouched:
            errors.append(unvouched)
    switch = runtime.cray_gpu_switch(data)
    stated = (data.get("runtime") or {}).get("env", {}).get(runtime.GPU_SWITCH)
    if switch is not None and stated is not None and str(stated) != switch:
        gtl = "loads Cray's GTL" if switch == "1" else "loads no GTL"
        errors.append((("runtime", "env", runtime.GPU_SWITCH), (
            f"must be {switch} here: mpi.cuda_aware is {str(switch == '1').lower()}, so torch"
            f" {gtl}; the switch and GTL go together or not at all (to run without GPU-aware"
            " MPI, e.g. for CSCS's MPI-with-NCCL deadlock warning, set mpi.cuda_aware: false)")))
    errors.extend(_launch_errors(data))
    errors.extend(siterules.runtime_problems(data))  # MPI variants, container runtime
    errors.extend(runtime.problems(data))  # `$` references, set-and-prepend
    if build_rules:
        errors.extend(siterules.problems(data))  # what a solve or a build would find late
        errors.extend(torches.problems(data))  # torch releases the site may not choose
    if local:
        return errors
    for key in auto_keys(data):
        msg = ("'auto' (host detection) is only for the local site;"
               " a site file states what its compute nodes are")
        errors.append((tuple(key.split(".")), msg))
    return errors


#: Top-level keys required by another key's value, reported at that key's
#: line: the top-level mapping's own position is the file's first key (`name:`),
#: which says nothing about why the key is needed.
_REQUIRED_BY = {("libfabric",): ("fabric",), ("gpu",): ("fabric",)}


def _where(lines: dict, key_path: tuple) -> tuple[int, int]:
    """The line and column to report ``key_path`` at (a missing key: its parent's).

    A missing top-level key has the file itself as its parent: reported at
    1:1, the start of the document, since the top-level mapping starts at the
    first key (often ``name:``, after the header comments), and a message at
    that line reads as a problem with that key.
    """
    if key_path not in lines and key_path in _REQUIRED_BY:
        return _nearest(lines, _REQUIRED_BY[key_path])
    if len(key_path) == 1 and key_path not in lines:
        return (1, 1)
    return _nearest(lines, key_path)


def validate(path: Path, data: dict[str, Any], lines: dict, build_rules: bool = True) -> None:
    """Raise one UserError listing every problem, each with file:line:column and key path."""
    validator = _Validator(_schema())
    problems = [_describe(e) for e in validator.iter_errors(data)]
    if not problems:
        problems = _semantic_errors(data, build_rules)
    if data.get("name") not in (None, path.stem) and not problems:
        msg = (f"name {data['name']!r} differs from the file name {path.stem!r};"
               " allowed: the file name without .yaml")
        problems = [(("name",), msg)]
    if not problems:
        return
    out = []
    unique = sorted(set(problems), key=lambda p: (_where(lines, p[0]), p[1]))
    for key_path, msg in unique:
        line, column = _where(lines, key_path)
        out.append(f"{path}:{line}:{column}: {_fmt_path(key_path)}: {msg}")
    raise UserError("invalid site file\n  " + "\n  ".join(out))


def load(name_or_path: str, build_rules: bool = True) -> Site:
    """Find, read, parse and validate a site; for ``local`` fill in detected host facts.

    ``build_rules=False`` is for the doctor of an installed tool: it skips the rules
    that read the package repositories (render and concretize apply them).
    """
    path = resolve(name_or_path)
    data, lines, raw = parse(path)
    validate(path, data, lines, build_rules)
    site = Site(name=data["name"], path=path, data=data, raw=raw)
    if auto_keys(data):
        detect.fill_in(site)
    return site
