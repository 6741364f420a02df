"""The HTML export of trajectories, rendered in a real headless browser."""

import shutil
import subprocess

import pytest
from test_store import make_trajectory

from trl_starpo.html_export import trajectories_html, write_html, write_store_html
from trl_starpo.store import TrajectoryStore

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")


def hostile_trajectory():
    t = make_trajectory(0)
    t.turns[0].thinking = "<script>document.title='pwned'</script> plan"
    t.turns[0].actions = ["<img src=x onerror=alert(1)>"]
    return t


def test_page_shows_each_part_in_its_own_style_and_escapes_model_output():
    page = trajectories_html([hostile_trajectory(), make_trajectory(1)], title="Counter <run>")
    assert page.startswith("<!DOCTYPE html>") and "<title>Counter &lt;run&gt;</title>" in page
    assert "<script>" not in page and "&lt;script&gt;" in page and "<img" not in page
    for css_class in ("observation", "thinking", "action", "malformed", "reward", "badge success", "badge failure"):
        assert f'class="{css_class}' in page
    assert "2 trajectories · success 1/2" in page
    assert "return +0.300" in page and "reward -0.100" in page and "reward +0.400" in page


def test_sampling_is_seeded_and_labels_come_from_the_store(tmp_path):
    store = TrajectoryStore()
    store.add([make_trajectory(i) for i in range(6)], step=3, environment="counter")
    first = write_store_html(store, tmp_path / "a.html", sample=3, seed=1).read_text()
    again = write_store_html(store, tmp_path / "b.html", sample=3, seed=1).read_text()
    assert first == again and first.count('<section class="trajectory') == 3
    assert "counter · task" in first and "step 3" in first
    assert write_html([], tmp_path / "empty.html").read_text().count("<section") == 0


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


@pytest.mark.skipif(_browser() is None, reason="no headless Chromium (apt-get install chromium-headless-shell)")
def test_page_renders_in_a_headless_browser(tmp_path):
    from PIL import Image

    page = write_html([hostile_trajectory(), make_trajectory(1)], tmp_path / "page.html")
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={shot}",
         "--window-size=1000,900", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 5000, done.stderr
    image = Image.open(shot).convert("RGB")
    assert image.size == (1000, 900)
    colors = image.getcolors(maxcolors=1 << 16)
    assert colors is None or len(colors) > 50  # text and styled boxes, not a blank page
    # The success card's green border and the failure card's red one are drawn.
    pixels = set(image.getdata())
    assert (0x2E, 0x9D, 0x57) in pixels and (0xC9, 0x38, 0x3A) in pixels
