"""modules.yaml of a site: module layout, built as data.

The py-torch-mpi module's ``environment`` is :func:`torchmpi.runtime.resolve`,
the one mapping runtime.sh and spack.yaml ``env_vars`` render too.
"""

from __future__ import annotations

from typing import Any

from torchmpi import runtime
from torchmpi.site import Site
from torchmpi.yamltext import Block, Part, comment


def projections(system: str, several_torches: bool = False) -> dict[str, str]:
    """Readable module names, no hashes: ``py-torch-mpi/2.9.1-cuda12.2.1``.

    The torch version names py-torch-mpi (its own version is the bundle's).
    Tcl has no hierarchy, so there the MPI is part of the name.  Order matters:
    Spack uses the first key a spec satisfies.
    With several torch releases (site key ``torch``), every other package
    built on torch (py-torchvision, ...) exists once per release: its name
    carries the torch version too, or two module files would have one name.
    """
    suffix = "-{^mpi.name}" if system == "tcl" else ""
    out = {
        "py-torch-mpi+cuda": "{name}/{^py-torch.version}-cuda{^cuda.version}" + suffix,
        "py-torch-mpi": "{name}/{^py-torch.version}" + suffix,
    }
    if several_torches:
        out["^py-torch"] = "{name}/{version}-torch{^py-torch.version}" + suffix
    out["all"] = "{name}/{version}"
    return out


def system(data: dict[str, Any]) -> str:
    return (data.get("install") or {}).get("module_system", "lmod")


def centre_mpi_modules(data: dict[str, Any]) -> list[str]:
    """The centre's own MPI modules (the site file's ``mpi.modules``), or none.

    Where the centre provides the MPI as a module (Cray PE's ``cray-mpich/<v>``,
    loaded by default on NCAR's Derecho), a module of the same name from this
    tree would shadow it: NCAR excludes cray-mpich from its own Spack modules
    (NCAR/spack-derecho config/modules.yaml, ``exclude: [cray-mpich, ...]``).
    Then the tree has no MPI module and no MPI layer, and py-torch-mpi loads
    the centre's module by name (Lmod ``depends_on``: a no-op when it is
    already loaded, a swap when another version is).
    """
    mpi = data.get("mpi") or {}
    return [str(m) for m in mpi.get("modules") or []]


def config(data: dict[str, Any]) -> dict[str, Any]:
    """The ``<system>:`` mapping under ``modules: default:``."""
    system_ = system(data)
    centre = centre_mpi_modules(data)
    out: dict[str, Any] = {}
    if system_ == "lmod":
        compilers = data["compilers"] if isinstance(data["compilers"], list) else []
        out["core_compilers"] = [c["spec"] for c in compilers]
        if centre:
            # `hierarchy::` (quoted key 'hierarchy:'): an empty list would merge
            # with Spack's default [mpi] (etc/spack/defaults/base/modules.yaml).
            out["hierarchy:"] = []
        else:
            out["hierarchy"] = ["mpi"]
    if centre:
        out["exclude"] = [data["mpi"]["kind"]]
    out["hash_length"] = 0
    out["hide_implicits"] = True
    out["all"] = {"autoload": "direct"}
    several = len((data.get("torch") or {}).get("versions") or []) > 1
    out["projections"] = projections(system_, several)
    torch: dict[str, Any] = {}
    env = runtime.resolve(data).spack()
    if env:
        torch["environment"] = env
    if centre:
        torch["load"] = centre
    if torch:
        out["py-torch-mpi"] = torch
    return out


def parts(site: Site) -> tuple[list[Part], dict[str, Any]]:
    """The modules.yaml text parts and the data they must load back to."""
    data = site.data
    system_ = system(data)
    mpi = data["mpi"]
    centre = centre_mpi_modules(data)
    hint = mpi["kind"] + (f"/{mpi['version']}" if mpi.get("version") else "")
    if centre:
        hint = f"the centre's {' '.join(centre)}, which it loads itself"
    elif system_ == "lmod":
        hint = f"module load {hint}"
    else:
        hint = f"built against {hint}"
    root = (data.get("install") or {}).get("modules_root")
    default: dict[str, Any] = {}
    if root:
        default["roots"] = {system_: root}
    # `enable::` (quoted key 'enable:') replaces the lower scopes' list.
    default["enable:"] = [system_]
    default[system_] = config(data)
    expected = {"modules": {"default": default}}
    text: list[Part] = [
        comment(
            f"Module files for '{site.name}' ({system_}).  One module a user picks:",
            f"py-torch-mpi, {'on' if centre else 'under'} the site's MPI ({hint}).",
            "Its `environment` is the site's runtime variables (fabric defaults and",
            "`runtime` of the site file), the same spack.yaml's `env_vars` gives",
            "`spack env activate`; it is applied after the autoloaded dependencies'",
            "package defaults, so the site wins (docs/admins.md).",
            "`enable:` (Spack's `enable::`) replaces the lower scopes' list.",
        ),
    ]
    if centre:
        text.append(comment(
            f"exclude: no {mpi['kind']} module of this tree shadows the centre's;",
            "py-torch-mpi's `load` names the centre's module (NCAR's own Spack",
            "modules exclude cray-mpich the same way).",
        ))
    if system_ == "lmod":
        layer = ("hierarchy: none, the centre's MPI module opens no layer of this tree."
                 if centre else "hierarchy: py-torch-mpi appears after its MPI module is loaded.")
        text.append(comment(
            "core_compilers is explicit, or Spack guesses and rewrites the file;",
            layer,
            "hide_implicits: dependencies get modules (autoload needs them) but",
            "`module avail` hides them.",
        ))
    text.append(Block(expected))
    return text, expected
