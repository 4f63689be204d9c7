"""The README is a front door and the user guide under docs/ is whole (issue 34): the README
stays short, every guide page is in the site's nav, and every relative link of the README
and the guide leads to a file (and heading) that exists, on GitHub and in the built site.

``mkdocs build --strict`` (.ci/run) checks the site's own links too; these tests need no
MkDocs, so they fail where a page is added or renamed, before CI builds anything."""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

import pytest
import yaml
from conftest import REPO
from tools import readme_examples as docs

README = REPO / "README.md"
DOCS = REPO / "docs"
MAX_README_LINES = 300
CI = REPO / ".ci" / "run"

_FENCE = re.compile(r"^\s*(```+|~~~+)")
_CODE_SPAN = re.compile(r"(`+).*?\1")
_LINK = re.compile(r"!?\[(?:[^\]\\]|\\.)*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def prose_lines(text: str) -> list[str]:
    """The lines outside fenced blocks, with inline code removed: where links can be."""
    lines, fence = [], None
    for line in text.splitlines():
        opening = _FENCE.match(line)
        if opening and (fence is None or opening.group(1).startswith(fence)):
            fence = None if fence else opening.group(1)
            continue
        if fence is None:
            lines.append(_CODE_SPAN.sub("", line))
    return lines


def links(text: str) -> list[str]:
    """Every link target of a Markdown text, outside code."""
    return [match.group(1) for line in prose_lines(text) for match in _LINK.finditer(line)]


def github_slug(heading: str) -> str:
    """A heading's anchor on GitHub: lower case, punctuation dropped, each space a hyphen."""
    text = _CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def mkdocs_slug(heading: str) -> str:
    """A heading's anchor in the site: Python-Markdown's toc.slugify (ASCII, runs of spaces
    and hyphens one hyphen)."""
    text = _CODE_SPAN.sub(lambda m: m.group(0).strip("`"), heading)
    text = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode("ascii")
    return re.sub(r"[-\s]+", "-", re.sub(r"[^\w\s-]", "", text).strip().lower())


def anchors(path: Path) -> set[str]:
    """The anchors a page's headings get both on GitHub and in the site (a link must work in
    both)."""
    headings = [m.group(2) for line in prose_lines(path.read_text(encoding="utf-8")) for m in [_HEADING.match(line)] if m]
    return {github_slug(h) for h in headings} & {mkdocs_slug(h) for h in headings}


def nav_pages(nav: object) -> list[str]:
    """The files of mkdocs.yml's nav, at any depth."""
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, list):
        return [page for entry in nav for page in nav_pages(entry)]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in nav_pages(value)]
    return []


def link_problem(page: Path, target: str) -> str | None:
    """Why a link of `page` leads nowhere (None: it leads to a file, and heading, that exist)."""
    if re.match(r"^[a-z][a-z0-9+.-]*:", target):
        return None  # https:, mailto: — not ours to check
    path_part, _, anchor = target.partition("#")
    if target.startswith("/"):
        return f"{target}: absolute (write it relative to {page.name}'s folder)"
    resolved = (page.parent / path_part).resolve() if path_part else page.resolve()
    if not resolved.exists():
        return f"{target}: no such file"
    if page.parent == DOCS and not resolved.is_relative_to(DOCS):
        return f"{target}: outside docs/, which the site does not hold"
    if anchor and resolved.suffix == ".md" and anchor not in anchors(resolved):
        return f"{target}: no heading gives #{anchor} both on GitHub and in the site"
    return None


def test_the_readme_is_at_most_300_lines():
    assert len(README.read_text(encoding="utf-8").splitlines()) <= MAX_README_LINES


def test_every_guide_page_is_in_the_nav_and_every_nav_entry_is_a_page():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = nav_pages(config["nav"])
    on_disk = sorted(path.name for path in DOCS.glob("*.md"))
    assert sorted(in_nav) == on_disk
    assert in_nav[0] == "index.md"


def test_the_site_fails_on_a_broken_link_anchor_or_page_left_out():
    config = yaml.safe_load((REPO / "mkdocs.yml").read_text(encoding="utf-8"))
    assert config["strict"] is True and config["theme"]["name"] == "material"
    assert config["validation"]["links"]["not_found"] == "warn" and config["validation"]["links"]["anchors"] == "warn"
    assert config["validation"]["nav"]["omitted_files"] == "warn"


@pytest.mark.parametrize("page", docs.documented_pages(), ids=docs.page_name)
def test_every_relative_link_leads_to_a_file_and_heading_that_exist(page):
    problems = [problem for target in links(page.read_text(encoding="utf-8")) for problem in [link_problem(page, target)] if problem]
    assert not problems, f"{docs.page_name(page)}: " + "; ".join(problems)


def test_the_readme_links_every_guide_page_as_docs_slash_name():
    targets = set(links(README.read_text(encoding="utf-8")))
    assert {f"docs/{path.name}" for path in DOCS.glob("*.md")} <= targets


def test_ci_runs_the_readmes_test_command_then_builds_the_site_strictly_outside_the_checkout():
    readme = README.read_text(encoding="utf-8")
    command = ".venv/bin/python -m pytest"
    assert f"&& {command}\n" in readme
    lines = [line.strip() for line in CI.read_text(encoding="utf-8").splitlines()]
    assert command in lines
    build = [line for line in lines if ".venv/bin/mkdocs build" in line]
    assert build == ['NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --site-dir "$(mktemp -d)"']
    assert "pip install -q -e '.[docs]'" in CI.read_text(encoding="utf-8")
    assert lines.index(command) < lines.index(build[0])


# ---- the checker itself ---------------------------------------------------------------------


def test_links_in_code_are_not_links():
    text = "see [a](a.md) and `[b](b.md)`\n```\n[c](c.md)\n```\n[d](d.md#x)\n"
    assert links(text) == ["a.md", "d.md#x"]


def test_a_missing_page_an_outside_file_and_a_missing_anchor_are_named(tmp_path):
    assert link_problem(DOCS / "index.md", "nope.md") == "nope.md: no such file"
    assert link_problem(DOCS / "index.md", "../README.md") == "../README.md: outside docs/, which the site does not hold"
    assert link_problem(DOCS / "index.md", "fit.md#no-such-heading") == "fit.md#no-such-heading: no heading gives #no-such-heading both on GitHub and in the site"
    assert link_problem(README, "docs/fit.md") is None
    assert link_problem(README, "https://example.com/x.md") is None


def test_an_anchor_must_be_the_same_on_github_and_in_the_site():
    assert github_slug("Memory for any input") == mkdocs_slug("Memory for any input") == "memory-for-any-input"
    assert github_slug("GPU mode (`--device`)") == "gpu-mode---device"
    assert mkdocs_slug("GPU mode (`--device`)") == "gpu-mode-device"
