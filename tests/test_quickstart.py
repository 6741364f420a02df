"""The README's quickstart, run as written at tiny size: a plain StarPOTrainer leaves what the recipes leave."""

import json
import re
import warnings
from pathlib import Path

import trl_starpo

README = Path(__file__).resolve().parents[1] / "README.md"
TINY = dict(max_steps=1, num_generations=2, per_device_train_batch_size=2, max_turns=2, max_tokens_per_turn=8,
            report_to="none", disable_tqdm=True)


def quickstart_code() -> str:
    section = README.read_text(encoding="utf-8").split("## Quickstart", 1)[1]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_readme_quickstart_leaves_the_agent_files(tmp_path, monkeypatch, tiny_agent_dir):
    config = trl_starpo.StarPOConfig
    monkeypatch.setattr(trl_starpo, "StarPOConfig", lambda **kwargs: config(**{**kwargs, **TINY}))
    monkeypatch.setattr(trl_starpo, "resolve_model_path", lambda model=None: tiny_agent_dir)
    monkeypatch.chdir(tmp_path)
    namespace = {}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exec(compile(quickstart_code(), str(README), "exec"), namespace)
    # transformers renamed gradient_checkpointing; TRL and PEFT still use the old name: not the user's to act on.
    assert not [w for w in caught if "gradient_checkpointing" in str(w.message)]

    output = tmp_path / namespace["args"].output_dir
    for name in ("adapter_model.safetensors", "starpo_agent.json", "learning_curves.png", "trainer_state.json",
                 "README.md", "trajectories.html", "trajectories/CURRENT"):
        assert (output / name).is_file(), name
    record = json.loads((output / "starpo_agent.json").read_text())
    assert record["environments"] == ["sokoban"] and record["adapter"] and record["global_step"] == 1
    assert "trl-starpo eval --env sokoban --model outputs/sokoban-quickstart" in (output / "README.md").read_text()
    assert (output / "trajectories.html").read_text().count('class="trajectory') >= 2
