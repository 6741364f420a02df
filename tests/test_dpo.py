"""Trajectory DPO: pairing, masking of everything but the model's own tokens, and a few rounds on the tiny model."""

import json

import pytest
import torch
import torch.nn.functional as F
from conftest import CounterEnv
from test_gigpo import trajectory

from trl_starpo.dpo import (
    TrajectoryDPOConfig,
    TrajectoryDPOTrainer,
    TrajectoryPreferenceCollator,
    expert_pairs,
    preference_pairs,
    store_preference_pairs,
    train_online,
)
from trl_starpo.store import TrajectoryStore
from trl_starpo.trajectory import Segment


def test_pairs_are_the_best_and_worst_of_each_task_group():
    def played(task, rewards, **kwargs):
        t = trajectory(["s"] * len(rewards), rewards)
        t.task_id = task
        for name, value in kwargs.items():
            setattr(t, name, value)
        return t

    a_best, a_mid, a_worst = played("a", [0, 1]), played("a", [0.5]), played("a", [0, 0, -0.1])
    failed = played("a", [-5.0], env_error="RuntimeError: boom")  # the environment failed: never a pair
    b = [played("b", [1.0]), played("b", [1.0])]  # no spread: no pair
    c_other_prompt = played("c", [1.0])
    c_low = played("c", [0.0])
    c_low.token_ids[0] = 99  # another first observation: not the same state, no pair
    pairs = preference_pairs([a_mid, a_best, failed, *b, a_worst, c_other_prompt, c_low])
    assert len(pairs) == 1
    row = pairs[0]
    assert (row["task_id"], row["chosen_return"], row["rejected_return"]) == ("a", 1.0, pytest.approx(-0.1))
    assert row["prompt_ids"] == [1]
    assert row["chosen_ids"] == a_best.completion_ids and row["rejected_ids"] == a_worst.completion_ids
    # per turn: thinking, action, observation -> 1, 1, 0
    assert row["chosen_mask"] == [1, 1, 0] * 2 and row["rejected_mask"] == [1, 1, 0] * 3
    # explicit keys split what the default key would pool
    assert len(preference_pairs([a_best, a_worst], keys=[0, 1])) == 0
    with pytest.raises(ValueError, match="2 keys for 1"):
        preference_pairs([a_best], keys=[0, 1])


def test_eto_pairs_each_agent_episode_with_the_experts_win_of_its_task():
    def played(task, rewards, success=False):
        t = trajectory(["s"] * len(rewards), rewards)
        t.task_id, t.success = task, success
        return t

    expert = [played("a", [0, 1], True), played("b", [1], True), played("c", [0, 1], True), played("d", [0], False),
              played("e", [0.5], True)]
    a_worse, a_worst = played("a", [0, 0.5]), played("a", [-0.1, 0])
    b_as_good = played("b", [1], True)  # as good as the expert: nothing to prefer
    d_low = played("d", [-1])  # the expert lost d: no pair
    e_better = played("e", [1.0], True)  # better than the expert: the agent's episode is chosen
    pairs = expert_pairs([a_worse, a_worst, b_as_good, d_low, e_better], expert)  # c: the agent never played it
    assert pairs["task_id"] == ["a", "a", "e"]
    assert [(row["chosen_return"], row["rejected_return"]) for row in pairs] == [
        (1.0, 0.5), (1.0, pytest.approx(-0.1)), (1.0, 0.5)]
    assert pairs[0]["chosen_ids"] == expert[0].completion_ids and pairs[0]["rejected_ids"] == a_worse.completion_ids
    assert pairs[1]["rejected_ids"] == a_worst.completion_ids
    assert pairs[2]["chosen_ids"] == e_better.completion_ids and pairs[2]["rejected_ids"] == expert[4].completion_ids


