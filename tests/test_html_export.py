"""The HTML viewer of trajectories: task groups side by side, what the filter kept, invalid actions, prompts and
tokens by segment; escaped throughout, and rendered in a real headless browser."""

import re
import shutil
import subprocess

import pytest
from test_store import make_trajectory

from trl_starpo.display.html_export import token_spans, trajectories_html, write_html, write_store_html
from trl_starpo.store import TrajectoryStore
from trl_starpo.trajectory import Segment, Trajectory, Turn

BROWSERS = ("chromium-headless-shell", "chromium", "chromium-browser", "google-chrome")
INJECTION = "<img src=x onerror=alert(1)>"


def hostile_trajectory():
    t = make_trajectory(0)
    t.turns[0].thinking = "<script>document.title='pwned'</script> plan"
    t.turns[0].actions = [INJECTION]
    t.task_id = INJECTION
    return t


def group_of_four():
    """Task group 5 at step 2: returns 1, 0, 0, 0; the filter dropped the last one; one invalid action."""
    trajectories = []
    for member, reward in enumerate((1.0, 0.0, 0.0, 0.0)):
        t = Trajectory(task_id="task-a", group=5, success=reward > 0, terminated=True)
        t.turns.append(Turn(observation="The counter is at 0.", response="r", thinking="go",
                            actions=["inc" if member != 2 else "jump"], reward=reward, format_ok=True,
                            num_valid_actions=0 if member == 2 else 1))
        t.advantage, t.kept = (1.5 if reward else -0.5), member != 3
        trajectories.append(t)
    return trajectories


def sections(page):
    return re.findall(r'<section class="group"', page)


def test_page_escapes_model_output_task_ids_groups_and_steps():
    hostile = hostile_trajectory()
    hostile.group = INJECTION  # a hand-built or hostile record: groups and steps are text like any other
    page = trajectories_html([hostile, make_trajectory(1)], title="Counter <run>", steps=[INJECTION, 3])
    assert page.startswith("<!DOCTYPE html>") and "<title>Counter &lt;run&gt;</title>" in page
    assert "<img" not in page and "document.title='pwned'" not in page
    assert page.count("&lt;img src=x onerror=alert(1)&gt;") >= 3  # the action, the task id, the group and step
    assert page.count("<script>") == 1  # the page's own filter script, nothing else
    for css_class in ("observation", "thinking", "action", "malformed", "reward", "badge success", "badge failure"):
        assert f'class="{css_class}' in page
    assert "2 trajectories in 2 task groups · success 1/2 (95% interval 0.09–0.91)" in page
    assert "return +0.300" in page and "reward -0.100" in page and "reward +0.400" in page


def test_a_group_side_by_side_with_returns_advantages_and_the_filters_verdict():
    page = trajectories_html(group_of_four(), steps=[2] * 4, environments=["counter"] * 4)
    assert len(sections(page)) == 1 and page.count('<article class="trajectory') == 4
    header = page.split('<div class="group-header">')[1].split("</div>")[0]
    assert "counter · step 2 · group 5" in header and "task task-a" in header
    assert "returns +1.000, +0.000, +0.000, +0.000" in header and "kept 3/4" in header
    assert "mean +0.250 ± 0.433" in header
    assert page.count("advantage +1.500") == 1 and page.count("advantage -0.500") == 3
    assert page.count('class="trajectory failure filtered"') == 1 and "filtered out" in page
    # The invalid action is styled apart from the valid ones.
    assert page.count('class="action invalid"') == 1 and '<span class="label">invalid action</span>' in page
    assert 'class="action"' in page


def test_long_observations_collapse_and_short_ones_do_not():
    t = make_trajectory(0)
    t.turns[0].observation = "\n".join(f"row {i}" for i in range(40))
    page = trajectories_html([t])
    assert page.count('<details class="observation">') == 1
    assert "<summary>row 0 … (40 lines, 269 characters)</summary>" in page


