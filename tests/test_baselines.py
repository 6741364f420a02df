"""Every environment card shows the expert, random and untrained-model baselines recorded by
benchmarks/baselines.py (with `trl-starpo eval`), as recorded."""

import json
import re
import sys
from pathlib import Path

import pytest

import trl_starpo

ROOT = Path(__file__).parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import baselines  # noqa: E402


def test_every_installed_environment_has_baselines():
    assert set(baselines.LIMITS) == set(trl_starpo.list_environments())


@pytest.mark.parametrize("name", sorted(baselines.LIMITS))
def test_the_card_shows_the_recorded_expert_random_and_model_rows(name):
    record = json.loads((baselines.RECORDS / f"{name}.json").read_text())
    policies = [row["policy"] for run in record["runs"] for row in run["rows"]]
    splits = baselines.SPLITS.get(name, ["validation"])
    assert policies == ["expert", "random", "model"] * len(splits)
    assert all("trl-starpo eval --env " + name in run["command"] for run in record["runs"])
    card = (ROOT / "environments" / name / "README.md").read_text(encoding="utf-8")
    assert baselines.table(name) in card, f"rerun `python benchmarks/baselines.py --table --env {name}` into the card"


@pytest.mark.parametrize("name", sorted(baselines.LIMITS))
def test_the_cards_commands_are_the_generators_in_the_documented_flag_spelling(name):
    """docs/cli.md documents one spelling, underscores (`--max_turns`); the cards print the recorded commands."""
    record = json.loads((baselines.RECORDS / f"{name}.json").read_text())
    generated = [" ".join(baselines._quoted(part) for part in line) for line in baselines.commands(name)]
    assert [run["command"] for run in record["runs"]] == generated
    dashed = [flag for line in generated for flag in re.findall(r"(?<!\S)--\w+-[\w-]+", line)]
    assert not dashed, f"{name}: flags spelt with dashes: {dashed}"


def _tables(text: str):
    """Each Markdown table in ``text`` with the paragraph just above it: ``(paragraph, header, rows)``."""
    lines, paragraph, index = text.splitlines(), [], 0
    while index < len(lines):
        line = lines[index]
        if line.startswith("|"):
            start = index
            while index < len(lines) and lines[index].startswith("|"):
                index += 1
            yield " ".join(paragraph), lines[start], lines[start + 2:index]
            paragraph = []
            continue
        if line.strip():  # a blank line ends a paragraph; the next text line starts a new one
            paragraph = paragraph + [line] if index and lines[index - 1].strip() else [line]
        index += 1


@pytest.mark.parametrize("card", sorted((ROOT / "environments").glob("*/README.md")), ids=lambda p: p.parent.name)
def test_every_success_table_in_a_card_shows_wilson_intervals(card):
    """A success rate from a few episodes means little without its interval: 0/8 does not rule out one in three."""
    for paragraph, header, rows in _tables(card.read_text(encoding="utf-8")):
        if "success" not in header.lower() and "success rate" not in paragraph.lower():
            continue
        if "interval" in header.lower() or "wilson" in header.lower():
            continue
        unbounded = [row for row in rows if not re.search(r"\[\d\.\d+, \d\.\d+\]", row)]
        assert not unbounded, f"{card}: success table without 95% Wilson intervals: {header} {unbounded}"
