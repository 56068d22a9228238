"""The README and the pages under docs/: short, linked, and true to the Makefile.

The README is what a newcomer reads in three minutes; what it leaves out lives in docs/ (getting
started, instructors, testing, findings, contributing). These checks keep it that way: its length,
the licence, citation and changelog files beside it, every relative link and anchor resolving, and
every `make <target>` the pages name being a target of the Makefile.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
README_MAX_LINES = 150


def _slug(heading: str) -> str:
    """A heading's anchor as GitHub and MyST (myst_heading_anchors) make it."""
    text = re.sub(r"[`*]", "", heading.strip().lower())
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def _anchors(page: Path) -> set[str]:
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    return {_slug(m) for m in re.findall(r"^#{1,6} (.+)$", text, re.M)}


def test_the_readme_is_short_and_has_its_companions():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= README_MAX_LINES, f"README.md has {len(lines)} lines; docs/ takes the rest"
    for name in ("LICENSE", "CITATION.cff", "CHANGELOG.md"):
        assert (REPO / name).is_file(), name
    assert "MIT License" in (REPO / "LICENSE").read_text() and "CC BY 4.0" in (REPO / "LICENSE").read_text()
    for page in ("getting-started", "instructors", "testing", "findings"):
        assert (REPO / "docs" / f"{page}.md").is_file(), page


def test_the_citation_file_is_cff_1_2_0():
    cff = yaml.safe_load((REPO / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    assert {"authors", "cff-version", "message", "title"} <= set(cff)
    assert cff["authors"] == [{"name": "The large-batch course contributors"}]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_relative_link_and_anchor_resolves(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)
    bad = []
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target):
            continue  # a web address: not checked offline
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            bad.append(f"{target}: no {path}")
        elif anchor and anchor not in _anchors(dest):
            bad.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not bad, bad


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_every_make_target_a_page_names_is_in_the_makefile(page):
    targets = set(re.findall(r"^([a-z][\w-]*):", (REPO / "Makefile").read_text(), re.M))
    named = set(re.findall(r"`(?:[A-Z_]+=\S+ )*make ([a-z][\w-]*)", page.read_text()))
    assert named <= targets, f"{page.name} names make targets the Makefile lacks: {sorted(named - targets)}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.relative_to(REPO).as_posix())
def test_the_pages_keep_no_run_log(page):
    """History lives in the commit messages and CHANGELOG.md: no dated runs, commit ids or temp paths."""
    text = page.read_text()
    assert not re.findall(r"\b20\d\d-\d\d-\d\d\b", text), "a dated run"
    assert not re.findall(r"(?<![\w/.#-])/tmp/", text), "a /tmp path"
    assert not re.findall(r"(?:fresh clone of|at|in) `[0-9a-f]{7,40}`", text), "a commit id"