def test_eto_cuts_the_rejected_episode_after_the_experts_turns_plus_five():
    expert = trajectory(["s"] * 2, [0, 1])
    expert.success = True
    long_failure = trajectory(["s"] * 10, [0] * 10)  # 3 tokens a turn: thinking, action, observation
    (row,) = expert_pairs([long_failure], [expert])
    # 2 + 5 turns kept, ending with the 7th turn's action; the return is still the whole episode's
    assert row["rejected_ids"] == long_failure.completion_ids[: 7 * 3 - 1]
    assert row["rejected_mask"] == ([1, 1, 0] * 7)[:-1] and row["rejected_return"] == 0
    assert row["chosen_ids"] == expert.completion_ids
    (uncut,) = expert_pairs([long_failure], [expert], extra_turns=8)  # 10 turns: nothing past the episode to cut
    assert uncut["rejected_ids"] == long_failure.completion_ids
    (short,) = expert_pairs([long_failure], [expert], extra_turns=0)
    assert len(short["rejected_ids"]) == 2 * 3 - 1
    with pytest.raises(ValueError, match="extra_turns must be >= 0"):
        expert_pairs([long_failure], [expert], extra_turns=-1)


def test_pairs_from_a_saved_store_follow_the_logged_groups(tmp_path):
    store = TrajectoryStore()
    store.add([trajectory(["s"], [1.0]), trajectory(["s"], [0.0])], step=1, environment="counter")
    store.add([trajectory(["s"], [0.0]), trajectory(["s"], [0.0])], step=2, environment="counter")
    store.save(tmp_path / "trajectories")
    pairs = store_preference_pairs(tmp_path / "trajectories")
    assert len(pairs) == 1 and (pairs[0]["chosen_return"], pairs[0]["rejected_return"]) == (1.0, 0.0)


def test_the_collator_masks_observation_and_template_tokens():
    collator = TrajectoryPreferenceCollator(pad_token_id=0)
    example = {"prompt_ids": [1, 2], "chosen_ids": [5, 6, 7, 8], "rejected_ids": [9, 10],
               "chosen_mask": [1, 1, 0, 1], "rejected_mask": [1, 1]}
    batch = collator([example])
    assert batch["input_ids"].tolist() == [[1, 2, 5, 6, 7, 8], [1, 2, 9, 10, 0, 0]]
    assert batch["completion_mask"].tolist() == [[0, 0, 1, 1, 0, 1], [0, 0, 1, 1, 0, 0]]
    cut = TrajectoryPreferenceCollator(pad_token_id=0, max_length=5)([example])
    assert cut["completion_mask"].tolist() == [[0, 0, 1, 1, 0], [0, 0, 1, 1, 0]]


def sequence_logp(model, ids, mask):
    """Sum of log p(token) over the tokens where ``mask`` is 1 (each predicted from all tokens before it)."""
    with torch.no_grad():
        logits = model(input_ids=torch.tensor([ids])).logits[0, :-1]
    logps = F.log_softmax(logits.float(), dim=-1).gather(1, torch.tensor(ids[1:]).unsqueeze(1)).squeeze(1)
    return (logps * torch.tensor(mask[1:], dtype=torch.float)).sum().item()


