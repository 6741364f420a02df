"""Model cards for trained agents and dataset cards for trajectory stores: the text, and what it is made from.

``AgentRecord`` is what is known about a trained agent: environments, base model, preset, key configuration, rollout
settings and validation success before and after training. It is saved beside the weights as ``starpo_agent.json``
(which ``trl-starpo eval`` reads back for the rollout settings) and rendered into the model card by
:func:`model_card`. :func:`dataset_card` renders a trajectory store's summary, :func:`tasks_card` an environment's
task splits.
"""

from __future__ import annotations

import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .evaluation import AGENT_FILE, RolloutSettings

PLOT_FILE = "learning_curves.png"

RAGEN_CITATION = """\
@misc{wang2025ragen,
    title         = {{RAGEN: Understanding Self-Evolution in LLM Agents via Multi-Turn Reinforcement Learning}},
    author        = {Zihan Wang and Kangrui Wang and Qineng Wang and Pingyue Zhang and Linjie Li and Zhengyuan Yang and Xing Jin and Kefan Yu and Minh Nhat Nguyen and Licheng Liu and Eli Gottlieb and Yiping Lu and Kyunghyun Cho and Jiajun Wu and Li Fei-Fei and Lijuan Wang and Yejin Choi and Manling Li},
    year          = 2025,
    eprint        = {arXiv:2504.20073},
}"""

KEY_CONFIG_FIELDS = (
    "preset",
    "learning_rate",
    "max_steps",
    "num_generations",
    "per_device_train_batch_size",
    "gradient_accumulation_steps",
    "num_iterations",
    "loss_type",
    "scale_rewards",
    "beta",
    "epsilon",
    "epsilon_high",
    "temperature",
    "top_p",
    "thinking_loss_weight",
    "action_loss_weight",
    "trajectory_filter",
    "advantage_estimator",
    "thinking_critic",
    "value_model",
    "entropy_coef",
    "max_grad_norm",
    "warmup_steps",
    "kl_early_stop",
)
"""``StarPOConfig`` fields a card reports, when the config has them (presets add some)."""

TAGS = ["trl", "trl-starpo", "starpo", "agent", "reinforcement-learning"]


