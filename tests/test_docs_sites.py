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
    """A reader cannot resolve "issue 5": docs name the document or the behaviour instead."""
    for doc in DOCS:
        hits = re.findall(r"\bissues? #?\d+", doc.read_text(), re.IGNORECASE)
        assert not hits, f"{doc.name}: {hits}"


def test_docs_name_no_missing_checkout_directory() -> None:
    """Paths such as `templates/` or `wrapper/torchmpi/data/...` in the docs exist."""
    for doc in DOCS:
        for ref in re.findall(r"`((?:wrapper|scripts|templates|tests)"
                              r"/[A-Za-z0-9_./-]*)`", doc.read_text()):
            if re.search(r"<|[A-Z]{3,}", ref):  # a placeholder: <site>, SITE
                continue
            assert (paths.root() / ref).exists(), f"{doc.name}: `{ref}` does not exist"
