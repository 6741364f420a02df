"""benchmarks/learning (``python benchmarks/learning.py``) end to end on the tiny model and a test environment: every
row, resume, the table."""

import dataclasses
import importlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def learning():
    """The benchmark's package (benchmarks/learning/, on pytest's pythonpath as on the script's)."""
    package = importlib.import_module("learning")
    for module in ("protocol", "evaluation", "training", "runs", "statistics", "table", "plots", "scheduler", "cli"):
        importlib.import_module(f"learning.{module}")
    return package


def test_wilson_intervals(learning):
    # the Wilson score interval of 8/32 by its formula: (p + z^2/2n -+ z sqrt(p(1-p)/n + z^2/4n^2)) / (1 + z^2/n)
    p, n, z = 0.25, 32, 1.959964
    center, half = p + z * z / (2 * n), z * (p * (1 - p) / n + z * z / (4 * n * n)) ** 0.5
    expected = ((center - half) / (1 + z * z / n), (center + half) / (1 + z * z / n))
    assert learning.statistics.wilson(8, 32) == pytest.approx(expected, abs=1e-5)
    assert learning.statistics.wilson(0, 32)[0] == 0.0


def test_the_verdict_on_lift_is_given_only_where_rl_ran(learning):
    def record(method, environment, successes, seed=0):
        return {"method": method, "environment": environment, "seed": seed, "setting": "s", "curve": [], "scale": {},
                "column": {"rollout": {}}, "held_out": {"successes": successes, "episodes": 64}, "turns": 0,
                "updates": 0, "commit": "c"}

    records = [record("sft", "minigrid", 20), record("sft", "hotpotqa", 20), record("starpo-s", "hotpotqa", 45),
               record("gigpo", "hotpotqa", 25)]
    verdicts = [line for line in learning.table.markdown(records).splitlines() if "lifts success" in line]
    # 45/64 [58-80] against 20/64 [21-43]: lifted; 25/64 overlaps; MiniGrid has no RL run, so no verdict yet
    assert verdicts == ["- hotpotqa: `starpo-s` (+39 points, episode intervals apart) lifts success over the SFT start "
                        "by at least 10 points with the 95% interval of the lift above zero."]

    # a comparison pools only the seeds both sides ran, and names them where a row pools more
    records += [record("sft", "hotpotqa", 30, seed=1), record("starpo-s", "hotpotqa", 36, seed=1),
                record("starpo-s", "hotpotqa", 64, seed=2)]
    lines = [line for line in learning.table.markdown(records).splitlines() if line.startswith("- hotpotqa")]
    # seeds 0-1: 81/128 [55-71] against 50/128 [31-48]; seed 0 alone for GiGPO: 25/64 [28-51] against 45/64 [58-80]
    assert lines == [
        "- hotpotqa: `starpo-s` (+24 points, episode intervals apart; seeds 0, 1) lifts success over the SFT start by "
        "at least 10 points with the 95% interval of the lift above zero.",
        "- hotpotqa: `gigpo` 39% against `starpo-s` 70% on the same budget (episode intervals apart; seed 0).",
    ]
    # an SFT row with seeds the method lacks is named too; no seed in common means no comparison, said as such
    alone = [record("sft", "minigrid", 20), record("sft", "minigrid", 60, seed=1), record("starpo-s", "minigrid", 45)]
    assert "- minigrid: `starpo-s` (+39 points, episode intervals apart; seed 0) lifts" in learning.table.markdown(alone)
    apart = [record("sft", "minigrid", 20), record("starpo-s", "minigrid", 45, seed=1), record("gigpo", "minigrid", 45,
                                                                                                seed=2)]
    lines = [line for line in learning.table.markdown(apart).splitlines() if line.startswith("- minigrid")]
    assert lines == [
        "- minigrid: no method lifts success over the SFT start (`starpo-s`, `gigpo`: no seed in common with it) by at "
        "least 10 points with the 95% interval of the lift above zero.",
        "- minigrid: `gigpo` and `starpo-s` have no seed in common, so are not compared.",
    ]


def test_the_verdict_takes_the_task_as_its_unit_where_records_keep_outcomes(learning):
    def record(method, seed, solved, tasks=32):
        outcomes = {f"t{i}": int(i in solved) for i in range(tasks)}
        return {"method": method, "environment": "minigrid", "seed": seed, "setting": "s", "curve": [], "scale": {},
                "column": {"rollout": {}}, "turns": 0, "updates": 0, "commit": "c",
                "held_out": {"successes": len(solved), "episodes": tasks, "outcomes": outcomes}}

    # every seed solves the same tasks: the start 0-9, StarPO-S 5-21 (12 tasks gained, 5 lost). Pooled as 96
    # independent episodes the Wilson intervals are apart (30/96 [23-41], 51/96 [43-63]); by task they are not.
    start, trained = set(range(10)), set(range(5, 22))
    records = [record("sft", seed, start) for seed in range(3)] + [record("starpo-s", seed, trained) for seed in range(3)]
    assert learning.statistics.wilson(30, 96)[1] < learning.statistics.wilson(51, 96)[0]
    gain = learning.statistics.lift(records, "starpo-s", "sft", "minigrid")
    assert gain["unit"] == "task" and gain["difference"] == pytest.approx(7 / 32)
    assert gain["low"] < 0 < gain["high"]
    text = learning.table.markdown(records)
    assert ("- minigrid: no method lifts success over the SFT start by at least 10 points with the 95% interval of "
            "the lift above zero.") in text
    cell = learning.statistics.cells(records)[("starpo-s", "minigrid")]
    assert cell["unit"] == "task" and cell["high"] - cell["low"] > 0.25  # 32 tasks, not 96 episodes
    assert "| `starpo-s` | — | — | — | 53 [" in text and "* (3)" not in text

    # a clear gain on most tasks is a lift, with its task-level interval
    records += [record("gigpo", seed, set(range(0, 30))) for seed in range(3)]
    gain = learning.statistics.lift(records, "gigpo", "sft", "minigrid")
    assert gain["low"] > 0.4
    assert (f"- minigrid: `gigpo` (+62 points, 95% interval of the difference [+{100 * gain['low']:.0f}, "
            f"+{100 * gain['high']:.0f}] points, paired by task) lifts success") in learning.table.markdown(records)


def test_the_table_warns_where_rows_played_different_task_sets(learning):
    def record(method, digest):
        held_out = {"successes": 1, "episodes": 2, **({"tasks_sha256": digest} if digest else {})}
        return {"method": method, "environment": "minigrid", "seed": 0, "setting": "s", "curve": [], "scale": {},
                "column": {"rollout": {}}, "turns": 0, "updates": 0, "commit": "c", "held_out": held_out}

    same = [record("sft", "aaa"), record("starpo-s", "aaa"), record("random", None)]
    assert "different held-out task sets" not in learning.table.markdown(same)
    regenerated = [*same, record("gigpo", "bbb")]
    assert ("Warning: the rows of minigrid played different held-out task sets (aaa, bbb); compare only rows that "
            "played the same.") in learning.table.markdown(regenerated)
    rows = [{"task_id": "t0", "seed": 1}, {"task_id": "t1", "seed": 2}]
    digest = learning.evaluation.tasks_digest(rows)
    assert digest == learning.evaluation.tasks_digest([{"seed": 1, "task_id": "t0"}, {"task_id": "t1", "seed": 2}])
    assert digest != learning.evaluation.tasks_digest([{"task_id": "t0", "seed": 3}, rows[1]])  # same ids, new tasks


def test_methods_are_paired_episode_by_episode_where_records_keep_outcomes(learning):
    def record(method, seed, solved, tasks=16, precision="bf16 autocast"):
        outcomes = {f"t{i}": int(i in solved) for i in range(tasks)}
        return {"method": method, "environment": "minigrid", "seed": seed, "setting": "s", "curve": [], "scale": {},
                "column": {"rollout": {}}, "turns": 0, "updates": 0, "commit": "c",
                "held_out": {"successes": len(solved), "episodes": tasks, "outcomes": outcomes,
                             "precision": precision}}

    # seed 0: tasks 0-9 solved by StarPO-S alone, 10-11 by the start alone, 12-13 by both; seed 1's start has no
    # outcomes (recorded before they were kept) and seed 3's played in another precision, so both are left out;
    # GiGPO shares no seed with the start
    old_start = record("sft", 1, {0, 1})
    del old_start["held_out"]["outcomes"]
    records = [record("sft", 0, {10, 11, 12, 13}), record("starpo-s", 0, {*range(10), 12, 13}), old_start,
               record("starpo-s", 1, {0}), record("sft", 3, set(), precision="fp32"), record("starpo-s", 3, {0}),
               record("gigpo", 2, {0}), record("gigpo", 1, {0, 1, 2})]
    test = learning.statistics.paired(records, "starpo-s", "sft", "minigrid")
    # with one seed the sign test is the exact McNemar test: two-sided binomial on the 12 discordant episodes,
    # 2 * (1 + 12 + 66) / 2**12
    assert test == {"seeds": [0], "episodes": 16, "alone": 10, "other_alone": 2, "tasks_gained": 10, "tasks_lost": 2,
                    "p": pytest.approx(158 / 4096)}
    assert learning.statistics.paired(records, "gigpo", "sft", "minigrid") is None
    assert learning.table.paired_lines(records, ["minigrid"]) == [
        "- minigrid: `starpo-s` against the SFT start, episode by episode on the same tasks (16 episodes, seed 0): 10 "
        "solved by `starpo-s` alone, 2 by the start alone; by task over the seeds, 10 gained and 2 lost (exact sign "
        "test p = 0.039).",
        # GiGPO meets StarPO-S on seed 1 (tasks 1 and 2 solved by GiGPO alone), not on seed 2 (no StarPO-S run)
        "- minigrid: `gigpo` against `starpo-s`, episode by episode on the same tasks (16 episodes, seed 1): 2 solved "
        "by `gigpo` alone, 0 by `starpo-s` alone; by task over the seeds, 2 gained and 0 lost (exact sign test "
        "p = 0.5)."]


