"""Every shipped recipe config parses into its recipe's dataclasses, and every recipe names an installed environment."""

from pathlib import Path

import pytest

import trl_starpo

ROOT = Path(__file__).resolve().parents[1]
CONFIGS = sorted((ROOT / "recipes" / "configs").glob("*.yaml"))


def test_every_recipe_has_a_config():
    recipes = {path.stem for path in (ROOT / "recipes").glob("*.py")}
    assert {path.stem for path in CONFIGS} <= recipes
    assert {"alfworld", "alfworld_sft"} <= {path.stem for path in CONFIGS}


@pytest.mark.parametrize("config", CONFIGS, ids=lambda path: path.stem)
def test_config_parses(config):
    from trl import ModelConfig, TrlParser

    from trl_starpo.recipes import EvaluationArguments, parse_arguments
    from trl_starpo.sft import ExpertSFTConfig

    if config.stem.endswith("_sft"):
        recipe, args, model = TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig)).parse_args_and_config(
            args=["--config", str(config)]
        )
        assert args.completion_only_loss and args.max_length == args.max_context_length
    elif config.stem == "dpo":
        recipe, args, model = parse_dpo(config)
        assert recipe.environment in trl_starpo.list_environments() and args.max_length is None
        return
    else:
        recipe, args, model = parse_arguments(["--config", str(config)])
        assert args.max_context_length > args.max_tokens_per_turn
        if recipe.warm_start is None:  # from scratch the 135M model's thinking turns rarely end well-formed
            assert not args.enable_thinking
        # an episode's full-vocabulary logits are the update's largest tensors: batches of four took a 2-step run to
        # 13-19 GB; a CPU config trains one episode at a time and accumulates
        assert args.per_device_train_batch_size == 1
    assert recipe.eval_episodes >= 0 and model.model_name_or_path
    assert config.stem.removesuffix("_sft") in trl_starpo.list_environments()


@pytest.mark.parametrize("environment", ["alfworld", "hotpotqa", "minigrid"])
def test_a_warm_started_config_plays_with_its_warm_starts_prompt_and_format(environment):
    import json

    from trl import ModelConfig, TrlParser

    from trl_starpo.recipes import EvaluationArguments, parse_arguments
    from trl_starpo.sft import ExpertSFTConfig

    recipe, rl, model = parse_arguments(["--config", str(ROOT / f"recipes/configs/{environment}.yaml")])
    _, sft, sft_model = TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig)).parse_args_and_config(
        args=["--config", str(ROOT / f"recipes/configs/{environment}_sft.yaml")]
    )
    shared = ("max_turns", "max_actions_per_turn", "max_actions_per_trajectory", "max_tokens_per_turn",
              "max_context_length", "enable_thinking", "prefill_opening_tag", "action_separator", "format_penalty")
    assert {name: getattr(rl, name) for name in shared} == {name: getattr(sft, name) for name in shared}
    assert (rl.environment_kwargs or {}).get("show_admissible", False) == (
        sft.environment_kwargs or {}).get("show_admissible", False)
    assert recipe.warm_start == f"recipes/warm_starts/{environment}"
    adapter = ROOT / recipe.warm_start
    shipped = json.loads((adapter / "adapter_config.json").read_text())
    assert shipped["base_model_name_or_path"] == model.model_name_or_path == sft_model.model_name_or_path
    assert shipped["r"] == sft_model.lora_r and (adapter / "adapter_model.safetensors").stat().st_size < 12_000_000
    if environment == "alfworld":
        assert rl.preset == "starpo-s" and rl.enable_thinking and rl.thinking_critic is True
        assert recipe.eval_splits == ["valid_unseen"]  # make train reports held-out games only


def parse_dpo(config):
    from trl import ModelConfig, TrlParser

    from trl_starpo.dpo import TrajectoryDPOConfig
    from trl_starpo.recipes import DPOArguments

    parser = TrlParser((DPOArguments, TrajectoryDPOConfig, ModelConfig))
    return parser.parse_args_and_config(args=["--config", str(config)])


