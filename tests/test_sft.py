"""Expert demonstrations as SFT data (trl_starpo.sft) and the SFT warm-start recipe."""

import json
import sys

import pytest
from starpo_testenv import PLAIN_NAME, task_rows

from trl_starpo.rollout.settings import AGENT_FILE, RolloutSettings
from trl_starpo.rollout.collector import RolloutCollector
from trl_starpo.sft import ExpertSFTConfig, expert_demonstrations, expert_plan, expert_response

SETTINGS = RolloutSettings(max_turns=5, max_actions_per_turn=1, max_actions_per_trajectory=5, max_tokens_per_turn=32)


def trained_text(tokenizer, row):
    return tokenizer.decode([t for t, m in zip(row["input_ids"], row["completion_mask"]) if m])


def test_expert_response_format():
    assert expert_response("inc", "Go up.") == "<think>Go up.</think><answer>inc</answer>"
    assert expert_response("inc") == "<answer>inc</answer>"


def test_demonstrations_are_the_collectors_episodes_with_only_responses_trained(counter_env, tiny_tokenizer):
    rows = task_rows("train", 3)  # targets 1, 2, 3 from 0
    demos = expert_demonstrations(counter_env, rows, tiny_tokenizer, SETTINGS, batch_size=2)
    assert demos.column_names == ["input_ids", "completion_mask", "task_id", "success", "turns"]
    assert demos["task_id"] == ["train-0", "train-1", "train-2"]
    assert demos["success"] == [True, True, True] and demos["turns"] == [1, 2, 3]

    row = demos[1]
    assert len(row["input_ids"]) == len(row["completion_mask"])
    # Trained: each response after the prefilled <think>, nothing else (prompt, observations, template).
    assert trained_text(tiny_tokenizer, row) == (
        "At 0, target 2.</think><answer>inc</answer>At 1, target 2.</think><answer>inc</answer>"
    )
    text = tiny_tokenizer.decode(row["input_ids"])
    assert text.count("<|im_start|>assistant\n<think>At") == 2
    assert "<|im_start|>user\nThe counter is at 1.<|im_end|>" in text
    # The tokens are the collector's: the same prompt it renders for this task, then the same glue.
    collector = RolloutCollector.from_config(tiny_tokenizer, SETTINGS)
    from trl_starpo.envs import load_environment

    trajectory, _, _ = collector._start(load_environment(counter_env), rows[1], 1)
    assert row["input_ids"][: len(trajectory.token_ids)] == trajectory.token_ids
    assert not any(row["completion_mask"][: len(trajectory.token_ids)])


def test_windowed_demonstrations_train_each_turn_on_the_context_it_was_given(counter_env, tiny_tokenizer):
    settings = RolloutSettings(**{**SETTINGS.__dict__, "context_policy": "window", "history_turns": 1})
    demos = expert_demonstrations(counter_env, task_rows("train", 3), tiny_tokenizer, settings)
    assert demos["task_id"] == ["train-0", "train-1", "train-1", "train-2", "train-2", "train-2"]
    assert demos["turn"] == [0, 0, 1, 0, 1, 2]
    last = demos[5]  # the third turn of the episode from 0 to 3
    assert trained_text(tiny_tokenizer, last) == "At 2, target 3.</think><answer>inc</answer>"
    seen = tiny_tokenizer.decode([t for t, m in zip(last["input_ids"], last["completion_mask"]) if not m])
    assert "The counter is at 0." in seen and "The counter is at 2." in seen  # the task and the current state
    assert "The counter is at 1." not in seen and "At 1, target 3." not in seen  # older turns and all thinking


def test_answer_only_demonstrations(counter_env, tiny_tokenizer):
    settings = RolloutSettings(**{**SETTINGS.__dict__, "enable_thinking": False})
    demos = expert_demonstrations(counter_env, task_rows("train", 2), tiny_tokenizer, settings)
    assert trained_text(tiny_tokenizer, demos[1]) == "inc</answer>inc</answer>"


def test_a_custom_thinking_function(counter_env, tiny_tokenizer):
    demos = expert_demonstrations(counter_env, task_rows("train", 1), tiny_tokenizer, SETTINGS,
                                  thinking=lambda env, action: f"{action} now")
    assert trained_text(tiny_tokenizer, demos[0]) == "inc now</think><answer>inc</answer>"


def test_unfinished_episodes_are_left_out_unless_asked_for(counter_env, tiny_tokenizer):
    short = RolloutSettings(**{**SETTINGS.__dict__, "max_turns": 1})
    rows = task_rows("train", 3)  # only the first (target 1) is won in one turn
    demos = expert_demonstrations(counter_env, rows, tiny_tokenizer, short)
    assert demos["task_id"] == ["train-0"]
    everything = expert_demonstrations(counter_env, rows, tiny_tokenizer, short, only_successes=False)
    assert everything["success"] == [True, False, False] and everything["turns"] == [1, 1, 1]


