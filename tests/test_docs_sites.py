"""Docs that list sites, or point at things, stay true to the checkout."""

from __future__ import annotations

import re

from torchmpi import paths
from torchmpi import site as sitemod

DOCS = sorted((paths.root() / "docs").glob("*.md")) + [paths.root() / "README.md"]


def test_performance_table_lists_every_site() -> None:
    """docs/performance.md has one row per site file (a new site needs its figures)."""
    text = (paths.root() / "docs" / "performance.md").read_text()
    rows = re.findall(r"^\| ([a-z0-9][a-z0-9-]*)(?: \([^)]*\))? \|", text, re.MULTILINE)
    assert sorted(r for r in rows if r != "site") == sitemod.available()  # "site": header


def test_no_internal_issue_references() -> None:
    """A reader cannot resolve an internal issue number: docs, code and tests name the
    document or the behaviour instead (upstream threads, owner/repo#N, are fine)."""
    root = paths.root()
    code = [p for folder in ("wrapper", "spack_repo", "tests", "scripts", ".ci")
            for p in sorted((root / folder).rglob("*")) if p.is_file()
            and p.suffix in (".py", ".sh", ".md", ".yaml", ".json", ".cpp", "")
            and "__pycache__" not in p.parts and "nccl-logs" not in p.parts]
    for path in [*DOCS, *code, root / "Makefile", root / "requirements.txt"]:
        text = path.read_text(errors="replace")
        hits = re.findall(r"(?<![#/\w])\bissues? #?\d+", text, re.IGNORECASE)
        assert not hits, f"{path.relative_to(root)}: {hits}"


def test_docs_name_no_missing_checkout_directory() -> None:
    """Paths such as `templates/` or `wrapper/torchmpi/data/...` in the docs exist."""
    for doc in DOCS:
        for ref in re.findall(r"`((?:wrapper|scripts|templates|tests)"
                              r"/[A-Za-z0-9_./-]*)`", doc.read_text()):
            if re.search(r"<|[A-Z]{3,}", ref):  # a placeholder: <site>, SITE
                continue
            assert (paths.root() / ref).exists(), f"{doc.name}: `{ref}` does not exist"


def _schema_keys() -> list[tuple[str, ...]]:
    """Every key path of the site schema, e.g. ("gpu", "cuda", "buildable")."""
    import json

    schema = json.loads((paths.root() / "wrapper" / "torchmpi" / "schema"
                         / "site.schema.json").read_text())
    defs = schema.get("$defs") or schema.get("definitions") or {}
    out: list[tuple[str, ...]] = []

    def walk(node: object, path: tuple[str, ...], depth: int = 0) -> None:
        if not isinstance(node, dict) or depth > 8:
            return
        if "$ref" in node:
            walk(defs.get(node["$ref"].rsplit("/", 1)[-1]), path, depth + 1)
        for key, sub in (node.get("properties") or {}).items():
            out.append(path + (key,))
            walk(sub, path + (key,), depth + 1)
        for key in ("items", "oneOf", "anyOf", "allOf", "additionalProperties"):
            sub = node.get(key)
            for s in sub if isinstance(sub, list) else [sub]:
                walk(s, path, depth + 1)

    walk(schema, ())
    return sorted(set(out))


def _key_sections() -> dict[str, str]:
    """docs/sites.md "Every key": top-level key -> the text of its section."""
    text = (paths.root() / "docs" / "sites.md").read_text()
    body = text[text.index("## Every key"):]
    body = body[: body.index("\n## ", 3)]
    parts = re.split(r"^### `([a-z_]+)`.*$", body, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2]))


def test_every_schema_key_is_in_the_key_list() -> None:
    """Each top-level key has its `### key` section; each nested key is named (`key`)
    in its parent's section, or in `externals` for the shared external shape."""
    sections = _key_sections()
    keys = _schema_keys()
    assert ("os",) in keys and ("libc",) in keys and len(keys) > 40
    missing = []
    for path in keys:
        top, leaf = path[0], path[-1]
        if top not in sections:
            missing.append(top)
        elif len(path) > 1 and f"`{leaf}`" not in sections[top] + sections.get("externals", ""):
            missing.append(".".join(path))
    assert not missing, f"schema keys docs/sites.md's key list does not name: {missing}"
    extra = sorted(set(sections) - {p[0] for p in keys} - {"auto"})
    assert not extra, f"docs/sites.md documents keys the schema lacks: {extra}"


def test_one_statement_on_the_plugins_cuda_arch() -> None:
    """The docs agree: the aws-ofi-nccl plugin has no cuda_arch (no GPU code); no
    doc says it is built for the GPU architecture."""
    sites_md = (paths.root() / "docs" / "sites.md").read_text()
    design = (paths.root() / "docs" / "design.md").read_text()
    assert "plugin carries no `cuda_arch`" in sites_md
    assert "No\n`cuda_arch`: the plugin has no GPU code" in design
    for doc in DOCS:
        flat = " ".join(doc.read_text().split())
        assert not re.search(r"plugin (?:are|is) (?:all )?built for that architecture", flat), doc
    pkg = (paths.root() / "spack_repo" / "torchmpi" / "packages" / "aws_ofi_nccl"
           / "package.py").read_text()
    assert "cuda_arch" not in pkg and "CudaPackage" not in pkg


def test_admins_says_install_site_is_optional_and_where_it_writes() -> None:
    """`make install-site` is optional because each rendered environment names the
    repository; it writes into the `spack` on PATH, the shared cached one after
    setup-env.sh. The doc says both, and the facts behind them hold."""
    admins = " ".join((paths.root() / "docs" / "admins.md").read_text().split())
    assert "**Is it needed?** Not for §2" in admins
    assert "`$spack/etc/spack/site/repos.yaml`" in admins
    assert "shared cache" in admins and "every clone" in admins
    script = (paths.root() / "scripts" / "install-site.sh").read_text()
    assert 'spack="${SPACK:-spack}"' in script and 'scope="${1:-site}"' in script
    setup = (paths.root() / "scripts" / "paths.sh").read_text()
    assert 'TORCHMPI_CACHE/spack-$TORCHMPI_SPACK_TAG"' in setup
    import yaml

    for env in sorted((paths.root() / "environments").glob("*/spack.yaml")):
        repos = yaml.safe_load(env.read_text())["spack"]["repos"]
        targets = [(env.parent / r).resolve() for r in
                   (repos.values() if isinstance(repos, dict) else repos)]
        assert paths.torchmpi_repo().resolve() in targets, (env, repos)