def test_the_paired_test_takes_the_task_as_its_unit(learning):
    def record(method, seed, solved):
        return {"method": method, "environment": "hotpotqa", "seed": seed, "scale": {"bf16": False},
                "held_out": {"outcomes": {task: int(task in solved) for task in ("a", "b", "c", "d")}}}

    # task a: gained on all three seeds; b: gained once and lost once (net 0, not counted); c: lost once; d: tied
    records = [record("sft", 0, {"c"}), record("starpo-s", 0, {"a", "b"}),
               record("sft", 1, {"b"}), record("starpo-s", 1, {"a"}),
               record("sft", 2, set()), record("starpo-s", 2, {"a"})]
    test = learning.statistics.paired(records, "starpo-s", "sft", "hotpotqa")
    # four episodes solved by StarPO-S alone and two by the start alone, but by task one gain and one loss: p = 1
    assert test == {"seeds": [0, 1, 2], "episodes": 12, "alone": 4, "other_alone": 2, "tasks_gained": 1,
                    "tasks_lost": 1, "p": 1.0}


def test_every_row_plays_held_out_in_the_precision_its_column_trains_in(learning, counter_env, tiny_model_dir):
    import dataclasses

    import torch

    column = learning.protocol.Column(held_out="test", budget=12, rollout=dict(max_turns=2, max_actions_per_turn=1,
                             max_actions_per_trajectory=2, max_tokens_per_turn=8, max_context_length=256))
    model, tokenizer = learning.evaluation.load_model(tiny_model_dir)
    autocast_seen = []
    forward = model.forward
    model.forward = lambda *args, **kwargs: autocast_seen.append(torch.is_autocast_enabled("cpu")) or forward(
        *args, **kwargs)
    for bf16, precision in ((True, "bf16 autocast"), (False, "fp32")):
        autocast_seen.clear()
        scale = dataclasses.replace(learning.protocol.SMOKE, bf16=bf16, eval_episodes=2)
        result = learning.evaluation.held_out(model, tokenizer, counter_env, column, scale, seed=0)
        assert result["precision"] == precision and result["episodes"] == 2
        assert autocast_seen and set(autocast_seen) == {bf16}


def test_held_out_refuses_a_split_that_repeats_task_ids(learning, counter_env, tiny_model_dir, monkeypatch, tmp_path):
    import dataclasses

    import trl_starpo
    from starpo_testenv import task_rows

    column = learning.protocol.Column(held_out="test", budget=12, rollout=dict(max_turns=1, max_actions_per_turn=1,
                             max_actions_per_trajectory=1, max_tokens_per_turn=4, max_context_length=256))
    scale = dataclasses.replace(learning.protocol.SMOKE, eval_episodes=2)
    assert [row["task_id"] for row in learning.evaluation.held_out_tasks(counter_env, column, scale)] == [
        row["task_id"] for row in task_rows("test", 2)]
    monkeypatch.setattr(trl_starpo, "load_tasks",
                        lambda *args, **kwargs: [dict(row, task_id="same") for row in task_rows("test", 2)])
    with pytest.raises(ValueError, match="repeats task ids; each held-out row needs its own"):
        learning.runs.run_one("sft", counter_env, 0, scale=scale, model=tiny_model_dir, column=column,
                         workdir=tmp_path / "work", records=tmp_path / "records")  # before any training
    assert not (tmp_path / "work").exists()


def test_the_table_warns_where_rows_played_in_different_precisions(learning):
    def record(method, environment, bf16, precision=None):
        held_out = {"successes": 1, "episodes": 2, **({"precision": precision} if precision else {})}
        return {"method": method, "environment": environment, "seed": 0, "scale": {"bf16": bf16},
                "held_out": held_out}

    # records that name no precision: a preset's row of a bf16 run played under its trainer's autocast, a row loaded
    # from disk or merged out of LoRA (DPO) in fp32; the random agent has no model and no precision
    assert learning.protocol.eval_precision(record("starpo-s", "hotpotqa", True)) == "bf16 autocast"
    assert learning.protocol.eval_precision(record("dpo", "hotpotqa", True)) == "fp32"
    assert learning.protocol.eval_precision(record("sft", "hotpotqa", True)) == "fp32"
    assert learning.protocol.eval_precision(record("starpo-s", "hotpotqa", False)) == "fp32"
    records = [record("sft", "hotpotqa", True), record("gigpo", "hotpotqa", True), record("random", "minigrid", True),
               record("sft", "minigrid", True, "bf16 autocast"), record("starpo-s", "minigrid", True)]
    assert learning.table.precision_lines(records, ["hotpotqa", "minigrid"]) == [
        "Warning: the rows of hotpotqa played their held-out episodes in different precisions "
        "(bf16 autocast: `gigpo`; fp32: `sft`).", ""]