def test_tokens_by_segment_with_the_loss_mask_and_whole_characters(tiny_tokenizer):
    tok = tiny_tokenizer
    ids = lambda text: tok(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    prompt, thinking, observation = ids("Box √ here"), ids("é→"), ids("état √")
    assert len(ids("√")) == 3  # byte-level BPE splits the character over three tokens
    t = Trajectory(task_id="t", group=0, prompt_length=len(prompt))
    t.append(prompt, Segment.PROMPT)
    t.append(thinking, Segment.THINKING)
    t.append(observation, Segment.OBSERVATION)
    spans = token_spans(tok, t.token_ids, t.segments, [False] * len(prompt) + [True] * len(thinking)
                        + [False] * len(observation))
    assert "".join(span["text"] for span in spans) == "Box √ hereé→état √"
    assert not any("\ufffd" in span["text"] for span in spans)
    assert [span["text"] for span in spans if span["trained"]] == ["é", "→"]
    assert {span["segment"] for span in spans if span["text"] == "√"} == {int(Segment.PROMPT), int(Segment.OBSERVATION)}

    page = trajectories_html([t], tokenizer=tok)
    assert "system prompt and first observation" in page and "Box √ here" in page
    assert '<span class="tok seg-3 trained" title="thinking · id ' in page
    assert "\ufffd" not in page
    t.kept = False  # filtered out: none of its tokens is in the loss
    assert " trained" not in trajectories_html([t], tokenizer=tok).split('<main id="groups">')[1]
    assert "prompts and tokens not shown" in trajectories_html([t])


def test_sampling_keeps_whole_groups_is_seeded_and_labels_come_from_the_store(tmp_path):
    store = TrajectoryStore()
    store.add([make_trajectory(i) for i in range(6)], step=3, environment="counter")  # groups 0, 0, 1, 1, 2, 2
    first = write_store_html(store, tmp_path / "a.html", sample=4, seed=1).read_text()
    again = write_store_html(store, tmp_path / "b.html", sample=4, seed=1).read_text()
    assert first == again and len(sections(first)) == 2 and first.count('<article class="trajectory') == 4
    assert "counter · step 3 · group" in first
    assert len(sections(write_html([], tmp_path / "empty.html").read_text())) == 0


def _browser():
    for name in BROWSERS:
        path = shutil.which(name)
        if path:
            return path
    return None


needs_browser = pytest.mark.skipif(_browser() is None, reason="no headless Chromium (apt-get install chromium-headless-shell)")


@needs_browser
def test_page_renders_in_a_headless_browser(tmp_path):
    from PIL import Image

    page = write_html([hostile_trajectory(), make_trajectory(1), *group_of_four()], tmp_path / "page.html")
    shot = tmp_path / "shot.png"
    done = subprocess.run(
        [_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", f"--screenshot={shot}",
         "--window-size=1400,900", page.as_uri()],
        capture_output=True, text=True, timeout=120,
    )
    assert shot.is_file() and shot.stat().st_size > 5000, done.stderr
    image = Image.open(shot).convert("RGB")
    assert image.size == (1400, 900)
    colors = image.getcolors(maxcolors=1 << 16)
    assert colors is None or len(colors) > 50  # text and styled boxes, not a blank page
    # The success card's green border and the failure card's red one are drawn.
    pixels = set(image.getdata())
    assert (0x2E, 0x9D, 0x57) in pixels and (0xC9, 0x38, 0x3A) in pixels


@needs_browser
def test_the_pages_filter_and_sort_run_in_the_browser(tmp_path):
    low = group_of_four()
    for t in low:
        t.group = 9
        t.turns[0].reward -= 1.0
    low[0].turns[0].observation = "long\n" * 50
    page = write_html(group_of_four() + low, tmp_path / "page.html")

    def dom(fragment):
        done = subprocess.run([_browser(), "--headless", "--no-sandbox", "--disable-gpu", "--dump-dom",
                               page.as_uri() + fragment], capture_output=True, text=True, timeout=120)
        return done.stdout

    shown = dom("#outcome=1&kept=1")  # successes the filter kept: one per group
    assert re.search(r'<span id="shown">2 shown</span>', shown)
    assert len(re.findall(r'<article class="trajectory success(?! hidden)', shown)) == 2
    assert len(re.findall(r'<article class="trajectory failure[^"]* hidden"', shown)) == 6
    order = re.findall(r'<section class="group[^"]*" data-order="(\d)"', dom("#sort=mean"))
    assert order == ["1", "0"]  # the group with the lower mean return first
    opened = r"<details[^>]*\sopen"
    assert not re.search(opened, dom("")) and len(re.findall(opened, dom("#expand"))) == 1
