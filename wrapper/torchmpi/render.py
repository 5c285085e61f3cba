"""Render a site into a Spack environment directory, deterministically.

The files are built as data (:mod:`torchmpi.spackenv`, :mod:`torchmpi.modules`,
:mod:`torchmpi.runtimesh`) and written with a YAML emitter and
:func:`shlex.quote`; free text reaches only comment lines, escaped
(:mod:`torchmpi.yamltext`).  This module only puts the four bodies together:
each YAML body must load back to the data it was built from, and the writer
(:mod:`torchmpi.output`) parses every file back by its format (runtime.sh:
``bash -n``), adds the provenance header and owns the write policy (hand-edit
and foreign-site refusal, all or none), as for ``container`` and ``reframe``.
"""

from __future__ import annotations

from pathlib import Path

from torchmpi import modules as modmod
from torchmpi import output, runtimesh, spackenv
from torchmpi.site import Site
from torchmpi.yamltext import document

#: Rendered files, in the order they are written and diffed.
FILES = ("spack.yaml", "packages.yaml", "modules.yaml", runtimesh.NAME)


def bodies(site: Site, outdir: Path) -> dict[str, str]:
    """File name -> body (below the header); each YAML body loads back to its data."""
    return {"spack.yaml": document(*spackenv.spack_yaml(site, outdir), "spack.yaml"),
            "packages.yaml": document(*spackenv.packages_yaml(site), "packages.yaml"),
            "modules.yaml": document(*modmod.parts(site), "modules.yaml"),
            runtimesh.NAME: runtimesh.body(site)}


def render(site: Site, outdir: Path) -> dict[str, str]:
    """File name -> full text (header + body) for one site, each parsed back."""
    return output.assemble("render", site, bodies(site, outdir))