@pytest.mark.slow
def test_every_row_resumes_and_the_table_comes_from_the_records(
    learning, counter_env, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    column = learning.protocol.Column(
        held_out="test", budget=12, sft_episodes=4, sft_epochs=1,
        rollout=dict(max_turns=3, max_actions_per_turn=1, max_actions_per_trajectory=3, max_tokens_per_turn=24,
                     max_context_length=512, enable_thinking=True),
    )
    monkeypatch.setitem(learning.protocol.COLUMNS, counter_env, column)
    work, records, results = tmp_path / "work", tmp_path / "records", tmp_path / "docs" / "results.md"
    results.parent.mkdir()
    results.write_text("# Results\n\n## Earlier section\n\nkept\n")
    common = dict(scale=learning.protocol.SMOKE, model=tiny_model_dir, workdir=work, records=records, column=column)

    # a run that dies after its first update resumes from its checkpoint
    from trl_starpo import StarPOTrainer

    original, calls = StarPOTrainer._generate_and_score_completions, []

    def dies_on_the_second_generation(self, inputs):
        calls.append(1)
        if len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return original(self, inputs)

    monkeypatch.setattr(StarPOTrainer, "_generate_and_score_completions", dies_on_the_second_generation)
    with pytest.raises(KeyboardInterrupt):
        learning.runs.run_one("gigpo", counter_env, 0, **common)
    run_dir, = (work / "runs" / counter_env).glob("gigpo-seed0-*")  # the folder of these settings
    warm, = (path for path in (work / "sft").iterdir() if path.is_dir())  # made before the run died, merged
    assert (warm / "warm_start.json").is_file() and not any(warm.glob("checkpoint-*"))
    saved = json.loads((run_dir / "checkpoint-1" / learning.protocol.PROGRESS_FILE).read_text())
    assert len(saved) == 1
    monkeypatch.setattr(StarPOTrainer, "_generate_and_score_completions", original)
    resumed = learning.runs.run_one("gigpo", counter_env, 0, **common)
    assert resumed["curve"][0] == saved[0] and resumed["turns"] >= column.budget > resumed["curve"][-2][0]
    # a run that finished training but lost its record is only evaluated again, its training figures kept
    learning.runs.record_path(records, counter_env, "gigpo", 0).unlink()
    evaluated_again = learning.runs.run_one("gigpo", counter_env, 0, **common)
    assert evaluated_again["curve"] == resumed["curve"] and resumed["training_means"]
    assert evaluated_again["training_means"] == resumed["training_means"]
    assert set(resumed["time_split"]) == set(learning.training.TIME_SERIES)
    assert evaluated_again["time_split"] == resumed["time_split"]
    assert evaluated_again["held_out"] == resumed["held_out"]  # the same precision in and out of the training process
    assert 0 <= evaluated_again["evaluation_s"] <= evaluated_again["wall_s"]  # what the evaluation itself took
    # evaluated on more held-out tasks, or on another split, a finished run keeps its checkpoints: nothing is trained
    with monkeypatch.context() as patched:
        patched.setattr(StarPOTrainer, "train", lambda *args, **kwargs: pytest.fail("a finished run is trained again"))
        wider = learning.runs.run_one("gigpo", counter_env, 0, **dict(
            common, records=tmp_path / "wider", scale=dataclasses.replace(learning.protocol.SMOKE, eval_episodes=3)))
        validation = learning.runs.run_one("gigpo", counter_env, 0, **dict(
            common, records=tmp_path / "validation", column=dataclasses.replace(column, held_out="validation")))
    assert wider["held_out"]["episodes"] == 3 and wider["curve"] == resumed["curve"]
    assert validation["held_out"]["tasks_sha256"] != resumed["held_out"]["tasks_sha256"]
    assert validation["curve"] == resumed["curve"] and validation["training_means"] == resumed["training_means"]
    assert len({resumed["setting"], wider["setting"], validation["setting"]}) == 3  # a record names its evaluation
    assert [path.name for path in (work / "runs" / counter_env).iterdir()] == [run_dir.name]

    for method in learning.protocol.METHODS:
        record = learning.runs.run_one(method, counter_env, 0, **common)
        assert record["held_out"]["episodes"] == 2 and record["setting"] == resumed["setting"]
        assert len(record["held_out"]["tasks_sha256"]) == 12
        held_out = record["held_out"]
        assert held_out["context_truncated"] == 0 and 1 <= held_out["turns"] <= column.rollout["max_turns"]
        assert 0.1 < record["peak_rss_gib"] < 64  # this process's peak, in GiB (ru_maxrss is in KiB on Linux)
        outcomes = record["held_out"]["outcomes"]
        assert len(outcomes) == 2 and sum(outcomes.values()) == record["held_out"]["successes"]
        assert bool(record["curve"]) == (method not in ("random", "untrained", "sft"))
        if record["curve"]:
            assert record["turns"] >= column.budget
        if method == "dpo":  # each round's own figures, beside its point of the curve
            rounds = record["dpo_rounds"]
            assert len(rounds) == len(record["curve"]) and sum(r["turns"] for r in rounds) == record["turns"]
            assert all({"loss", "rewards/margins"} <= r.keys() for r in rounds if r["pairs"])
        else:
            assert "dpo_rounds" not in record
    assert len([path for path in (work / "sft").iterdir() if path.is_dir()]) == 1  # one, shared by every method
    # a finished DPO run whose record was lost is evaluated again, its rounds' figures kept
    dpo = learning.runs.record_path(records, counter_env, "dpo", 0)
    first = json.loads(dpo.read_text())
    dpo.unlink()
    again = learning.runs.run_one("dpo", counter_env, 0, **common)
    assert again["dpo_rounds"] == first["dpo_rounds"] and again["curve"] == first["curve"]
    assert learning.runs.run_one("gigpo", counter_env, 0, **common) == evaluated_again  # recorded: not run again
    capsys.readouterr()
    learning.runs.run_one("gigpo", counter_env, 0, **common)
    said = capsys.readouterr().out
    assert "already recorded with these settings in" in said and "not run again" in said  # a reuse is never silent
    # --rerun makes the run again from the start: a fresh curve from its first update, a new record
    rerun = learning.runs.run_one("gigpo", counter_env, 0, **common, rerun=True)
    assert "already recorded" not in capsys.readouterr().out
    assert rerun["curve"] and rerun["turns"] >= column.budget
    assert json.loads(learning.runs.record_path(records, counter_env, "gigpo", 0).read_text()) == rerun

    block = learning.table.regenerate(records, results)
    text = results.read_text()
    assert "## Earlier section\n\nkept" in text and block in text
    assert text.count("| `") >= len(learning.protocol.METHODS)
    assert f"| `gigpo` | " in block and (tmp_path / "docs" / f"learning_{counter_env}.png").is_file()
    # regenerating from the same records gives the same section
    assert learning.table.regenerate(records, results) == block


def test_the_table_of_another_records_folder_is_printed_not_written(learning, tmp_path, capsys):
    record = {"method": "sft", "environment": "hotpotqa", "seed": 0, "setting": "abc", "turns": 0, "updates": 0,
              "commit": "0" * 40, "curve": [],
              "held_out": {"split": "test", "episodes": 64, "successes": 13, "success": 13 / 64}}
    (tmp_path / "archive" / "hotpotqa-old").mkdir(parents=True)
    (tmp_path / "archive" / "hotpotqa-old" / "sft-seed0.json").write_text(json.dumps(record))
    committed = learning.protocol.RESULTS_MD.read_text()
    try:
        learning.cli.main(["--table", "--records", str(tmp_path / "archive")])
        written = learning.protocol.RESULTS_MD.read_text()
    finally:
        if learning.protocol.RESULTS_MD.read_text() != committed:  # a regression must not leave the docs overwritten
            learning.protocol.RESULTS_MD.write_text(committed)
    printed = capsys.readouterr().out
    assert "| `sft` | — | — | 20 [12–32]* (1) | — |" in printed and "| hotpotqa | `sft` | 0 | 13/64 |" in printed
    assert f"python benchmarks/learning.py --table --records {tmp_path / 'archive'}\n" in printed
    assert written == committed


def test_another_folders_curves_go_into_it(learning, tmp_path):
    record = {"method": "starpo-s", "environment": "hotpotqa", "seed": 0, "setting": "abc", "turns": 48, "updates": 2,
              "thinking_scale_rule": None,
              "commit": "0" * 40, "curve": [[24, 0.25, 0.3], [48, 0.5, 0.55]],
              "held_out": {"split": "test", "episodes": 64, "successes": 40, "success": 40 / 64}}
    folder = tmp_path / "budget2048"
    (folder / "hotpotqa").mkdir(parents=True)
    (folder / "hotpotqa" / "starpo-s-seed0.json").write_text(json.dumps(record))
    block = learning.table.folder_table(folder)
    assert f"({folder}/learning_hotpotqa.png)" in block and "learning_minigrid" not in block
    assert sorted(p.name for p in folder.iterdir()) == ["hotpotqa", "learning_hotpotqa.png"]
    inside = learning.protocol.RECORDS / "ablations" / "budget2048"
    assert learning.table.curves_link("hotpotqa", inside) == (
        "../benchmarks/learning_runs/ablations/budget2048/learning_hotpotqa.png")


def test_committed_records_keep_their_setting_key(learning):
    # a Scale field added later with its default must not change the key of the runs recorded before it
    for path in sorted(learning.protocol.RECORDS.rglob("*.json")):  # the sittings' folders too
        record = json.loads(path.read_text())
        scale = learning.protocol.Scale(**record["scale"])
        column = learning.protocol.Column(**record["column"])
        key = learning.protocol.setting_key(record["environment"], column, scale, record["model"])
        assert key == record["setting"], path
    column = learning.protocol.COLUMNS["hotpotqa"]
    default = learning.protocol.setting_key("hotpotqa", column, learning.protocol.Scale(), "m")
    Scale = learning.protocol.Scale
    for changed in (Scale(num_iterations=2), Scale(thinking_scale_rule="multiplicative"),
                    Scale(learning_rate=1e-3), Scale(advantage_estimator="gigpo")):
        assert learning.protocol.setting_key("hotpotqa", column, changed, "m") != default
    # starpo-s's records from before its rule became multiplicative name none: naming theirs keeps the key
    assert learning.protocol.setting_key("hotpotqa", column, Scale(thinking_scale_rule="sign_aware"), "m") == default


def test_each_setting_keeps_its_own_run_folder(learning, tmp_path):
    runs = tmp_path / "runs" / "minigrid"
    earlier = runs / "starpo-s-seed1"  # made before run folders were named by setting
    earlier.mkdir(parents=True)
    (earlier / "setting.json").write_text(json.dumps({"setting": "abc", "thinking_scale_rule": "multiplicative"}))
    assert learning.runs.run_directory(tmp_path, "minigrid", "starpo-s", 1, ("abc",), "multiplicative") == earlier
    # another budget, rule or ablation gets a folder of its own and leaves the earlier checkpoints alone
    assert learning.runs.run_directory(tmp_path, "minigrid", "starpo-s", 1, ("def",), "multiplicative") == (
        runs / "starpo-s-seed1-def-multiplicative")
    assert learning.runs.run_directory(tmp_path, "minigrid", "starpo-s", 1, ("abc",), "relative") == (
        runs / "starpo-s-seed1-abc-relative")
    assert learning.runs.run_directory(tmp_path, "minigrid", "gigpo", 0, ("abc",), None) == runs / "gigpo-seed0-abc"
    # a folder named by a whole setting (made before the training key) takes the training key's name when found
    assert learning.runs.run_directory(tmp_path, "minigrid", "gigpo", 0, ("train", "whole"), None) == (
        runs / "gigpo-seed0-train")
    (runs / "gigpo-seed0-whole").mkdir()
    (runs / "gigpo-seed0-whole" / "checkpoint-3").mkdir()
    assert learning.runs.run_directory(tmp_path, "minigrid", "gigpo", 0, ("train", "whole"), None) == (
        runs / "gigpo-seed0-train")
    assert (runs / "gigpo-seed0-train" / "checkpoint-3").is_dir() and not (runs / "gigpo-seed0-whole").exists()
    # then another evaluation of the same training (another whole key) finds it by the training key
    assert learning.runs.run_directory(tmp_path, "minigrid", "gigpo", 0, ("train", "other"), None) == (
        runs / "gigpo-seed0-train")


def test_only_what_training_reads_names_a_runs_checkpoints(learning):
    protocol = learning.protocol
    column, scale = protocol.COLUMNS["alfworld"], protocol.Scale()
    key = protocol.training_key("alfworld", column, scale, "m")
    assert key == protocol.setting_key("alfworld", column, scale, "m")  # the column's own evaluation: the same key
    for evaluated in ((dataclasses.replace(column, held_out="valid_seen"), scale),
                      (dataclasses.replace(column, eval_temperature=1.0), scale),
                      (column, dataclasses.replace(scale, eval_episodes=60))):
        assert protocol.training_key("alfworld", *evaluated, "m") == key
        assert protocol.setting_key("alfworld", *evaluated, "m") != key
    for trained in ((dataclasses.replace(column, budget=6144), scale),
                    (column, dataclasses.replace(scale, learning_rate=1e-3))):
        assert protocol.training_key("alfworld", *trained, "m") != key


def scales_run(learning, monkeypatch) -> list:
    """The scales the command line starts runs with, in order (no run is made)."""
    chosen = []

    def record_scale(method, environment, seed, *, scale, **_):
        chosen.append(scale)
        return dict(updates=0, turns=0, held_out=dict(successes=0, episodes=0))

    monkeypatch.setattr(learning.cli, "run_one", record_scale)
    return chosen


def test_the_learning_rate_chosen_is_the_rl_runs_alone(learning, monkeypatch, tmp_path):
    chosen = scales_run(learning, monkeypatch)
    learning.cli.main(["--env", "minigrid", "--method", "starpo-s", "--learning-rate", "1e-3", "--records",
                       str(tmp_path)])
    (scale,) = chosen
    assert scale.learning_rate == 1e-3
    assert (scale.sft_learning_rate, scale.dpo_learning_rate) == (learning.protocol.Scale.sft_learning_rate,
                                                                   learning.protocol.Scale.dpo_learning_rate)
    with pytest.raises(SystemExit):
        learning.cli.main(["--method", "starpo-s", "--learning-rate", "0", "--records", str(tmp_path)])


def test_the_group_size_is_its_own_setting(learning, monkeypatch, tmp_path):
    chosen = scales_run(learning, monkeypatch)
    base = ["--env", "alfworld", "--method", "starpo-s", "--records", str(tmp_path)]
    learning.cli.main([*base, "--num-generations", "8", "--tasks-per-update", "1"])
    learning.cli.main(base)
    learning.cli.main([*base, "--smoke"])
    eight, default, smoke = chosen
    assert (eight.num_generations, eight.tasks_per_update, eight.episodes_per_update) == (8, 1, 8)
    assert (default.num_generations, default.tasks_per_update) == (4, 2)
    assert (smoke.num_generations, smoke.tasks_per_update) == (2, 1)  # the smoke scale's own, not the protocol's
    learning.cli.main([*base, "--smoke", "--num-generations", "4"])  # given, even at the protocol's value
    assert (chosen.pop().num_generations, smoke.tasks_per_update) == (4, 1)
    column, model = learning.protocol.COLUMNS["alfworld"], "m"
    assert learning.protocol.setting_key("alfworld", column, eight, model) != learning.protocol.setting_key(
        "alfworld", column, default, model)

    main_records = ["--records", str(learning.protocol.RECORDS)]
    for wrong in (["--num-generations", "1"], ["--tasks-per-update", "0"], ["--num-generations", "3",
                  "--tasks-per-update", "1"], ["--num-generations", "8", *main_records]):
        with pytest.raises(SystemExit):
            learning.cli.main([*base, *wrong])
    assert len(chosen) == 3

    commands = []
    monkeypatch.setattr(learning.cli, "run_processes", lambda c, jobs, logs: commands.append(c) or [])
    learning.cli.main([*base, "--num-generations", "8", "--tasks-per-update", "1", "--seed", "0", "1"])
    for command in commands[0].values():  # the runs side by side get the sizes too
        assert command[command.index("--num-generations"):][:4] == ["--num-generations", "8", "--tasks-per-update",
                                                                    "1"]


def test_a_smaller_warm_start_is_its_own_setting(learning, monkeypatch, tmp_path):
    chosen = []
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, column, **_: chosen.append(column) or dict(
        updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    learning.cli.main(["--env", "minigrid", "--method", "sft", "--sft-episodes", "128", "--records", str(tmp_path)])
    column = learning.protocol.COLUMNS["minigrid"]
    assert chosen[0].sft_episodes == 128 and chosen[0].budget == column.budget
    scale = learning.protocol.Scale()
    assert (learning.protocol.setting_key("minigrid", chosen[0], scale, "m")
            != learning.protocol.setting_key("minigrid", column, scale, "m"))
    with pytest.raises(SystemExit):
        learning.cli.main(["--env", "minigrid", "--method", "sft", "--sft-episodes", "0", "--records", str(tmp_path)])


def test_an_ablation_swaps_the_presets_advantage_estimator(learning, monkeypatch, tmp_path):
    chosen = []
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, scale, **_: chosen.append(scale) or dict(
        updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    learning.cli.main(["--env", "hotpotqa", "--method", "starpo-s", "--advantage-estimator", "gigpo", "--records",
                   str(tmp_path)])
    assert chosen[0].advantage_estimator == "gigpo"
    with pytest.raises(SystemExit):
        learning.cli.main(["--method", "starpo-s", "--advantage-estimator", "gipgo", "--records", str(tmp_path)])
    configured = starpo_config_of(learning, monkeypatch, "starpo-s", "hotpotqa", learning.protocol.COLUMNS["hotpotqa"],
                                  chosen[0], 0, tmp_path, tmp_path / "run")
    assert configured["preset"] == "starpo-s" and configured["advantage_estimator"] == "gigpo"


def starpo_config_of(learning, monkeypatch, *train_preset_args) -> dict:
    """The StarPOConfig arguments ``learning.training.train_preset(*train_preset_args)`` builds, stopped there."""
    import trl_starpo

    configured = {}

    class Configured(Exception):
        pass

    def configure(**kwargs):
        configured.update(kwargs)
        raise Configured

    monkeypatch.setattr(trl_starpo, "StarPOConfig", configure)
    with pytest.raises(Configured):
        learning.training.train_preset(*train_preset_args)
    return configured


def test_the_presets_thinking_scale_rules_are_the_trainers(learning):
    from trl_starpo.presets import PRESETS

    with_critic = {name: preset["thinking_scale_rule"] for name, preset in PRESETS.items() if preset["thinking_critic"]}
    assert learning.protocol.PRESET_THINKING_SCALE_RULES == with_critic


def test_a_run_names_the_thinking_scale_rule_it_applied(learning):
    thinking, answers = learning.protocol.COLUMNS["minigrid"], learning.protocol.COLUMNS["hotpotqa"]
    assert thinking.rollout["enable_thinking"] and not answers.rollout["enable_thinking"]
    default, chosen = learning.protocol.Scale(), learning.protocol.Scale(thinking_scale_rule="sign_aware")
    assert learning.protocol.applied_rule("starpo-s", thinking, default) == "multiplicative"  # the preset's
    assert learning.protocol.applied_rule("starpo-s", thinking, chosen) == "sign_aware"
    # no thinking critic acts: no rule
    assert learning.protocol.applied_rule("starpo-s", answers, default) is None
    assert learning.protocol.applied_rule("gigpo", thinking, chosen) is None

    def old_record(method, rule, rollout):  # made before records named the rule
        return {"method": method, "scale": {"thinking_scale_rule": rule}, "column": {"rollout": rollout}}

    thinks, answers_only = thinking.rollout, answers.rollout
    assert learning.protocol.recorded_rule(old_record("starpo-s", None, thinks)) == "sign_aware"  # the preset's then
    assert learning.protocol.recorded_rule(old_record("starpo-s", "relative", thinks)) == "relative"
    assert learning.protocol.recorded_rule(old_record("starpo-s", None, answers_only)) is None
    assert learning.protocol.recorded_rule(old_record("gigpo", None, thinks)) is None
    named = {**old_record("starpo-s", None, thinks), "thinking_scale_rule": "multiplicative"}
    assert learning.protocol.recorded_rule(named) == "multiplicative"


def test_the_table_says_which_runs_applied_another_thinking_scale_rule(learning):
    def record(method, environment, rule, thinking=True):
        return {"method": method, "environment": environment, "scale": {"thinking_scale_rule": rule},
                "column": {"rollout": {"enable_thinking": thinking}}}

    records = [record("starpo-s", "minigrid", None), record("starpo-s", "hotpotqa", "sign_aware"),
               record("starpo-s", "minigrid", "relative"), record("starpo-s", "webshop", "multiplicative"),
               record("gigpo", "alfworld", None), record("starpo-s", "sokoban", None, thinking=False)]
    assert learning.table.rule_lines(records) == [
        "- `starpo-s` on minigrid: these runs applied thinking_scale_rule `relative`; the preset applies "
        "`multiplicative`.",
        "- `starpo-s` on hotpotqa, minigrid: these runs applied thinking_scale_rule `sign_aware`; the preset applies "
        "`multiplicative`.",
    ]


def test_the_thinking_scale_rules_offered_are_the_critics(learning):
    from trl_starpo.algorithms.critics import THINKING_SCALE_RULES

    assert learning.protocol.THINKING_SCALE_RULES == THINKING_SCALE_RULES


def test_the_dpo_row_can_pair_as_eto_does(learning, monkeypatch, tmp_path):
    import trl_starpo.dpo

    assert learning.protocol.DPO_PAIRINGS == trl_starpo.dpo.PAIRINGS
    chosen, configured = [], {}
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, scale, **_: chosen.append(scale) or dict(
        updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    learning.cli.main(["--env", "hotpotqa", "--method", "dpo", "--dpo-pairs", "expert", "--records", str(tmp_path)])
    assert chosen[0].dpo_pairs == "expert"
    default = learning.protocol.Scale()
    assert (learning.protocol.setting_key("hotpotqa", learning.protocol.COLUMNS["hotpotqa"], chosen[0], "m")
            != learning.protocol.setting_key("hotpotqa", learning.protocol.COLUMNS["hotpotqa"], default, "m"))
    with pytest.raises(SystemExit):  # the pairing is the dpo row's alone
        learning.cli.main(["--method", "dpo", "starpo-s", "--dpo-pairs", "expert", "--records", str(tmp_path)])

    class Configured(Exception):
        pass

    def configure(**kwargs):
        configured.update(kwargs)
        raise Configured

    monkeypatch.setattr(trl_starpo.dpo, "TrajectoryDPOConfig", configure)
    monkeypatch.setattr(learning.training, "load_model", lambda path: (None, None))
    with pytest.raises(Configured):
        learning.training.train_dpo("hotpotqa", learning.protocol.COLUMNS["hotpotqa"], chosen[0], 0, tmp_path,
                                    tmp_path / "run")
    assert configured["pairs"] == "expert"
    # ETO explores each task once: a round plays as many episodes as the default pairing's, each on another task
    assert (configured["num_generations"], configured["tasks_per_round"]) == (1, default.dpo_tasks_per_round
                                                                               * default.num_generations)


def test_the_table_is_made_without_loading_torch(tmp_path):
    # Scale's bf16 is asked of the hardware when a run starts, not when the script loads
    probe = (
        "import runpy, sys; sys.argv = ['learning.py', '--table', '--records', sys.argv[1]]\n"
        "runpy.run_path(%r, run_name='__main__')\n"
        "print('loaded torch' if 'torch' in sys.modules else 'no torch')" % str(ROOT / "benchmarks" / "learning.py")
    )
    records = tmp_path / "iterations4"
    # its curves are written there
    shutil.copytree(ROOT / "benchmarks" / "learning_runs" / "ablations" / "iterations4", records)
    done = subprocess.run([sys.executable, "-c", probe, str(records)], capture_output=True, text=True, check=True)
    assert "| hotpotqa | `starpo-s` | 0 | 30/64 |" in done.stdout
    assert done.stdout.rstrip().endswith("no torch")


def budgeted_run(learning, environment, method, num_iterations, model, tmp_path, monkeypatch, **scale_fields):
    """A 12-turn run of ``method`` on the counter environment; its record and its last checkpoint's trainer state."""
    column = learning.protocol.Column(
        held_out="test", budget=12, sft_episodes=4, sft_epochs=1,
        rollout=dict(max_turns=3, max_actions_per_turn=1, max_actions_per_trajectory=3, max_tokens_per_turn=24,
                     max_context_length=512, enable_thinking=True),
    )
    monkeypatch.setitem(learning.protocol.COLUMNS, environment, column)
    scale = dataclasses.replace(learning.protocol.SMOKE, num_iterations=num_iterations, **scale_fields)
    record = learning.runs.run_one(method, environment, 0, scale=scale, model=model, workdir=tmp_path / "work",
                              records=tmp_path / "records", column=column)
    checkpoints = (tmp_path / "work" / "runs" / environment).glob(f"{method}-seed0-*/checkpoint-*/trainer_state.json")
    last = max(checkpoints, key=lambda p: int(p.parent.name.split("-")[1]))
    assert record["turns"] >= column.budget > record["curve"][-2][0]  # stopped at the first batch over the budget
    return record, json.loads(last.read_text())


@pytest.mark.slow
def test_each_rollout_batch_serves_num_iterations_optimizer_steps(learning, counter_env, tiny_model_dir, tmp_path,
                                                                   monkeypatch):
    record, state = budgeted_run(learning, counter_env, "starpo", 2, tiny_model_dir, tmp_path, monkeypatch)
    assert state["global_step"] == 2 * record["updates"]  # every batch, the last included, got both passes


@pytest.mark.slow
def test_the_budget_stop_waits_for_a_batch_cut_short_by_kl_early_stopping(learning, counter_env, tiny_model_dir,
                                                                          tmp_path, monkeypatch):
    from trl_starpo.algorithms.kl_control import KLEarlyStopping

    # every measurement stops the batch (the tiny model's groups have no spread, so its real KL stays 0): each
    # rollout batch gets one optimizer step of the three num_iterations asks for, and batches start off multiples of 3
    def always_stop(self, kl):
        self.triggered = True
        return True

    monkeypatch.setattr(KLEarlyStopping, "observe", always_stop)
    record, state = budgeted_run(learning, counter_env, "starpo-s", 3, tiny_model_dir, tmp_path, monkeypatch)
    assert state["global_step"] == record["updates"]  # one step a batch, and none on a batch beyond the budget


@pytest.mark.slow
@pytest.mark.parametrize(("chosen", "expected"), [(None, "multiplicative"), ("sign_aware", "sign_aware")])
def test_the_chosen_thinking_scale_rule_is_the_one_the_trainer_applies(learning, counter_env, tiny_model_dir,
                                                                      tmp_path, monkeypatch, chosen, expected):
    import trl_starpo.algorithms.critics

    applied = []
    real = trl_starpo.algorithms.critics.scale_by_thinking

    def spy(advantages, scales, rule):
        applied.append(rule)
        return real(advantages, scales, rule)

    monkeypatch.setattr(trl_starpo.algorithms.critics, "scale_by_thinking", spy)
    record, _ = budgeted_run(learning, counter_env, "starpo-s", 1, tiny_model_dir, tmp_path, monkeypatch,
                             thinking_scale_rule=chosen)
    assert applied and set(applied) == {expected}  # the preset's rule, or the one chosen over it
    assert record["thinking_scale_rule"] == expected  # named in the record either way


def test_a_dpo_record_whose_rounds_played_in_fp32_is_not_reused_for_a_bf16_run(learning, counter_env, monkeypatch,
                                                                              tmp_path):
    import dataclasses

    def record(method, bf16, **more):
        return {"method": method, "scale": {"bf16": bf16}, **more}

    class Trained(Exception):
        pass

    column = learning.protocol.Column(held_out="test", budget=12, rollout=dict(max_turns=1))
    scale = dataclasses.replace(learning.protocol.SMOKE, bf16=True)
    recorded = {"method": "dpo", "setting": learning.protocol.setting_key(counter_env, column, scale, "m"),
                "thinking_scale_rule": None, "scale": {"bf16": True}}
    path = learning.runs.record_path(tmp_path, counter_env, "dpo", 0)
    path.parent.mkdir(parents=True)
    monkeypatch.setattr(learning.runs, "warm_start", lambda *args: tmp_path)
    monkeypatch.setattr(learning.runs, "train_dpo", lambda *args: (_ for _ in ()).throw(Trained))
    run = dict(scale=scale, model="m", column=column, workdir=tmp_path / "work", records=tmp_path)
    path.write_text(json.dumps(recorded))
    with pytest.raises(Trained):  # its rounds played in fp32: run again
        learning.runs.run_one("dpo", counter_env, 0, **run)
    path.write_text(json.dumps({**recorded, "collection_precision": "bf16 autocast"}))
    assert learning.runs.run_one("dpo", counter_env, 0, **run)["collection_precision"] == "bf16 autocast"

    recorded_precision = learning.protocol.recorded_collection_precision
    precision = learning.protocol.collection_precision
    assert recorded_precision(record("dpo", True)) == "fp32"  # before 2026-12-04
    assert precision("dpo", True) == "bf16 autocast"
    assert recorded_precision(record("dpo", True, collection_precision="bf16 autocast")) == "bf16 autocast"
    # the presets' trainers always collected under their autocast; rows without training collect nothing
    assert recorded_precision(record("starpo-s", True)) == precision("starpo-s", True) == "bf16 autocast"
    assert recorded_precision(record("gigpo", False)) == "fp32"
    assert recorded_precision(record("sft", True)) is precision("sft", True)
    assert precision("sft", True) is None


def test_runs_started_side_by_side_build_one_warm_start(learning, monkeypatch, tmp_path):
    import multiprocessing
    import time

    import trl_starpo.recipes

    log = tmp_path / "built.txt"

    def run_sft(environment, argv):  # records each build; the other process arrives while this one sleeps
        folder = Path(argv[argv.index("--output_dir") + 1])
        folder.mkdir(parents=True, exist_ok=True)
        with log.open("a") as file:
            file.write(argv[argv.index("--resume_from_checkpoint") + 1] + "\n")
        time.sleep(1.0)

    monkeypatch.setattr(trl_starpo.recipes, "run_sft", run_sft)
    column = dataclasses.replace(learning.protocol.COLUMNS["hotpotqa"], warm_start_adapter=None)  # built here
    scale = dataclasses.replace(learning.protocol.SMOKE, bf16=False)
    runs = [multiprocessing.get_context("fork").Process(
        target=learning.training.warm_start, args=("hotpotqa", column, scale, "m", tmp_path)) for _ in range(2)]
    for run in runs:
        run.start()
    for run in runs:
        run.join(timeout=60)
    assert [run.exitcode for run in runs] == [0, 0]
    assert log.read_text().split() == ["false"]  # built once; the second run found it made
    folder = learning.training.warm_start("hotpotqa", column, scale, "m", tmp_path)
    assert (folder / "warm_start.json").is_file() and log.read_text().split() == ["false"]
    # a warm start cut short after a checkpoint goes on from it, and its checkpoints go once it is merged
    (folder / "warm_start.json").unlink()
    (folder / "checkpoint-8").mkdir()
    learning.training.warm_start("hotpotqa", column, scale, "m", tmp_path)
    assert log.read_text().split() == ["false", "true"] and not (folder / "checkpoint-8").exists()


def test_a_warm_start_built_for_a_column_with_a_shipped_adapter_follows_its_recipe(learning, monkeypatch, tmp_path):
    import trl_starpo.recipes

    built = []

    def run_sft(environment, argv):
        built.append(argv)
        Path(argv[argv.index("--output_dir") + 1]).mkdir(parents=True)

    monkeypatch.setattr(trl_starpo.recipes, "run_sft", run_sft)
    scale = dataclasses.replace(learning.protocol.SMOKE, bf16=False)
    shipped = learning.protocol.COLUMNS["alfworld"]
    answer_only = dataclasses.replace(shipped, warm_start_adapter=None,
                                      rollout={**shipped.rollout, "enable_thinking": False})
    cosine = dataclasses.replace(answer_only, sft_schedule=None)
    learning.training.warm_start("alfworld", answer_only, scale, "m", tmp_path)
    learning.training.warm_start("alfworld", cosine, scale, "m", tmp_path)
    schedules = [(argv[argv.index("--lr_scheduler_type") + 1], argv[argv.index("--warmup_steps") + 1]) for argv in built]
    assert schedules == [("constant_with_warmup", "4"), ("cosine", "0")]  # two builds, each in its own folder
    assert len({argv[argv.index("--output_dir") + 1] for argv in built}) == 2
    # the schedule is part of a built warm start's setting, and none of one that starts from the shipped adapter
    key = learning.protocol.setting_key
    assert key("alfworld", answer_only, scale, "m") != key("alfworld", cosine, scale, "m")
    assert key("alfworld", shipped, scale, "m") == key("alfworld", dataclasses.replace(shipped, sft_schedule=None),
                                                        scale, "m")


def test_runs_go_side_by_side_with_their_own_logs(learning, tmp_path, capsys):
    # each run waits for the other to start: run one at a time, both would fail
    child = ("import pathlib, sys, time\n"
             "here, name = pathlib.Path(sys.argv[1]), sys.argv[2]\n"
             "(here / name).touch()\n"
             "deadline = time.time() + 10\n"
             "while not all((here / n).exists() for n in ('a', 'b')) and time.time() < deadline:\n"
             "    time.sleep(0.05)\n"
             "print('out', name, flush=True)\n"
             "print('err', name, file=sys.stderr)\n"
             "sys.exit(3 if name == 'b' else 0 if (here / 'b').exists() else 4)\n")
    commands = {f"env/{name}/seed 0": [sys.executable, "-c", child, str(tmp_path), name] for name in ("a", "b")}
    logs = tmp_path / "logs"
    assert learning.scheduler.run_processes(commands, 2, logs) == ["env/b/seed 0"]
    text = (logs / "env-a-seed0.log").read_text().splitlines()
    assert text[0].startswith("# ") and text[-2:] == ["out a", "err a"]  # what the run printed, tracebacks too
    assert "env/b/seed 0: failed (exit 3)" in capsys.readouterr().out
    (tmp_path / "b").unlink()
    commands.pop("env/a/seed 0")
    learning.scheduler.run_processes(commands, 2, logs)  # a rerun appends to its log
    assert (logs / "env-b-seed0.log").read_text().count("err b") == 2


def test_an_interrupt_stops_the_runs_under_way(learning, monkeypatch, tmp_path):
    import types

    pid_file = tmp_path / "pid"
    child = f"import os, pathlib, time; pathlib.Path({str(pid_file)!r}).write_text(str(os.getpid())); time.sleep(120)"

    def sleep(seconds):  # the user presses Ctrl-C once the run is under way
        while not pid_file.exists() or not pid_file.read_text():
            time.sleep(0.05)
        raise KeyboardInterrupt

    import time

    monkeypatch.setattr(learning.scheduler, "time", types.SimpleNamespace(sleep=sleep, time=time.time))
    with pytest.raises(KeyboardInterrupt):
        learning.scheduler.run_processes({"long": [sys.executable, "-c", child], "next": [sys.executable, "-c", ""]}, 2,
                               tmp_path / "logs")
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)  # stopped and reaped


def test_side_by_side_runs_get_a_share_of_the_cores(learning, monkeypatch, tmp_path):
    calls = []
    monkeypatch.setattr(learning.cli, "run_processes", lambda commands, jobs, logs: calls.append((commands, jobs, logs))
                        or [])
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(8)), raising=False)
    base = ["--env", "hotpotqa", "--method", "random", "--workdir", str(tmp_path), "--records", str(tmp_path / "r")]

    def threads(*argv):
        learning.cli.main([*base, *argv])
        commands = calls[-1][0]
        return {c[c.index("--threads") + 1] if "--threads" in c else None for c in commands.values()}

    assert threads("--seed", "0", "1", "2", "3", "--jobs", "4") == {"2"}
    assert threads("--seed", "0", "1", "--jobs", "8") == {"4"}  # two runs share the 8 cores, not eight
    assert threads("--seed", "0", "1", "--jobs", "2", "--threads", "3") == {"3"}
    assert threads("--seed", "0", "1") == {None}  # one at a time: torch's default
    assert calls[-1][2] == tmp_path / "logs"
    learning.cli.main([*base, "--seed", "0", "1", "--jobs", "2", "--smoke"])
    assert calls[-1][2] == tmp_path / "smoke" / "logs"
    with pytest.raises(SystemExit):
        learning.cli.main([*base, "--seed", "0", "1", "--jobs", "0"])


def test_exploration_is_evaluated_on_validation_in_a_folder_of_its_own(learning, monkeypatch, tmp_path):
    chosen = []
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, column, **_: chosen.append(column) or dict(
        updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    learning.cli.main(["--env", "hotpotqa", "--method", "sft", "--held-out-split", "validation", "--records",
                       str(tmp_path)])
    assert chosen[0].held_out == "validation" and learning.protocol.COLUMNS["hotpotqa"].held_out == "test"
    scale = learning.protocol.Scale()
    assert (learning.protocol.setting_key("hotpotqa", chosen[0], scale, "m")
            != learning.protocol.setting_key("hotpotqa", learning.protocol.COLUMNS["hotpotqa"], scale, "m"))
    with pytest.raises(SystemExit):  # never into the main table's test-split records
        learning.cli.main(["--env", "hotpotqa", "--method", "sft", "--held-out-split", "validation"])


def test_long_episodes_under_a_window_are_a_setting_of_their_own(learning, monkeypatch, tmp_path):
    chosen, commands = [], []
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, column, **_: chosen.append(column) or dict(
        updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    monkeypatch.setattr(learning.cli, "run_processes", lambda c, jobs, logs: commands.append(c) or [])
    flags = ["--max-turns", "50", "--context-policy", "window", "--history-turns", "3", "--records", str(tmp_path)]
    learning.cli.main(["--env", "alfworld", "--method", "sft", *flags])
    rollout = chosen[0].rollout
    assert (rollout["max_turns"], rollout["max_actions_per_trajectory"]) == (50, 50)
    assert (rollout["context_policy"], rollout["history_turns"]) == ("window", 3)
    assert learning.protocol.COLUMNS["alfworld"].rollout["max_turns"] == 10
    scale = learning.protocol.Scale()
    assert (learning.protocol.setting_key("alfworld", chosen[0], scale, "m")
            != learning.protocol.setting_key("alfworld", learning.protocol.COLUMNS["alfworld"], scale, "m"))
    # the warm start and the RL run are given the window as flags
    assert learning.training.rollout_flags(chosen[0])[-6:-2] == ["--context_policy", "window", "--history_turns", "3"]
    learning.cli.main(["--env", "alfworld", "--method", "sft", "--seed", "0", "1", *flags])  # children get it too
    (command,) = {tuple(c[c.index("--max-turns"):c.index("--max-turns") + 6]) for c in commands[-1].values()}
    assert command == ("--max-turns", "50", "--context-policy", "window", "--history-turns", "3")
    with pytest.raises(SystemExit):  # never into the main table's records
        learning.cli.main(["--env", "alfworld", "--method", "sft", "--context-policy", "window"])
    # a window's contexts stay short: it keeps the column's context limit, where `full` grows it with the horizon
    assert rollout["max_context_length"] == learning.protocol.COLUMNS["alfworld"].rollout["max_context_length"] == 2048
    learning.cli.main(["--env", "alfworld", "--method", "sft", "--max-turns", "50", "--context-policy", "full",
                       "--records", str(tmp_path / "full")])
    assert (chosen[-1].rollout["max_turns"], chosen[-1].rollout["max_context_length"]) == (50, 10240)
    assert "context_policy" not in chosen[-1].rollout
    short = learning.cli.with_horizon(learning.protocol.COLUMNS["alfworld"], 6, "full", 2)
    assert short.rollout["max_context_length"] == 2048  # a shorter horizon keeps the column's limit


def test_the_thinking_ablations_are_settings_of_their_own(learning, monkeypatch, tmp_path):
    chosen, commands = [], []
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, column, scale, **_: chosen.append((column, scale)) or
                        dict(updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    monkeypatch.setattr(learning.cli, "run_processes", lambda c, jobs, logs: commands.append(c) or [])
    protocol, records = learning.protocol, ["--records", str(tmp_path)]
    learning.cli.main(["--env", "alfworld", "--method", "starpo-s", "--no-thinking-critic", *records])
    learning.cli.main(["--env", "alfworld", "--method", "starpo-s", "--answer-only", *records])
    (no_critic_column, no_critic), (answer_only, scale) = chosen
    column = protocol.COLUMNS["alfworld"]
    assert no_critic.thinking_critic is False and no_critic_column == column  # thinking kept, the critic off
    assert answer_only.rollout["enable_thinking"] is False and column.rollout["enable_thinking"] is True
    assert answer_only.warm_start_adapter is None  # the shipped adapter thinks: a warm start made the same way
    keys = {protocol.setting_key("alfworld", c, s, "m") for c, s in ((column, protocol.Scale()), chosen[0], chosen[1])}
    assert len(keys) == 3
    # no thinking critic acts, so none names a rule
    assert protocol.applied_rule("starpo-s", column, no_critic) is None
    assert protocol.applied_rule("starpo-s", answer_only, scale) is None
    assert protocol.applied_rule("starpo-s", column, protocol.Scale()) == "multiplicative"
    for flag in ("--no-thinking-critic", "--answer-only"):
        learning.cli.main(["--env", "alfworld", "--method", "starpo-s", "--seed", "0", "1", flag, *records])
        assert all(flag in command for command in commands[-1].values())  # children get it too
    for flag in ("--no-thinking-critic", "--answer-only"):
        with pytest.raises(SystemExit):  # never into the main table's records
            learning.cli.main(["--env", "alfworld", "--method", "starpo-s", flag])
        with pytest.raises(SystemExit):  # nothing to ablate where turns answer only
            learning.cli.main(["--env", "hotpotqa", "--method", "starpo-s", flag, *records])
        with pytest.raises(SystemExit):  # no critic to set a rule for
            learning.cli.main(["--env", "alfworld", "--method", "starpo-s", flag, "--thinking-scale-rule", "relative",
                               *records])
    with pytest.raises(SystemExit):  # answer-only turns have no thinking to score: one ablation at a time
        learning.cli.main(["--env", "alfworld", "--method", "starpo-s", "--no-thinking-critic", "--answer-only",
                           *records])
    configured = starpo_config_of(learning, monkeypatch, "starpo-s", "alfworld", column, no_critic, 0, tmp_path,
                                  tmp_path / "run")
    assert configured["preset"] == "starpo-s" and configured["thinking_critic"] is False


def test_checkpoints_from_another_warm_start_are_not_resumed(learning, tmp_path):
    run_dir = tmp_path / "run"
    (run_dir / "checkpoint-2").mkdir(parents=True)
    (run_dir / "setting.json").write_text("{}")
    learning.runs.restart_on_new_warm_start(run_dir, "minigrid-aaa")
    assert (run_dir / "checkpoint-2").is_dir()  # a run folder from before the marker keeps its checkpoints
    learning.runs.restart_on_new_warm_start(run_dir, "minigrid-aaa")
    assert (run_dir / "checkpoint-2").is_dir()  # the same start: resumed
    learning.runs.restart_on_new_warm_start(run_dir, "minigrid-bbb")  # the split changed, the start was rebuilt
    assert sorted(p.name for p in run_dir.iterdir()) == ["setting.json", "warm_start.json"]
    assert json.loads((run_dir / "warm_start.json").read_text()) == {"warm_start": "minigrid-bbb"}


def test_a_column_starts_from_its_shipped_adapter(learning, adapter_dir, tiny_model_dir, tmp_path, monkeypatch):
    import torch
    from safetensors.torch import load_file

    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(learning.training, "ROOT", tmp_path)  # the adapter is named relative to the repository
    column = dataclasses.replace(learning.protocol.COLUMNS["hotpotqa"], warm_start_adapter="adapter")
    scale, work = learning.protocol.Scale(), tmp_path / "work"
    start = learning.training.warm_start("hotpotqa", column, scale, tiny_model_dir, work)
    assert start.parent == work / "sft" and start.name.startswith("hotpotqa-shipped-")
    assert start.name == learning.training.shipped_warm_start_name("hotpotqa", "adapter", tiny_model_dir)
    assert start.resolve().parent == tmp_path / "cache" / "warm_starts"  # the merged model, not a copy of it
    merged, base = load_file(start / "model.safetensors"), load_file(Path(tiny_model_dir) / "model.safetensors")
    assert any(not torch.equal(merged[name], base[name]) for name in base)  # the adapter's update is in the weights
    monkeypatch.setattr(Path, "symlink_to", lambda *args, **kwargs: pytest.fail("linked again"))
    assert learning.training.warm_start("hotpotqa", column, scale, tiny_model_dir, work) == start
    monkeypatch.undo()
    monkeypatch.setenv("TRL_STARPO_CACHE", str(tmp_path / "cache"))
    monkeypatch.setattr(learning.training, "ROOT", tmp_path)
    shutil.rmtree(start.resolve())  # the cache emptied: merged and linked again
    assert learning.training.warm_start("hotpotqa", column, scale, tiny_model_dir, work) == start
    assert (start / "model.safetensors").is_file()
    # a rebuilt adapter is another warm start, whose runs start over (runs.restart_on_new_warm_start)
    config = json.loads((adapter_dir / "adapter_config.json").read_text())
    (adapter_dir / "adapter_config.json").write_text(json.dumps({**config, "revision": "rebuilt"}))
    assert learning.training.warm_start("hotpotqa", column, scale, tiny_model_dir, work).name != start.name
    # the setting names the adapter, so that its runs and records are their own
    assert (learning.protocol.setting_key("hotpotqa", column, scale, "m")
            != learning.protocol.setting_key("hotpotqa", learning.protocol.COLUMNS["hotpotqa"], scale, "m"))


def test_a_record_from_another_shipped_adapter_is_not_reused(learning, adapter_dir, tiny_model_dir, tmp_path,
                                                              monkeypatch):
    monkeypatch.setattr(learning.training, "ROOT", tmp_path)
    column = dataclasses.replace(learning.protocol.COLUMNS["hotpotqa"], warm_start_adapter="adapter")
    scale = dataclasses.replace(learning.protocol.Scale(), bf16=False)

    class Ran(Exception):
        pass

    monkeypatch.setattr(learning.runs, "warm_start", lambda *args: (_ for _ in ()).throw(Ran()))
    record = {"setting": learning.protocol.setting_key("hotpotqa", column, scale, tiny_model_dir),
              "thinking_scale_rule": None, "collection_precision": None,
              "warm_start": learning.training.shipped_warm_start_name("hotpotqa", "adapter", tiny_model_dir)}
    path = learning.runs.record_path(tmp_path / "records", "hotpotqa", "sft", 0)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record))
    run = dict(scale=scale, model=tiny_model_dir, workdir=tmp_path / "work", records=tmp_path / "records",
               column=column)
    assert learning.runs.run_one("sft", "hotpotqa", 0, **run) == record
    path.write_text(json.dumps({**record, "warm_start": "hotpotqa-shipped-0000000000"}))
    with pytest.raises(Ran):
        learning.runs.run_one("sft", "hotpotqa", 0, **run)


def test_the_shipped_adapter_gives_way_to_a_warm_start_of_another_setting(learning, monkeypatch, tmp_path, capsys):
    from trl_starpo.models import DEFAULT_MODEL

    chosen = []
    monkeypatch.setattr(learning.cli, "run_one", lambda *args, column, **_: chosen.append(column) or dict(
        updates=0, turns=0, held_out=dict(successes=0, episodes=0)))
    shipped = dataclasses.replace(learning.protocol.COLUMNS["hotpotqa"], warm_start_adapter="recipes/x")
    monkeypatch.setitem(learning.protocol.COLUMNS, "hotpotqa", shipped)
    base = ["--env", "hotpotqa", "--method", "sft", "--records", str(tmp_path)]
    kept = [[], ["--held-out-split", "validation"], ["--budget", "100"], ["--model", DEFAULT_MODEL],
            ["--max-turns", str(shipped.rollout["max_turns"])], ["--context-policy", "full"]]
    own = [["--sft-episodes", "8"], ["--max-turns", "6"], ["--context-policy", "window"], ["--model", "other/model"],
           ["--smoke"]]
    for flags in kept:
        learning.cli.main([*base, *flags])
    assert "builds its own" not in capsys.readouterr().out
    for flags in own:
        learning.cli.main([*base, *flags])
        assert "builds its own" in capsys.readouterr().out  # never silently
    assert [column.warm_start_adapter for column in chosen] == ["recipes/x"] * len(kept) + [None] * len(own)


@pytest.mark.parametrize("environment", ["alfworld", "hotpotqa", "minigrid"])
def test_a_shipped_warm_start_is_a_lora_of_the_column(learning, environment):
    from trl_starpo.models import DEFAULT_MODEL

    assert {name for name, column in learning.protocol.COLUMNS.items() if column.warm_start_adapter} == {
        "alfworld", "hotpotqa", "minigrid"}  # every shipped adapter is checked here
    column, scale = learning.protocol.COLUMNS[environment], learning.protocol.Scale()
    adapter = ROOT / column.warm_start_adapter
    shipped = json.loads((adapter / "adapter_config.json").read_text())
    assert shipped["base_model_name_or_path"] == DEFAULT_MODEL
    assert (shipped["r"], shipped["lora_alpha"]) == (scale.lora_r, 2 * scale.lora_r)
    assert sorted(shipped["target_modules"]) == sorted(learning.protocol.LORA_TARGETS)
    assert (adapter / "adapter_model.safetensors").stat().st_size < 12_000_000


@pytest.mark.parametrize("environment", ["alfworld", "hotpotqa", "minigrid"])
def test_a_columns_warm_start_is_what_its_sft_recipe_builds(learning, monkeypatch, tmp_path, environment):
    # recipes/configs/<env>_sft.yaml builds the column's warm start (rebuilds its shipped adapter where it has one),
    # as the benchmark does where it cannot start from an adapter: both parse to the same configs, but for where they
    # write and log and how they spend memory
    import trl_starpo.recipes
    from trl import ModelConfig, TrlParser

    from trl_starpo.models import DEFAULT_MODEL
    from trl_starpo.recipes import EvaluationArguments
    from trl_starpo.sft import ExpertSFTConfig

    column, scale = learning.protocol.COLUMNS[environment], dataclasses.replace(learning.protocol.Scale(), bf16=True)
    built = []

    def run_sft(name, argv):
        built.append(argv)
        Path(argv[argv.index("--output_dir") + 1]).mkdir(parents=True)

    monkeypatch.setattr(trl_starpo.recipes, "run_sft", run_sft)
    learning.training.warm_start(environment, dataclasses.replace(column, warm_start_adapter=None), scale,
                                 DEFAULT_MODEL, tmp_path)
    recipe = ["--config", str(ROOT / "recipes" / "configs" / f"{environment}_sft.yaml")]
    where = {"output_dir", "logging_dir", "logging_steps", "save_strategy", "save_steps", "save_total_limit",
             "resume_from_checkpoint", "report_to",
             "gradient_checkpointing", "activation_checkpointing"}  # recomputes the same activations: memory only
    parsed = []
    for argv in (built[0], recipe):
        _, sft, model = TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig)).parse_args_and_config(args=argv)
        fields = {**dataclasses.asdict(model), **{name: value for name, value in dataclasses.asdict(sft).items()
                                                 if name not in where}}
        parsed.append({**fields, "lora_target_modules": sorted(fields["lora_target_modules"]),
                       "environment_kwargs": fields["environment_kwargs"] or {}})  # None: none given
    assert parsed[0] == parsed[1]


