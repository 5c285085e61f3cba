"""One parse-back per format: the check every written file passes before it may replace one.

torchmpi writes YAML (Spack environments, the podman-hpc module), TOML (the CE
EDF), shell (runtime.sh, the container wrappers, run-checks.sh), Python
(ReFrame's settings.py), INI (a venv's pip.conf) and pip constraints (its
constraints.txt).  Each is built from data, and each is read back with
the reader its consumer uses -- PyYAML's safe loader (the same dumper's
counterpart), :mod:`tomllib`, ``bash -n``, :mod:`ast` -- and, where the data is
known, compared with it.  A text that fails is a bug in torchmpi, never bad
input, so the failure is an :class:`~torchmpi.errors.InternalError` and nothing
is written.

:func:`check` picks the reader from the file name (:data:`FORMATS`), so the
writer (:mod:`torchmpi.output`) runs the one check of each file's format
whichever verb built it.
"""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
from collections.abc import Callable
from typing import Any

import yaml

from torchmpi.errors import InternalError

#: Said after every parse-back failure: what happened to the files, and whose fault it is.
_NOTHING = "nothing was written (a torchmpi bug, please report it)"


def _loads_back(text: str, expected: Any, name: str, loads: Callable[[str], Any],
                error: type[Exception], unparsed: str) -> None:
    """``loads`` must read the text (``error`` otherwise: "the rendered ``unparsed``")
    and, unless ``expected`` is None, give exactly it: YAML and TOML alike."""
    try:
        parsed = loads(text)
    except error as err:
        raise InternalError(f"{name}: the rendered {unparsed} ({err}); {_NOTHING}") from None
    if expected is not None and parsed != expected:
        raise InternalError(f"{name}: the rendered text does not load back to the data it was"
                            f" built from; {_NOTHING}")


#: libyaml's parser where PyYAML was built with it (PyPI's wheels are), else PyYAML's own:
#: both feed the same safe constructor and resolver, and libyaml reads a rendered
#: spack.yaml about ten times faster (0.2 ms against 2.3), once per file every render.
SAFE_LOADER: type = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


def _yaml_loads(text: str) -> Any:
    return yaml.load(text, Loader=SAFE_LOADER)  # a safe loader: see SAFE_LOADER


def yaml_text(text: str, expected: Any, name: str) -> None:
    """The text must be YAML and, unless ``expected`` is None, load to exactly it."""
    _loads_back(text, expected, name, _yaml_loads, yaml.YAMLError, "text is not valid YAML")


def toml_text(text: str, expected: Any, name: str) -> None:
    """The text must be TOML (:mod:`tomllib`, as CE reads an EDF) and load to ``expected``."""
    import tomllib

    _loads_back(text, expected, name, tomllib.loads, tomllib.TOMLDecodeError,
                "TOML does not parse")


def shell_text(text: str, expected: Any, name: str) -> None:
    """``bash -n``: the script must at least parse (skipped where there is no bash).

    ``expected`` is unused: a shell file has no data to load back to.
    """
    bash = shutil.which("bash")
    if not bash:
        return
    proc = subprocess.run([bash, "-n"], input=text, capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise InternalError(f"{name}: the rendered text does not parse"
                            f" ({proc.stderr.strip()}); {_NOTHING}")


def python_text(text: str, expected: dict[str, Any] | None, name: str) -> None:
    """The text must compile; each ``NAME = literal`` named in ``expected`` must be its value.

    :func:`ast.literal_eval`, not an import: the file is checked without running it.
    """
    try:
        tree = ast.parse(text)
        found = {target.id: node.value for node in tree.body if isinstance(node, ast.Assign)
                 for target in node.targets if isinstance(target, ast.Name)}
        loaded = {var: ast.literal_eval(found[var]) for var in (expected or {})}
    except (SyntaxError, ValueError, KeyError) as err:
        raise InternalError(f"{name}: the written text does not parse back ({err}); {_NOTHING}"
                            ) from None
    if expected is not None and loaded != expected:
        raise InternalError(f"{name}: the written text does not load back to its data;"
                            f" {_NOTHING}")


def ini_text(text: str, expected: dict[str, dict[str, str]] | None, name: str) -> None:
    """An INI file as pip reads its ``pip.conf`` (:class:`configparser.RawConfigParser`);
    ``expected`` maps each section to its keys and values."""
    import configparser

    def loads(text: str) -> dict[str, dict[str, str]]:
        parser = configparser.RawConfigParser()
        parser.read_string(text)
        return {section: dict(parser.items(section)) for section in parser.sections()}

    _loads_back(text, expected, name, loads, configparser.Error, "INI text does not parse")


def pins_text(text: str, expected: dict[str, str] | None, name: str) -> None:
    """A pip constraints file as ``torchmpi venv`` writes it: comments and one
    ``name==version`` per line; ``expected`` maps each name to its version."""
    pins = {}
    for line in text.splitlines():
        if line.startswith("#") or not line:
            continue
        pin = re.fullmatch(r"([A-Za-z0-9][A-Za-z0-9._-]*)==([0-9A-Za-z.!]+)", line)
        if not pin:
            raise InternalError(f"{name}: the written line {line!r} is not one `name==version`"
                                f" pin; {_NOTHING}")
        pins[pin.group(1)] = pin.group(2)
    if expected is not None and pins != expected:
        raise InternalError(f"{name}: the written text does not load back to the pins it was"
                            f" built from; {_NOTHING}")


#: File-name suffix -> its format's parse-back.  A file of another format (the
#: Containerfile) is checked by the module that knows its grammar.
FORMATS: dict[str, Callable[[str, Any, str], None]] = {
    ".yaml": yaml_text,
    ".yml": yaml_text,
    ".toml": toml_text,
    ".sh": shell_text,
    ".py": python_text,
    ".conf": ini_text,
    ".txt": pins_text,
}


def check(name: str, text: str, expected: Any = None) -> None:
    """Run the parse-back of ``name``'s format on ``text`` (nothing for an unknown format)."""
    for suffix, reader in FORMATS.items():
        if name.endswith(suffix):
            reader(text, expected, name)
            return
