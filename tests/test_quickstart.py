"""The README's quickstart, run as written at tiny size: every update moves the model, and a plain StarPOTrainer
leaves what the recipes leave."""

import json
import re
import warnings
from pathlib import Path

import trl_starpo

README = Path(__file__).resolve().parents[1] / "README.md"
TINY = dict(max_steps=2, report_to="none", disable_tqdm=True)


def quickstart_code() -> str:
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_quickstart_trains_and_leaves_the_agent_files(tmp_path, monkeypatch, tiny_agent_dir):
    from conftest import ScriptedGenerator

    config, trainer_class = trl_starpo.StarPOConfig, trl_starpo.StarPOTrainer
    trainers = []

    class ArmPulling(trainer_class):
        """The tiny model knows no arm names: its rollouts pull arm 1 or arm 2 in turn, so groups differ."""

        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            trainers.append(self)

        def collect_trajectories(self, tasks, groups, **kwargs):
            responses = {i: [f"{1 + i % 2}</answer>"] for i in range(len(tasks))}
            generator = ScriptedGenerator(self._tokenizer, responses)
            return self.collector.collect(self.environment_pool.take(len(tasks)), tasks, generator, groups)

    monkeypatch.setattr(trl_starpo, "StarPOConfig", lambda **kwargs: config(**{**kwargs, **TINY}))
    monkeypatch.setattr(trl_starpo, "StarPOTrainer", ArmPulling)
    monkeypatch.setattr(trl_starpo, "resolve_model_path", lambda model=None: tiny_agent_dir)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(quickstart_code(), str(README), "exec"), namespace)
    # transformers renamed gradient_checkpointing; TRL and PEFT still use the old name: not the user's to act on.
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]

    guard = trainers[0].nonfinite_guard
    assert guard.steps == TINY["max_steps"] and guard.steps_with_gradient == guard.steps  # every update moved it
    output = tmp_path / namespace["args"].output_dir
    for name in ("adapter_model.safetensors", "starpo_agent.json", "learning_curves.png", "trainer_state.json",
                 "README.md", "trajectories.html", "trajectories/CURRENT"):
        assert (output / name).is_file(), name
    record = json.loads((output / "starpo_agent.json").read_text())
    assert record["environments"] == ["bandit"] and record["adapter"] and record["global_step"] == TINY["max_steps"]
    assert "trl-starpo eval --env bandit --model outputs/bandit-quickstart" in (output / "README.md").read_text()
    assert (output / "trajectories.html").read_text().count('class="trajectory') >= 2