def test_an_update_held_up_does_not_make_the_time_split(learning):
    history = [{"time/step": seconds, "rollout/turns": turns} for seconds, turns in ((120.0, 9), (130.0, 10),
                                                                                   (6000.0, 8))]
    history.append({"train_runtime": 1.0})
    assert learning.training.time_split(history) == {"time/step": 130.0}  # the median; the mean would be 2,083 s
    assert learning.training.training_means(history) == {"rollout/turns": 9.0}


def test_the_committed_results_page_is_what_its_records_make(learning):
    # docs/results.md's generated section is regenerated from the records alone (python benchmarks/learning.py --table)
    block = learning.table.markdown(learning.table.load_records())
    assert block in (ROOT / "docs" / "results.md").read_text()


def test_compare_pairs_one_method_across_records_folders_by_task(learning, tmp_path, capsys):
    def write(folder, seed, solved, digest="d1", method="starpo-s", tasks=20):
        outcomes = {f"t{i}": int(i in solved) for i in range(tasks)}
        held_out = {"successes": len(solved), "episodes": tasks, "outcomes": outcomes,
                    **({"tasks_sha256": digest} if digest else {})}
        path = tmp_path / folder / "minigrid" / f"{method}-seed{seed}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"method": method, "environment": "minigrid", "seed": seed, "setting": "s",
                                    "curve": [], "scale": {}, "column": {"rollout": {}}, "turns": 0, "updates": 0,
                                    "commit": "c", "held_out": held_out}))

    for seed in (0, 1):
        write("main", seed, set(range(10)))  # tasks 0-9 every seed
        write("main", seed, set(range(20)), method="sft")  # another method: left out
        write("ablation", seed, set(range(4, 18)))  # 4-17: 8 tasks gained, 4 lost
        write("unnamed", seed, set(range(20)), digest=None)
        write("other-split", seed, set(range(20)), digest="d2")
    write("ablation", 2, set(range(20)))  # a seed the reference lacks: in its rate, not in the pairing
    write("other-seeds", 3, set(range(20)))
    (tmp_path / "empty").mkdir()
    folders = [tmp_path / name for name in ("main", "ablation", "unnamed", "other-split", "other-seeds", "empty")]
    learning.cli.main(["--compare", *map(str, folders), "--env", "minigrid", "--method", "starpo-s"])
    rows = {line.split(" | ")[0].strip("| `").rsplit("/", 1)[-1]: line.split(" | ")[1:]
            for line in capsys.readouterr().out.splitlines() if line.startswith("| `")}
    # half of 20 tasks, each solved by every seed or by none: a bootstrap over tasks gives Binomial(20, 0.5)'s
    # 2.5% and 97.5% quantiles, 6 and 14 tasks
    assert rows["main"][:2] == ["20/40 = 50% [30-70]", "0, 1"]
    ablation = rows["ablation"]
    assert ablation[0].startswith("48/60 = 80% [") and ablation[1] == "0, 1, 2"
    # seeds 0 and 1: 28/40 against 20/40 on the same tasks, +20 points; 8 tasks up and 4 down, p = 0.39
    assert ablation[2].startswith("+20 points (95% interval of the difference [") and "seeds 0, 1)" in ablation[2]
    assert ablation[3:5] == ["8 / 4", "0.39 |"]
    assert rows["unnamed"][2] == rows["other-split"][2] == "not paired: other or unnamed held-out tasks"
    assert rows["other-seeds"][2] == "no seed in common"
    assert rows["empty"][0] == "—"

    for wrong in (["--method", "sft", "starpo-s"], ["--method", "starpo_s"], ["--method", "sft", "--compare",
                                                                               str(tmp_path / "missing")]):
        with pytest.raises(SystemExit):
            learning.cli.main(["--compare", str(folders[0]), "--env", "minigrid", *wrong])