def test_a_turn_carries_as_many_expert_actions_as_the_rollouts_allow(counter_env, tiny_tokenizer):
    one_turn = RolloutSettings(**{**SETTINGS.__dict__, "max_turns": 1, "max_actions_per_turn": 3,
                                  "max_actions_per_trajectory": 3})
    demos = expert_demonstrations(counter_env, task_rows("train", 3), tiny_tokenizer, one_turn)
    # targets 1, 2, 3 from 0: each won in its one turn, the plan stopping where the episode ends
    assert demos["success"] == [True, True, True] and demos["turns"] == [1, 1, 1]
    assert trained_text(tiny_tokenizer, demos[0]) == "At 0, target 1.</think><answer>inc</answer>"
    assert trained_text(tiny_tokenizer, demos[2]) == "At 0, target 3.</think><answer>inc || inc || inc</answer>"


def test_the_plan_ahead_leaves_the_environment_as_it_was(counter_env):
    from trl_starpo.envs import load_environment

    environment = load_environment(counter_env)
    environment.reset(options={"task": {"start": 1, "target": 4}})
    assert expert_plan(environment, 5) == ["inc", "inc", "inc"]
    assert expert_plan(environment, 1) == ["inc"]
    assert environment.value == 1


def test_an_environment_that_cannot_be_copied_plays_one_action_a_turn(counter_env, tiny_tokenizer, monkeypatch):
    def refuse(self, memo):
        raise TypeError("cannot pickle '_thread.lock' object")

    monkeypatch.setattr(sys.modules["starpo_testcounter"].CounterEnv, "__deepcopy__", refuse, raising=False)
    several = RolloutSettings(**{**SETTINGS.__dict__, "max_actions_per_turn": 3})
    demos = expert_demonstrations(counter_env, task_rows("train", 3), tiny_tokenizer, several)
    assert demos["success"] == [True, True, True] and demos["turns"] == [1, 2, 3]


def test_an_expert_that_raises_loses_only_its_episode(counter_env, tiny_tokenizer, monkeypatch):
    env_class = sys.modules["starpo_testcounter"].CounterEnv
    original = env_class.expert_action

    def flaky(self):
        if self.target == 2:
            raise RuntimeError("planner timed out")
        return original(self)

    monkeypatch.setattr(env_class, "expert_action", flaky)
    demos = expert_demonstrations(counter_env, task_rows("train", 3), tiny_tokenizer, SETTINGS)
    assert demos["task_id"] == ["train-0", "train-2"]


def test_clear_errors(counter_env, tiny_tokenizer, monkeypatch):
    rows = task_rows("train", 2)
    with pytest.raises(ValueError, match="no expert_action"):
        expert_demonstrations(PLAIN_NAME, rows, tiny_tokenizer, SETTINGS)
    with pytest.raises(ValueError, match="raise max_tokens_per_turn"):
        expert_demonstrations(counter_env, rows, tiny_tokenizer,
                              RolloutSettings(**{**SETTINGS.__dict__, "max_tokens_per_turn": 4}))
    with pytest.raises(ValueError, match="None of the 2 expert episodes"):
        expert_demonstrations(counter_env, rows, tiny_tokenizer, SETTINGS,
                              environment_kwargs={"expert_gives_up": True})
    monkeypatch.setattr(sys.modules["starpo_testcounter"].CounterEnv, "expert_thinking", None)
    with pytest.raises(ValueError, match="no expert_thinking"):
        expert_demonstrations(counter_env, rows, tiny_tokenizer, SETTINGS)


def test_expert_sft_config(tmp_path):
    config = ExpertSFTConfig(output_dir=str(tmp_path), max_context_length=900, environment_kwargs='{"max_steps": 7}')
    assert config.completion_only_loss is True and config.max_length == 900
    assert config.environment_kwargs == {"max_steps": 7}
    assert config.rollout_settings.max_context_length == 900
    with pytest.raises(ValueError, match="completion_only_loss"):
        ExpertSFTConfig(output_dir=str(tmp_path), completion_only_loss=False)
    with pytest.raises(ValueError, match="would cut demonstrations"):
        ExpertSFTConfig(output_dir=str(tmp_path), max_length=512)
    with pytest.raises(ValueError, match="JSON object"):
        ExpertSFTConfig(output_dir=str(tmp_path), environment_kwargs="{max_steps: 7")