def _plain(value: Any) -> Any:
    """A JSON-friendly version of a config value (enums and objects become strings)."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    return getattr(value, "value", str(value))


@dataclass
class AgentRecord:
    """What a card says about a trained agent; saved as ``starpo_agent.json`` beside its weights.

    Attributes:
        environments: The environments it was trained on.
        base_model: The Hub id (or path) of the model it was fine-tuned from.
        preset: The ``StarPOConfig`` preset, if one was used.
        adapter: Whether the saved weights are a LoRA (PEFT) adapter.
        rollout: The ``RolloutSettings`` fields it was trained with.
        training: Key configuration values (``KEY_CONFIG_FIELDS`` present in the config).
        validation: ``{"split", "episodes", "temperature", "before": {stat: value}, "after": {...}}``.
        global_step: Optimizer steps trained.
        trajectories_repo: The dataset repository of its logged trajectories, once pushed.
    """

    environments: list[str] = field(default_factory=list)
    base_model: str | None = None
    preset: str | None = None
    adapter: bool = False
    rollout: dict[str, Any] = field(default_factory=dict)
    training: dict[str, Any] = field(default_factory=dict)
    validation: dict[str, Any] = field(default_factory=dict)
    global_step: int = 0
    trajectories_repo: str | None = None
    trl_starpo_version: str = ""

    @classmethod
    def from_config(cls, args: Any, **values: Any) -> AgentRecord:
        """Take the rollout settings, preset and key fields from a ``StarPOConfig`` (or any object with them)."""
        from . import __version__

        training = {name: _plain(getattr(args, name)) for name in KEY_CONFIG_FIELDS if hasattr(args, name)}
        values.setdefault("preset", training.get("preset"))
        return cls(
            rollout=dataclasses.asdict(RolloutSettings.from_config(args)),
            training=training,
            trl_starpo_version=__version__,
            **values,
        )

    def save(self, folder: str | Path) -> Path:
        """Write ``starpo_agent.json`` into ``folder``."""
        path = Path(folder) / AGENT_FILE
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(dataclasses.asdict(self), indent=2, default=str) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> AgentRecord | None:
        """Read ``starpo_agent.json`` from ``folder``; ``None`` when there is none."""
        path = Path(folder) / AGENT_FILE
        if not path.is_file():
            return None
        data = json.loads(path.read_text(encoding="utf-8"))
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


def _hub_id(name: str | None) -> str | None:
    """``name`` when it looks like a Hub id (``owner/name``, not a local path), else ``None``."""
    if not name or Path(name).expanduser().exists() or name.startswith((".", "/", "~")) or name.count("/") != 1:
        return None
    return name


def _model_link(model: str | None) -> str:
    if not model:
        return "unknown"
    return f"[{model}](https://huggingface.co/{model})" if _hub_id(model) else f"`{model}`"


def _fmt(value: Any, digits: int = 3) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _setting(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    return "–" if value is None else str(value)


def environment_distribution(environment: str) -> str | None:
    """The pip package that provides ``environment`` (through its entry point), when installed."""
    from importlib.metadata import entry_points

    for ep in entry_points(group="trl_starpo.environments"):
        if ep.name == environment and ep.dist is not None:
            return ep.dist.name
    return None


def play_snippet(repo_id: str, environment: str, split: str = "validation") -> str:
    """Python that loads the agent ``repo_id`` and plays one ``environment`` episode, printing each turn."""
    return (
        "from trl_starpo import load_tasks\n"
        "from trl_starpo.evaluation import make_policy\n"
        "from trl_starpo.play import play_model\n"
        "\n"
        f'policy = make_policy("model", model="{repo_id}")  # a LoRA adapter is merged into its base model\n'
        f'task = dict(load_tasks("{environment}", "{split}")[0])\n'
        f'trajectory = play_model(policy, "{environment}", task)  # prints observation, thinking, actions, reward\n'
        "print(trajectory.success, trajectory.episode_return)\n"
    )


def _front_matter(metadata: dict[str, Any]) -> str:
    return "---\n" + yaml.safe_dump({k: v for k, v in metadata.items() if v}, sort_keys=False) + "---\n"


def model_card(
    record: AgentRecord,
    *,
    repo_id: str,
    model_name: str | None = None,
    plot_file: str | None = PLOT_FILE,
    extra_tags: list[str] | None = None,
) -> str:
    """The README.md of an agent repository: metadata, results, learning curves, a play snippet, the config."""
    from . import __version__

    name = model_name or repo_id.split("/")[-1]
    environments = record.environments or ["unknown"]
    base = _hub_id(record.base_model)
    tags = list(dict.fromkeys(TAGS + [f"env:{e}" for e in environments] + (extra_tags or [])))
    metadata = {
        "base_model": base,
        "library_name": "peft" if record.adapter else "transformers",
        "pipeline_tag": "text-generation",
        "tags": tags,
        "datasets": [record.trajectories_repo] if record.trajectories_repo else None,
    }
    env_list = ", ".join(f"**{e}**" for e in environments)
    base_text = f"[{base}](https://huggingface.co/{base})" if base else f"`{record.base_model or 'unknown'}`"
    kind = "a LoRA adapter on" if record.adapter else "a fine-tune of"
    lines = [
        _front_matter(metadata),
        f"# {name}",
        "",
        f"An LLM agent for the {env_list} environment{'s' if len(environments) > 1 else ''}, trained with StarPO "
        f"(State-Thinking-Actions-Reward Policy Optimization, [RAGEN](https://arxiv.org/abs/2504.20073)) with "
        f"trl_starpo, an extension of [TRL](https://github.com/huggingface/trl) for multi-turn agent RL. It is {kind} "
        f"{base_text}: each turn it reads the environment's text state, thinks in `<think>…</think>` and acts in "
        "`<answer>…</answer>`; whole episodes were optimized at once.",
        "",
        "## Results",
        "",
    ]
    lines += _results_table(record.validation)
    if plot_file:
        lines += ["", f"![Learning curves: success, return, in-group return std, entropy, gradient norm]({plot_file})"]
    lines += ["", "## Play one episode", "", "```bash"]
    packages = ["trl-starpo"] + [d for d in (environment_distribution(e) for e in environments) if d]
    lines += [f"pip install {' '.join(dict.fromkeys(packages))}", "```", "", "```python",
              play_snippet(repo_id, environments[0]).rstrip(), "```", "",
              "Or in a terminal, and a success table over the validation split:", "", "```bash",
              f"trl-starpo play --env {environments[0]} --model {repo_id}",
              f"trl-starpo eval --env {environments[0]} --model {repo_id} --split validation --episodes 64",
              "```", ""]
    lines += ["## Training", "", f"- Trainer: `StarPOTrainer` (trl_starpo {record.trl_starpo_version or __version__})",
              f"- Preset: `{record.preset or 'none (StarPOConfig defaults)'}`",
              f"- Environments: {', '.join(f'`{e}`' for e in environments)}",
              f"- Base model: {base_text}{' (LoRA adapter)' if record.adapter else ''}",
              f"- Optimizer steps: {record.global_step}"]
    if record.trajectories_repo:
        lines.append(f"- Logged trajectories: [{record.trajectories_repo}]"
                     f"(https://huggingface.co/datasets/{record.trajectories_repo})")
    lines += ["", "| setting | value |", "|---|---|"]
    lines += [f"| `{k}` | `{_setting(v)}` |" for k, v in {**record.training, **record.rollout}.items()]
    lines += ["", "## Framework versions", ""] + [f"- {n}: {v}" for n, v in _versions().items()]
    lines += ["", "## Citation", "", "```bibtex", RAGEN_CITATION, "```", ""]
    return "\n".join(lines)


def _results_table(validation: dict[str, Any]) -> list[str]:
    if not validation or not any(k in validation for k in ("before", "after")):
        return ["Validation success was not measured for this checkpoint (run `trl-starpo eval`, below)."]
    split = validation.get("split", "validation")
    episodes = validation.get("episodes")
    temperature = validation.get("temperature")
    how = [f"{episodes} episodes" if episodes else None, f"sampling temperature {temperature}" if temperature else None]
    lines = [f"On the `{split}` split ({', '.join(h for h in how if h) or 'as logged'}):", "",
             "| | success | return | turns | format errors |", "|---|---|---|---|---|"]
    for when in ("before", "after"):
        stats = validation.get(when)
        if stats:
            lines.append(f"| {when} training | {_fmt(stats.get('success'))} | {_fmt(stats.get('return'))} | "
                         f"{_fmt(stats.get('turns'), 2)} | {_fmt(stats.get('format_error_rate'))} |")
    return lines


def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for name in ("trl-starpo", "trl", "transformers", "torch", "datasets", "peft"):
        try:
            found[name] = version(name)
        except PackageNotFoundError:
            continue
    return found


def dataset_card(
    summary: dict[str, Any],
    *,
    repo_id: str,
    record: AgentRecord | None = None,
    model_repo: str | None = None,
    capacity: int | None = None,
) -> str:
    """The README.md of a trajectory dataset repository (``summary`` is ``TrajectoryStore.summary()``)."""
    record = record or AgentRecord()
    environments = sorted(summary.get("environments", {})) or record.environments
    model = model_repo or _hub_id(record.base_model) or record.base_model
    metadata = {
        "tags": TAGS + ["trajectories"] + [f"env:{e}" for e in environments],
        "configs": [{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]}],
    }
    lines = [
        _front_matter(metadata),
        f"# {repo_id.split('/')[-1]}",
        "",
        "Multi-turn agent trajectories logged while training with StarPO "
        "([RAGEN](https://arxiv.org/abs/2504.20073)) with trl_starpo, an extension of "
        "[TRL](https://github.com/huggingface/trl): one row "
        "per episode, with the token ids the model saw and produced, a segment label per token, and each turn's "
        "observation, thinking, actions and reward.",
        "",
        f"- Environments: {', '.join(f'`{e}`' for e in environments) or 'unknown'}",
        f"- Model: {_model_link(model)}",
        f"- Preset: `{record.preset or 'none'}`",
        f"- Trajectories: {summary.get('trajectories', 0)} (of {summary.get('total_added', 0)} logged; the store "
        f"keeps the latest {capacity or 'N'}), steps {summary.get('first_step')}–{summary.get('last_step')}",
        f"- Success: {_fmt(summary.get('success'))}, mean return {_fmt(summary.get('return'))}",
        "",
        "| environment | trajectories | success | return | turns |",
        "|---|---|---|---|---|",
    ]
    for name, stats in summary.get("environments", {}).items():
        lines.append(f"| {name} | {stats['trajectories']} | {_fmt(stats['success'])} | {_fmt(stats['return'])} | "
                     f"{_fmt(stats['turns'], 2)} |")
    lines += [
        "",
        "## Use",
        "",
        "```python",
        "from datasets import load_dataset",
        "from trl_starpo.store import from_dataset",
        "",
        f'dataset = load_dataset("{repo_id}", split="train")',
        "trajectories = from_dataset(dataset)  # trl_starpo.Trajectory objects, losslessly",
        "```",
        "",
        "Offline StarPO trains on this dataset without an environment: "
        f"`python recipes/offline.py --trajectories {repo_id} --model_name_or_path <model> --output_dir out`.",
        "",
        "## Schema",
        "",
        "One row per trajectory: `index`, `step`, `environment`, `task_id`, `group`, `success`, `episode_return`, "
        "`rewards` (per turn), `num_turns`, `terminated`, `truncation`, `env_error`, `prompt_length`, `token_ids`, "
        "`segments` (0 prompt, 1 observation, 2 template, 3 thinking, 4 action), `logprobs` (sampling log-prob per "
        "token, when recorded), `thinking_scores` (per turn, when a thinking critic ran), and `turns` (observation, "
        "response, thinking, actions, reward, format verdict, action counts, token span). See trl_starpo's "
        "docs/trajectories.md.",
        "",
        "## Citation",
        "",
        "```bibtex",
        RAGEN_CITATION,
        "```",
        "",
    ]
    return "\n".join(lines)


def tasks_card(environment: str, data_files: dict[str, str], tasks, *, download_size: int,
               repo_id: str | None = None) -> str:
    """The README.md of an environment's task splits: YAML ``configs`` that map every split to its file, so that
    ``datasets.load_dataset`` on the folder or repository returns the splits by the environment's names, and the
    ``dataset_info`` of the splits (rows, bytes), which ``datasets`` checks and hashes into its cache key.

    Args:
        environment: The environment's registered name.
        data_files: ``{split: path}``, paths relative to the README.
        tasks: The splits, a ``datasets.DatasetDict`` (or ``{split: Dataset}``).
        download_size: Bytes of the data files together.
        repo_id: The Hub dataset the card describes; ``None`` for the data folder of an environment package.
    """
    splits = [{"name": split, "num_bytes": tasks[split].data.nbytes, "num_examples": len(tasks[split])}
              for split in data_files]
    metadata = {
        "tags": TAGS + ["environment-tasks", f"env:{environment}"] if repo_id else None,
        "configs": [{"config_name": "default",
                     "data_files": [{"split": split, "path": path} for split, path in data_files.items()]}],
        # datasets keys the cache of a folder with `configs` on its card, not on its files: these sizes change with
        # the data, so a new version of the files is not served from the cache of the old one.
        "dataset_info": {"splits": splits, "download_size": download_size,
                         "dataset_size": sum(split["num_bytes"] for split in splits)},
    }
    where = f'"{repo_id}"' if repo_id else f'str(trl_starpo.envs.tasks_data_dir("{environment}"))'
    source = f', source="{repo_id}"' if repo_id else ""
    first = next(iter(data_files))
    lines = [
        _front_matter(metadata),
        f"# {repo_id.split('/')[-1] if repo_id else f'{environment} tasks'}",
        "",
        f"The task splits of the `{environment}` environment of trl_starpo, a StarPO ([RAGEN]"
        "(https://arxiv.org/abs/2504.20073)) extension of [TRL](https://github.com/huggingface/trl): one row per "
        "task, which the environment's `reset(options={\"task\": row})` plays.",
        "",
        "| split | rows |",
        "|---|---|",
        *(f"| `{split['name']}` | {split['num_examples']} |" for split in splits),
        "",
        "```python",
        "from datasets import load_dataset",
        "import trl_starpo",
        "",
        f"splits = load_dataset({where})  # {', '.join(data_files)}",
        f'tasks = trl_starpo.load_tasks("{environment}", "{first}"{source})',
        "```",
        "",
    ]
    if repo_id:
        lines += [f"`trl-starpo eval --env {environment} --split {first} --tasks {repo_id} --policy random` plays "
                  f"them (with the `{environment}` environment package installed).", ""]
    return "\n".join(lines)
