"""Bandit's prompt without an example answer: does the embedded model still close the answer tag?

Plays the first 8 validation tasks once each with SmolLM2-135M-Instruct, answer-only, at temperature 1, with
``BanditEnv.example_action`` removed, and writes what it measured next to this file (``no_example.json``).

    python benchmarks/bandit_runs/no_example.py
"""

import json
import os
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")

from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

from starpo_bandit import BanditEnv  # noqa: E402
from trl_starpo import load_tasks, resolve_model_path  # noqa: E402
from trl_starpo.evaluation import ModelPolicy, evaluate  # noqa: E402
from trl_starpo.rollout.settings import RolloutSettings  # noqa: E402

EPISODES = 8


def main() -> None:
    path = resolve_model_path()
    tokenizer, model = AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path)
    settings = RolloutSettings(max_turns=1, max_actions_per_turn=1, max_actions_per_trajectory=1,
                               max_tokens_per_turn=64, max_context_length=1024, enable_thinking=False)
    BanditEnv.example_action = None  # the format instructions then show only the empty answer shape
    policy = ModelPolicy(model, tokenizer, settings, temperature=1.0, seed=0)
    result = evaluate(policy, "bandit", load_tasks("bandit", "validation"), EPISODES)
    responses = [tokenizer.decode(t.token_ids[t.prompt_length:]) for t in result.trajectories]
    record = {"episodes": EPISODES, "example_action": None, **{k: result.stats[k] for k in
              ("success", "format_error_rate", "actions", "return")}, "responses": responses}
    out = Path(__file__).with_name("no_example.json")
    out.write_text(json.dumps(record, indent=1) + "\n")
    print(json.dumps({k: v for k, v in record.items() if k != "responses"}))


if __name__ == "__main__":
    main()