def test_only_model_tokens_enter_the_policy_and_reference_log_ratios(tmp_path, tiny_model_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    reference = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    with torch.no_grad():
        for parameter in reference.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    example = {"prompt_ids": [5, 6, 7], "chosen_ids": [8, 9, 10, 11, 12], "rejected_ids": [13, 14, 15],
               "chosen_mask": [1, 0, 0, 1, 1], "rejected_mask": [0, 1, 1]}
    from datasets import Dataset

    args = TrajectoryDPOConfig(output_dir=str(tmp_path), beta=0.5, report_to="none", per_device_train_batch_size=1)
    trainer = TrajectoryDPOTrainer(model, ref_model=reference, args=args, train_dataset=Dataset.from_list([example]),
                                   processing_class=tiny_tokenizer)
    batch = trainer.data_collator([example])
    loss = trainer.compute_loss(trainer.model, batch).item()

    chosen = example["prompt_ids"] + example["chosen_ids"]
    rejected = example["prompt_ids"] + example["rejected_ids"]
    chosen_mask = [0] * 3 + example["chosen_mask"]
    rejected_mask = [0] * 3 + example["rejected_mask"]
    margin = (sequence_logp(model, chosen, chosen_mask) - sequence_logp(reference, chosen, chosen_mask)) - (
        sequence_logp(model, rejected, rejected_mask) - sequence_logp(reference, rejected, rejected_mask)
    )
    assert loss == pytest.approx(-F.logsigmoid(torch.tensor(0.5 * margin)).item(), rel=1e-4)
    # with every completion token counted (TRL's own collator) the loss would differ
    everything = [0] * 3 + [1] * 5
    wrong = (sequence_logp(model, chosen, everything) - sequence_logp(reference, chosen, everything)) - (
        sequence_logp(model, rejected, [0] * 3 + [1] * 3) - sequence_logp(reference, rejected, [0] * 3 + [1] * 3)
    )
    assert abs(margin - wrong) > 1e-3


def test_refuses_what_cannot_work(tmp_path, tiny_tokenizer, tiny_model_dir):
    with pytest.raises(ValueError, match="num_generations must be at least 2"):
        TrajectoryDPOConfig(output_dir=str(tmp_path), num_generations=1)
    from datasets import Dataset

    args = TrajectoryDPOConfig(output_dir=str(tmp_path), report_to="none")
    with pytest.raises(ValueError, match="No preference pairs"):
        TrajectoryDPOTrainer(tiny_model_dir, args=args, train_dataset=preference_pairs([]),
                             processing_class=tiny_tokenizer)
    with pytest.raises(ValueError, match="lacks"):
        TrajectoryDPOTrainer(tiny_model_dir, args=args, train_dataset=Dataset.from_list([{"prompt": "x"}]),
                             processing_class=tiny_tokenizer)


def counter_rows(n=2):
    return [{"task_id": f"t{i}", "seed": i, "start": 0, "target": 2} for i in range(n)]


def online_args(tmp_path, **overrides):
    settings = dict(
        output_dir=str(tmp_path), rounds=2, tasks_per_round=2, num_generations=4, num_train_epochs=2,
        per_device_train_batch_size=2, learning_rate=5e-3, beta=0.1, report_to="none", logging_steps=1,
        max_turns=3, max_actions_per_turn=2, max_tokens_per_turn=16, max_context_length=512,
        prefill_opening_tag=False, seed=0,
    )
    settings.update(overrides)
    return TrajectoryDPOConfig(**settings)


@pytest.mark.slow
def test_online_rounds_train_save_and_resume(tmp_path, tiny_agent_dir, tiny_tokenizer):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_agent_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    trained, records = train_online(model, tiny_tokenizer, CounterEnv, counter_rows(), online_args(tmp_path))
    assert [r["round"] for r in records] == [1, 2]
    assert all(r["episodes"] == 8 and r["turns"] >= 8 for r in records)
    assert records[0]["pairs"] > 0 and "rewards/margins" in records[0]  # the agent's inc/dec coin flip gives pairs
    assert any(not torch.equal(before[k], v) for k, v in trained.state_dict().items())
    assert json.loads((tmp_path / "rounds.json").read_text()) == records
    assert (tmp_path / "round-2").is_dir() and not (tmp_path / "round-1").exists()

    # resumed with one more round: only round 3 is played, from round 2's model
    resumed, more = train_online(AutoModelForCausalLM.from_pretrained(tiny_agent_dir), tiny_tokenizer, CounterEnv,
                                 counter_rows(), online_args(tmp_path, rounds=3, resume_from_checkpoint="true"))
    assert more[:2] == records and more[2]["round"] == 3
    # a budget of turns already spent stops before any round
    _, none = train_online(model, tiny_tokenizer, CounterEnv, counter_rows(),
                           online_args(tmp_path / "budget", turn_budget=0))
    assert none == []


def test_online_rounds_pair_with_the_expert_as_eto_does(tmp_path, tiny_agent_dir, tiny_tokenizer, counter_env):
    from starpo_testenv import task_rows
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_agent_dir)
    args = online_args(tmp_path, rounds=1, tasks_per_round=3, pairs="expert", max_actions_per_turn=1,
                       prefill_opening_tag=True, max_tokens_per_turn=32)
    rows = [{key: value for key, value in row.items() if key != "task_id"} for row in task_rows("train", 3)]
    trained, (record,) = train_online(model, tiny_tokenizer, counter_env, rows, args)  # rows without task ids
    assert record["episodes"] == 12 and record["pairs"] > 0 and "rewards/margins" in record
    assert online_args(tmp_path, pairs="expert", num_generations=1).num_generations == 1  # ETO plays a task once
    with pytest.raises(ValueError, match="num_generations must be at least 2 to pair"):
        online_args(tmp_path, num_generations=1)
    with pytest.raises(ValueError, match="pairs must be one of"):
        online_args(tmp_path, pairs="ranked")