def test_dpo_config_plays_the_episodes_of_its_warm_start():
    from trl import ModelConfig, TrlParser

    from trl_starpo.recipes import EvaluationArguments
    from trl_starpo.sft import ExpertSFTConfig

    recipe, dpo, model = parse_dpo(ROOT / "recipes/configs/dpo.yaml")
    _, sft, sft_model = TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig)).parse_args_and_config(
        args=["--config", str(ROOT / "recipes/configs/alfworld_sft.yaml")]
    )
    assert dpo.rollout_settings == sft.rollout_settings
    # it starts from the shipped adapter that recipe built, on the model that adapter was trained on
    assert recipe.warm_start == "recipes/warm_starts/alfworld"
    assert model.model_name_or_path == sft_model.model_name_or_path


def test_recipes_watch_for_the_echo_trap_unless_told_not_to(tmp_path):
    from trl_starpo.recipes import parse_arguments

    config = str(ROOT / "recipes/configs/sokoban.yaml")
    assert parse_arguments(["--config", config])[1].monitor == "warn"
    assert parse_arguments(["--config", config, "--monitor", "off"])[1].monitor == "off"
    quiet = tmp_path / "quiet.yaml"
    quiet.write_text((ROOT / "recipes/configs/sokoban.yaml").read_text() + "monitor: rollback\n")
    assert parse_arguments(["--config", str(quiet)])[1].monitor == "rollback"


@pytest.mark.parametrize("native", [True, False], ids=["bf16-cpu", "emulating-cpu"])
def test_the_recipes_bf16_is_kept_only_where_the_cpu_computes_it(native, monkeypatch, caplog):
    # alfworld.yaml (make train) and alfworld_sft.yaml ask for bf16 autocast, which an AVX2-only CPU emulates at a
    # few thousandths of fp32's speed: there every config trains in fp32 and says so.
    from trl import ModelConfig, TrlParser

    from trl_starpo import config as config_module
    from trl_starpo.dpo import TrajectoryDPOConfig
    from trl_starpo.recipes import EvaluationArguments, parse_arguments
    from trl_starpo.sft import ExpertSFTConfig

    monkeypatch.setattr(config_module.torch.accelerator, "is_available", lambda: False)
    monkeypatch.setattr(config_module, "cpu_computes_bf16", lambda: native)
    _, rl, _ = parse_arguments(["--config", str(ROOT / "recipes/configs/alfworld.yaml")])
    _, sft, _ = TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig)).parse_args_and_config(
        args=["--config", str(ROOT / "recipes/configs/alfworld_sft.yaml")]
    )
    dpo = TrajectoryDPOConfig(output_dir="unused", bf16=True)
    assert (rl.bf16, sft.bf16, dpo.bf16) == (native, native, native)
    assert rl.use_cpu and not rl.fp16
    warnings = [r for r in caplog.records if "no bfloat16 arithmetic" in r.getMessage()]
    assert len(warnings) == (0 if native else 3)


def test_every_recipe_scripts_help_renders():
    # argparse reads "%" in a field's help as a format: one bare "20%" made `recipes/<env>.py --help` crash
    from trl import ModelConfig, TrlParser

    from trl_starpo.dpo import TrajectoryDPOConfig
    from trl_starpo.recipes import DPOArguments, EvaluationArguments, OfflineArguments, recipe_parser
    from trl_starpo.config import StarPOConfig
    from trl_starpo.sft import ExpertSFTConfig

    parsers = [recipe_parser(), TrlParser((EvaluationArguments, ExpertSFTConfig, ModelConfig)),
               TrlParser((DPOArguments, TrajectoryDPOConfig, ModelConfig)),
               TrlParser((OfflineArguments, StarPOConfig, ModelConfig))]
    for parser in parsers:
        assert "--learning_rate" in parser.format_help()
