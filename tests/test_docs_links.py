"""Every relative link and image in the README, docs/ and the environment cards points at a file in the repository
(the screenshots under docs/img/ included)."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")), *sorted(ROOT.glob("environments/*/README.md"))]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: str(page.relative_to(ROOT)))
def test_relative_links_and_images_resolve(page):
    targets = re.findall(r"!?\[[^\]]*\]\(([^)\s]+)\)", page.read_text(encoding="utf-8"))
    local = [t for t in targets if not re.match(r"[a-z]+:", t) and not t.startswith("#")]
    missing = [t for t in local if not (page.parent / t.split("#")[0]).exists()]
    assert not missing, f"{page.relative_to(ROOT)} links to files that do not exist: {missing}"


def test_the_viewer_and_curve_screenshots_are_shown():
    shown = {Path(t).name for page in PAGES for t in re.findall(r"!\[[^\]]*\]\(([^)\s]+)\)", page.read_text())}
    for image in (ROOT / "docs" / "img").glob("*.png"):
        assert image.name in shown, f"docs/img/{image.name} is committed but no page shows it"
        assert image.stat().st_size < 300_000, image.name