def test_a_checkpoint_on_the_way_is_evaluated_without_training(learning, counter_env, tiny_model_dir, tmp_path,
                                                               monkeypatch, capsys):
    column = learning.protocol.Column(
        held_out="test", budget=12, sft_episodes=4, sft_epochs=1,
        rollout=dict(max_turns=3, max_actions_per_turn=1, max_actions_per_trajectory=3, max_tokens_per_turn=24,
                     max_context_length=512, enable_thinking=True),
    )
    monkeypatch.setitem(learning.protocol.COLUMNS, counter_env, column)
    work = tmp_path / "work"
    common = dict(scale=learning.protocol.SMOKE, model=tiny_model_dir, workdir=work, column=column)

    # the run keeps only its newest checkpoint: each is copied aside with its run folder's markers before the next
    from trl_starpo import StarPOTrainer

    def keep(folder: Path):
        for checkpoint in folder.glob("checkpoint-*"):
            kept = tmp_path / "kept" / checkpoint.name / folder.name
            shutil.copytree(checkpoint, kept / "checkpoint", dirs_exist_ok=True)
            for marker in ("setting.json", "warm_start.json"):
                shutil.copy(folder / marker, kept)

    original_save = StarPOTrainer._save_checkpoint

    def keep_and_save(self, *args, **kwargs):
        keep(Path(self.args.output_dir))
        original_save(self, *args, **kwargs)

    monkeypatch.setattr(StarPOTrainer, "_save_checkpoint", keep_and_save)
    finished = learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "end", **common)
    run_dir, = (work / "runs" / counter_env).glob("starpo-s-seed0-*")
    keep(run_dir)
    assert finished["updates"] >= 2
    shutil.rmtree(run_dir)

    def kept(update: int) -> Path:
        return tmp_path / "kept" / f"checkpoint-{update}" / run_dir.name / "checkpoint"

    monkeypatch.setattr(StarPOTrainer, "train", lambda *args, **kwargs: pytest.fail("a checkpoint is not trained"))
    first = learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "first", checkpoint=kept(1), **common)
    assert first["checkpoint"] == "checkpoint" and "checkpoint" not in finished
    assert first["updates"] == 1 and first["curve"] == finished["curve"][:1]
    assert first["turns"] == finished["curve"][0][0] < finished["turns"]
    last = learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "last",
                                 checkpoint=kept(finished["updates"]), **common)
    assert last["curve"] == finished["curve"] and last["training_means"] == finished["training_means"]
    assert last["held_out"] == finished["held_out"]  # the last checkpoint is the trained model
    assert not run_dir.exists()  # evaluating a checkpoint makes no run folder

    # a point never replaces the record of another point or of a run's end, nor the other way round
    with pytest.raises(ValueError, match="give this one its own --records folder"):
        learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "end", checkpoint=kept(1), **common)
    with pytest.raises(ValueError, match="give this one its own --records folder"):
        learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "first", **common)
    other = dict(common, column=dataclasses.replace(column, budget=24))
    with pytest.raises(ValueError, match="not trained with these settings"):
        learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "other", checkpoint=kept(1), **other)
    with pytest.raises(ValueError, match="RL preset"):
        learning.runs.run_one("sft", counter_env, 0, records=tmp_path / "other", checkpoint=kept(1), **common)
    (kept(1).parent / "warm_start.json").write_text(json.dumps({"warm_start": "another"}))
    with pytest.raises(ValueError, match="not trained from the warm start"):
        learning.runs.run_one("starpo-s", counter_env, 0, records=tmp_path / "other", checkpoint=kept(1), **common)

    monkeypatch.setattr(learning.cli, "run_one", lambda *args, **kwargs: pytest.fail("refused before any run"))
    for flags, said in ((["--seed", "0", "1", "--records", str(tmp_path / "other")], "one --seed"),
                        ([], "its own --records folder"),  # never into the main table's records
                        (["--table", "--records", str(tmp_path / "other")], "only read records")):
        with pytest.raises(SystemExit):
            learning.cli.main(["--env", counter_env, "--method", "starpo-s", "--checkpoint", str(kept(1)), *flags])
        assert said in capsys.readouterr().err
