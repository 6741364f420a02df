"""Every environment card shows the expert, random and untrained-model baselines recorded by
benchmarks/baselines.py (with `trl-starpo eval`), as recorded."""

import json
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
