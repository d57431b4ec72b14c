"""The README and docs/ stay inside the repository: every relative link resolves to a file in it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_stay_in_the_repository(page):
    for target in LINK.findall(page.read_text()):
        if target.startswith(("https://", "http://", "#", "mailto:")):
            continue
        resolved = (page.parent / target.split("#")[0]).resolve()
        assert resolved.is_relative_to(REPO), f"{page.name} links outside the repository: {target}"
        assert resolved.exists(), f"{page.name} links to a missing file: {target}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_no_page_names_a_folder_outside_the_repository(page):
    assert "shared/design" not in page.read_text()
