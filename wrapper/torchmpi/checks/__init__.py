"""Every check of a site file, in one place: one module per concern.

:func:`validate` is what the loader (:func:`torchmpi.site.load`) calls: the
JSON schema first (:mod:`~torchmpi.checks.schema`), then, on a file the schema
accepts, the rules a schema cannot say well, each module answering for the
keys its name says:

=================  ==========================================================
``targets``        ``target`` and each compiler's target: archspec names
``compilers``      compiler versions against their paths, targets against the site's
``gpu``            ``gpu.cuda_arch`` against the GPU model, Cray's GTL and CUDA
``mpi``            ``mpi``: kind, version, a centre's variants, Cray's GPU switch
``network``        ``fabric``, ``libfabric`` and the ``nccl`` pin (vouched pairs)
``launch``         ``launch`` against the launcher and the runtime values
``runtime``        ``runtime`` values the renderings cannot carry
``uenv``           ``uenv`` and the prefixes under its mount point
``container``      ``container.runtime`` against the site's MPI and fabric
``torch_versions`` ``torch.versions`` against builtin py-torch and the site's CUDA
=================  ==========================================================

Each module's ``problems(data, build)`` returns ``(key path, message)``
pairs; ``build`` adds the rules about what Spack will build, which read the
package repositories (an installed tool's doctor has none of them).  Every
refusal reaches the admin as ``file:line:column: key: message`` with what is
allowed.  Reading the file (YAML, duplicate keys, encoding) is
:mod:`torchmpi.sitefile`; which keys may say ``auto`` is
:mod:`torchmpi.autokeys`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from torchmpi import gpuvendor
from torchmpi.autokeys import LOCAL, auto_keys
from torchmpi.checks import (
    compilers,
    container,
    gpu,
    launch,
    mpi,
    network,
    runtime,
    targets,
    torch_versions,
    uenv,
)
from torchmpi.checks.common import Problem
from torchmpi.checks.schema import Validator, describe, fill_defaults, site_schema
from torchmpi.errors import UserError
from torchmpi.sitefile import _fmt_path, _nearest

#: The rule modules, each answering for the keys its name says.
RULES = (targets, compilers, gpu, mpi, network, launch, runtime, uenv, container,
         torch_versions, gpuvendor)


def _auto(data: dict[str, Any]) -> list[Problem]:
    """``auto`` (host detection) anywhere but the local site."""
    if data.get("name") == LOCAL:
        return []
    msg = ("'auto' (host detection) is only for the local site;"
           " a site file states what its compute nodes are")
    return [(tuple(key.split(".")), msg) for key in auto_keys(data)]


def problems(data: dict[str, Any], build: bool = True) -> list[Problem]:
    """Every rule of every module on schema-valid ``data``.

    ``build``: also the rules about what Spack will build (vouched pairs,
    torch releases, CUDA ranges), which read the package repositories; an
    installed tool has none of them and needs only the site's runtime.
    """
    out: list[Problem] = []
    for module in RULES:
        out.extend(module.problems(data, build))
    return out + _auto(data)


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


def refusal(path: Path, lines: dict, key_path: tuple, msg: str) -> UserError:
    """One refusal worded as :func:`validate` words each: ``file:line:column: key: msg``."""
    line, column = _where(lines, key_path)
    return UserError(f"{path}:{line}:{column}: {_fmt_path(key_path)}: {msg}")


def refusals(path: Path, lines: dict, found: list[Problem],
             what: str = "invalid site file") -> UserError:
    """Every problem at once, in file order, each as ``file:line:column: key: msg``.

    :func:`validate` raises it for what every verb refuses; ``torchmpi container``
    for what only it needs (:func:`torchmpi.checks.container.for_container_verb`),
    so the admin gets each key's line either way.
    """
    unique = sorted(set(found), key=lambda p: (_where(lines, p[0]), p[1]))
    out = []
    for key_path, msg in unique:
        line, column = _where(lines, key_path)
        out.append(f"{path}:{line}:{column}: {_fmt_path(key_path)}: {msg}")
    return UserError(f"{what}\n  " + "\n  ".join(out))


def validate(path: Path, data: dict[str, Any], lines: dict, build_rules: bool = True) -> None:
    """Raise one UserError listing every problem, each with file:line:column and key path.

    On a file the schema accepts, the schema's defaults are filled in (in place)
    before the rules run, so a rule reads ``mpi.cuda_aware`` as every producer does.
    """
    validator = Validator(site_schema())
    found = [describe(e) for e in validator.iter_errors(data)]
    if not found:
        fill_defaults(data)
        found = problems(data, build_rules)
    if data.get("name") not in (None, path.stem) and not found:
        msg = (f"name {data['name']!r} differs from the file name {path.stem!r};"
               " allowed: the file name without .yaml")
        found = [(("name",), msg)]
    if found:
        raise refusals(path, lines, found)