def test_sft_recipe_learns_the_demonstrations_and_saves_a_full_model(counter_env, tiny_model_dir, tmp_path,
                                                                     monkeypatch):
    import trl_starpo.sft as sft
    from test_logprobs import projected_rows

    from trl_starpo.recipes import run_sft

    demonstrations = []
    collect = sft.expert_demonstrations
    monkeypatch.setattr(sft, "expert_demonstrations", lambda *a, **k: demonstrations.append(collect(*a, **k)) or
                        demonstrations[-1])
    projected = projected_rows(monkeypatch)
    out = tmp_path / "sft"
    results = run_sft(counter_env, [
        "--model_name_or_path", tiny_model_dir, "--output_dir", str(out), "--max_turns", "4",
        "--max_actions_per_turn", "1", "--max_tokens_per_turn", "24", "--max_context_length", "512",
        "--num_train_epochs", "30", "--per_device_train_batch_size", "8", "--learning_rate", "1e-2",
        "--logging_steps", "1", "--save_strategy", "no", "--report_to", "none",
        "--eval_episodes", "3", "--eval_splits", "validation",
    ])
    losses = [entry["loss"] for entry in json.loads((out / "trainer_state.json").read_text())["log_history"]
              if "loss" in entry]
    assert len(losses) == 30 and losses[-1] < 0.5 * losses[0]
    # the LM head projects the demonstrations' generated tokens only (one batch of all 8 a step), not every position
    (rows,) = demonstrations
    generated = sum(sum(mask) for mask in rows["completion_mask"])
    assert projected == [generated] * 30 and generated < len(rows) * (max(map(len, rows["input_ids"])) - 1) / 4
    assert (out / "model.safetensors").is_file() and not (out / "adapter_config.json").exists()
    agent = json.loads((out / AGENT_FILE).read_text())
    assert agent["environments"] == [counter_env] and agent["rollout"]["max_tokens_per_turn"] == 24
    assert agent["training"]["sft_demonstrations"] == 8
    assert set(results) == {"validation"} and 0.0 <= results["validation"]["format_error_rate"] <= 1.0
    from trl_starpo.json_files import json_text

    # valid JSON: the validity of actions, with none sent (nothing learned to act yet), is null rather than NaN
    assert json.loads((out / "validation_results.json").read_text()) == json.loads(json_text(results))


def test_a_warm_start_cut_short_resumes_from_its_checkpoint(counter_env, tiny_model_dir, tmp_path, monkeypatch):
    from datasets import Dataset, load_from_disk

    import trl_starpo.sft as sft
    from trl_starpo.recipes import run_sft

    out = tmp_path / "sft"
    common = ["--model_name_or_path", tiny_model_dir, "--output_dir", str(out), "--max_turns", "4",
              "--max_actions_per_turn", "1", "--max_tokens_per_turn", "24", "--max_context_length", "512",
              "--per_device_train_batch_size", "4", "--lr_scheduler_type", "constant",
              "--logging_steps", "1", "--save_strategy", "steps", "--save_steps", "1", "--report_to", "none",
              "--eval_episodes", "0"]

    def logged():
        state = json.loads((out / "trainer_state.json").read_text())
        return state["global_step"], [(entry["loss"], entry["learning_rate"]) for entry in state["log_history"]
                                      if "loss" in entry]

    run_sft(counter_env, [*common, "--max_steps", "2", "--learning_rate", "1e-2"])
    step, first = logged()
    assert step == 2 and len(first) == 2 and (out / "checkpoint-2").is_dir()
    saved = out / sft.DEMONSTRATIONS
    played = load_from_disk(str(saved))
    # resumed, the run trains on the demonstrations its first start saved: the expert does not play again
    monkeypatch.setattr(sft, "expert_demonstrations", lambda *a, **k: pytest.fail("the expert played again"))
    # another learning rate shows which steps ran again: resumed, the first two are the checkpoint's, not retrained
    run_sft(counter_env, [*common, "--max_steps", "4", "--learning_rate", "2e-2", "--resume_from_checkpoint", "true"])
    step, resumed = logged()
    assert step == 4 and len(resumed) == 4 and resumed[:2] == first
    assert not list(saved.glob("cache-*"))  # the trainer's map and filter steps wrote nothing into the folder
    assert load_from_disk(str(saved))["input_ids"] == played["input_ids"]

    # the expert plays again, and its demonstrations replace the saved ones, for other settings, for a run that does
    # not resume, and where the marker is gone
    replays = []

    def replay(*args, **kwargs):
        replays.append(1)
        return Dataset.from_dict(played[:len(replays)])

    monkeypatch.setattr(sft, "expert_demonstrations", replay)
    for flags in (["--max_steps", "5", "--resume_from_checkpoint", "true", "--only_successes", "false"],
                  ["--max_steps", "1"]):
        run_sft(counter_env, [*common, "--learning_rate", "2e-2", *flags])
        assert len(load_from_disk(str(saved))) == len(replays)
    (out / f"{sft.DEMONSTRATIONS}.json").unlink()
    run_sft(counter_env, [*common, "--max_steps", "2", "--learning_rate", "2e-2", "--resume_from_checkpoint", "true"])
    assert len(replays) == 3
