import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from trl_starpo.algorithms.advantages import group_relative_advantages
from trl_starpo.algorithms.gigpo import step_advantages

HERE = Path(__file__).parent


ACCELERATE_CONFIGS = HERE.parent / "recipes" / "accelerate_configs"


def launch_two_processes(script: Path, *args: str, port: int) -> subprocess.CompletedProcess:
    """Run ``script`` as a user starts two processes: the shipped DDP config (on CPU: two processes over gloo)."""
    launcher = Path(sys.executable).with_name("accelerate")
    command = [
        str(launcher), "launch", "--config_file", str(ACCELERATE_CONFIGS / "multi_gpu.yaml"), "--num_processes", "2",
        "--dynamo_backend", "no", "--main_process_port", str(port), str(script), *args,
    ]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, capture_output=True, text=True, timeout=600, env=env)


def run_two_processes(tmp_path, model_dir, *extra, port=29517):
    result = launch_two_processes(HERE / "multiprocess_train.py", model_dir, str(tmp_path), *extra, port=port)
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]


@pytest.mark.slow
@pytest.mark.multiprocess
def test_two_processes_share_group_statistics_and_end_with_identical_weights(tmp_path, tiny_agent_dir):
    rank0, rank1 = run_two_processes(tmp_path, tiny_agent_dir)

    assert rank0["world_size"] == rank1["world_size"] == 2
    assert rank0["changed"] and rank1["changed"]
    assert rank0["weights"] == rank1["weights"]
    # One task group of 8 rollouts, split 4 and 4 across the ranks ...
    assert len(set(rank0["task_ids"] + rank1["task_ids"])) == 1
    assert rank0["groups"] == rank1["groups"] == [0] * 4
    # ... normalized with the returns of both ranks, not each rank's half.
    returns = torch.tensor(rank0["returns"] + rank1["returns"])
    expected = group_relative_advantages(returns, group_size=8)
    assert rank0["advantages"] + rank1["advantages"] == pytest.approx(expected.tolist(), abs=1e-5)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_ragen_preset_filters_and_trains_critics_identically_on_two_processes(tmp_path, tiny_agent_dir):
    # Two task groups, one per rank; the variance filter keeps one of them, so one rank trains on nothing that
    # step and must still take part in every collective.
    rank0, rank1 = run_two_processes(tmp_path, tiny_agent_dir, "starpo-s-ragen", port=29518)
    assert rank0["weights"] == rank1["weights"]
    assert rank0["critics"] == rank1["critics"] and set(rank0["critics"]) == {"value_critic"}
    assert rank0["kept_fraction"] == rank1["kept_fraction"] == [0.5] * 3


@pytest.mark.slow
@pytest.mark.multiprocess
def test_gigpo_step_groups_span_the_processes(tmp_path, tiny_agent_dir):
    # One task group of 8 rollouts, 4 on each rank: a turn's step group holds the turns of both ranks that start
    # from its state, so each rank's advantages are those of the whole group computed in one place.
    rank0, rank1 = run_two_processes(tmp_path, tiny_agent_dir, "gigpo", port=29519)
    assert rank0["weights"] == rank1["weights"]
    records = [[tuple(turn) for turn in row] for row in rank0["step_records"] + rank1["step_records"]]
    step, _ = step_advantages(records, group_size=8)
    episode = group_relative_advantages(torch.tensor(rank0["returns"] + rank1["returns"]), 8, scale="none")
    expected = [[episode[i].item() + value for value in row] for i, row in enumerate(step)]
    observed = rank0["turn_advantages"] + rank1["turn_advantages"]
    assert [len(row) for row in observed] == [len(row) for row in expected]
    assert sum(observed, []) == pytest.approx(sum(expected, []), abs=1e-5)


@pytest.mark.slow
@pytest.mark.multiprocess
def test_window_turn_rows_are_padded_alike_on_both_processes(tmp_path, tiny_agent_dir):
    # One group of 8 rollouts, 4 on each rank, each turn a loss row: the ranks play different numbers of turns, and
    # must still feed the loss as many rows (and as many chunks of rows) to stay in step.
    rank0, rank1 = run_two_processes(tmp_path, tiny_agent_dir, "window", port=29520)
    assert rank0["changed"] and rank0["weights"] == rank1["weights"]
    for (rows0, turns0), (rows1, turns1) in zip(rank0["rows"], rank1["rows"]):
        assert rows0 == rows1 >= max(turns0, turns1) and rows0 % 2 == 0


@pytest.mark.parametrize("name, kind", [("multi_gpu", "MULTI_GPU"), ("fsdp2", "FSDP"), ("deepspeed_zero1", "DEEPSPEED"),
                                        ("deepspeed_zero2", "DEEPSPEED"), ("deepspeed_zero3", "DEEPSPEED")])
def test_the_shipped_accelerate_configs_load(name, kind):
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(ACCELERATE_CONFIGS / f"{name}.yaml"))
    assert config.distributed_type == kind and config.num_machines == 1 and not config.use_cpu
    if kind == "DEEPSPEED":
        assert config.deepspeed_config["zero_stage"] == int(name[-1])
    if kind == "FSDP":
        assert config.fsdp_config["fsdp_version"] == 2