def test_online_rounds_with_lora_merge_the_adapter(tmp_path, tiny_agent_dir, tiny_tokenizer, monkeypatch):
    from peft import LoraConfig
    from transformers import AutoModelForCausalLM

    from trl_starpo import evaluation

    # each round plays in the precision the run trains in: a merged model has no trainer autocast of its own
    asked, init = [], evaluation.ModelPolicy.__init__
    monkeypatch.setattr(evaluation.ModelPolicy, "__init__",
                        lambda self, *args, **kwargs: asked.append(kwargs["bf16"]) or init(self, *args, **kwargs))
    model = AutoModelForCausalLM.from_pretrained(tiny_agent_dir)
    lora = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], task_type="CAUSAL_LM")
    args = online_args(tmp_path, rounds=1)
    args.bf16 = True  # after construction, which turns it off on a CPU that would emulate it
    trained, records = train_online(model, tiny_tokenizer, CounterEnv, counter_rows(), args, peft_config=lora)
    assert asked == [True]
    assert records[0]["pairs"] > 0
    assert not any("lora" in name for name, _ in trained.named_parameters())
    reference = AutoModelForCausalLM.from_pretrained(tiny_agent_dir)
    q = "model.layers.0.self_attn.q_proj.weight"
    assert not torch.equal(trained.state_dict()[q], reference.state_dict()[q])
    assert (tmp_path / "round-1" / "model.safetensors").is_file()


def test_pair_masks_follow_the_segments():
    t = trajectory(["s0", "s1"], [0.0, 1.0])
    u = trajectory(["s0"], [0.0])
    row = preference_pairs([t, u])[0]
    segments = t.completion_segments
    assert row["chosen_mask"] == [int(s in (Segment.THINKING, Segment.ACTION)) for s in segments]


@pytest.mark.slow
def test_dpo_recipe_online_and_from_a_store(counter_env, tiny_agent_dir, tmp_path):
    from trl_starpo.rollout.settings import AGENT_FILE
    from trl_starpo.recipes import run_dpo

    common = [
        "--environment", counter_env, "--model_name_or_path", tiny_agent_dir, "--max_turns", "3",
        "--max_actions_per_turn", "2", "--max_tokens_per_turn", "16", "--max_context_length", "512",
        "--prefill_opening_tag", "false", "--per_device_train_batch_size", "2", "--learning_rate", "1e-3",
        "--report_to", "none", "--eval_episodes", "2", "--eval_splits", "validation",
    ]
    out = tmp_path / "online"
    results = run_dpo([*common, "--output_dir", str(out), "--rounds", "1", "--tasks_per_round", "2",
                       "--num_generations", "4"])
    assert set(results["validation"]) == {"before", "after"}
    assert (out / "model.safetensors").is_file() and len(json.loads((out / "rounds.json").read_text())) == 1
    agent = json.loads((out / AGENT_FILE).read_text())
    assert agent["environments"] == [counter_env] and agent["rollout"]["max_tokens_per_turn"] == 16
    assert agent["validation"]["split"] == "validation" and "after" in agent["validation"]

    store = TrajectoryStore()
    store.add([trajectory(["s"], [1.0]), trajectory(["s"], [0.0])], step=1, environment=counter_env)
    store.save(tmp_path / "trajectories")
    offline = run_dpo([*common, "--output_dir", str(tmp_path / "offline"), "--trajectories",
                       str(tmp_path / "trajectories"), "--max_steps", "1", "--eval_episodes", "0"])
    assert offline == {} and (tmp_path / "offline" / "model.safetensors").is_file()
