"""Every training example of the README and the docs is known to benchmarks/examples.py, and each one it runs has a
committed record in which the example exited cleanly and moved the model, cited by the page that shows it."""

import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import examples  # noqa: E402

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
TRAINING_COMMAND = re.compile(r"(accelerate launch|trl-starpo train --|python recipes/|make train)")


def shell_commands(text: str) -> list[str]:
    """The commands of a page's non-Python code blocks, continuation lines joined and comments dropped."""
    commands, fence, lines = [], None, []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("```"):
            if fence is None:
                fence, lines = stripped[3:].strip(), []
            else:
                if fence in ("", "bash", "sh", "shell", "console"):
                    joined = re.sub(r"\\\n\s*", " ", "\n".join(lines))
                    commands += [" ".join(command.removeprefix("$ ").split(" #", 1)[0].split())
                                 for command in joined.splitlines()]
                fence = None
        elif fence is not None:
            lines.append(stripped)
    return [command for command in commands if TRAINING_COMMAND.match(command)]


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.name)
def test_every_training_command_of_a_page_is_an_example(page):
    known = {example.command for example in examples.EXAMPLES if example.command}
    for command in shell_commands(page.read_text(encoding="utf-8")):
        assert command in known, f"{page.name}: `{command}` is not in benchmarks/examples.py's EXAMPLES"


def test_every_training_block_of_a_page_is_an_example():
    blocks = {example.block for example in examples.EXAMPLES if example.block}
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        for mark, code in re.findall(r"(<!-- example: [\w-]+ -->\n)?```python\n(.*?)```", text, re.S):
            if ".train(" in code:
                assert mark, f"{page.name}: a Python block that trains has no <!-- example: NAME --> mark"
                name = mark.removeprefix("<!-- example: ").split(" ")[0]
                assert f"{page.relative_to(ROOT)}#{name}" in blocks, f"{page.name}'s example {name!r} is not listed"
    assert "README.md#quickstart" in blocks


def test_shell_commands_are_read_from_fenced_blocks_only():
    page = ("text `accelerate launch x`\n```bash\naccelerate launch a.py \\\n    --b 1   # note\n```\n```python\nmake train\n```"
            "\n```console\n$ trl-starpo train --env a#b\n```")
    assert shell_commands(page) == ["accelerate launch a.py --b 1", "trl-starpo train --env a#b"]


@pytest.mark.parametrize("example", [e for e in examples.EXAMPLES if not e.needs], ids=lambda e: e.name)
def test_each_runnable_example_has_a_record_in_which_it_moved_the_model(example):
    path = examples.RUNS / f"{example.name}.json"
    assert path.is_file(), f"run `python benchmarks/examples.py {example.name}` and commit {path.name}"
    record = json.loads(path.read_text())
    assert record["exit_status"] == 0 and record["updates_that_moved"] > 0
    assert record["updates_that_moved"] == sum(map(examples.moved, record["updates"]))
    assert f"example_runs/{example.name}.json" in (ROOT / example.page).read_text(encoding="utf-8"), (
        f"{example.page} should say what {example.name} showed, citing its record")


def test_moved_means_a_finite_nonzero_gradient():
    assert examples.moved({"grad_norm": 0.2}) and not examples.moved({"grad_norm": 0.0})
    assert not examples.moved({"grad_norm": float("nan")}) and not examples.moved({"loss": 0.1})


def test_an_example_is_a_command_or_a_block():
    with pytest.raises(ValueError, match="exactly one"):
        examples.Example("both", "README.md", command="make train", block="README.md#quickstart")


def test_the_child_runs_only_listed_blocks(tmp_path):
    for block in ("docs/../../etc/passwd#x", "docs/monitoring.md#monitor"):  # not listed / listed but not runnable
        with pytest.raises(SystemExit, match="not a runnable example block"):
            examples.main(["--child", block, str(tmp_path / "state.json")])
    assert not (tmp_path / "state.json").exists()
