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
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..statistics import success_interval
from ..json_files import json_text
from ..rollout.settings import AGENT_FILE, RolloutSettings, parse_agent_info

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
    "bf16",
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
        from .. import __version__

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
        path.write_text(json_text(dataclasses.asdict(self), indent=2, default=str) + "\n", encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder: str | Path) -> AgentRecord | None:
        """Read ``starpo_agent.json`` from ``folder``; ``None`` when there is none."""
        path = Path(folder) / AGENT_FILE
        if not path.is_file():
            return None
        data = parse_agent_info(path)
        known = {f.name for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


ENVIRONMENT_NAME = re.compile(r"[\w.-]+")
"""What an environment name may hold: it goes into tags, commands and code of a card."""
_HUB_ID = re.compile(r"[\w.-]+/[\w.-]+")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+!|<>&~-])")
TEMPLATES = Path(__file__).parent / "templates"


def check_environment_name(name: str) -> str:
    """``name``, if it is a plain environment name (letters, digits, ``_``, ``.``, ``-``); ``ValueError`` otherwise."""
    if not isinstance(name, str) or not ENVIRONMENT_NAME.fullmatch(name):
        raise ValueError(f"Environment name {name!r} is not a plain name (letters, digits, '_', '.', '-'): refusing "
                         "to write it into a card.")
    return name


def _hub_id(name: str | None) -> str | None:
    """``name`` when it looks like a Hub id (``owner/name``, not a local path), else ``None``."""
    if not name or not _HUB_ID.fullmatch(name) or name.startswith(".") or Path(name).expanduser().exists():
        return None
    return name


def markdown_text(value: Any) -> str:
    """``value`` as inert Markdown text on one line: no heading, link, emphasis, table cell or HTML can come of it."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(value).split()))


def markdown_code(value: Any) -> str:
    """``value`` as an inline code span on one line, fenced by more backticks than it holds in a row."""
    text = " ".join(str(value).split())
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    fence, pad = "`" * (longest + 1), " " if longest or text.startswith("`") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _shell_word(value: str) -> str:
    text = str(value)
    if any(ord(c) < 32 or ord(c) == 127 for c in text):
        raise ValueError(f"{text!r} holds control characters: refusing to write it into a command.")
    return shlex.quote(text)


def _table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table; a ``|`` inside a cell is escaped so that it cannot open a new cell."""
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(cell.replace("|", "\\|") for cell in cells) + " |"

    return "\n".join([line(header), "|" + "|".join("---" for _ in header) + "|", *map(line, rows)])


def _model_link(model: str | None) -> str:
    if not model:
        return "unknown"
    hub = _hub_id(model)
    return f"[{hub}](https://huggingface.co/{hub})" if hub else markdown_code(model)


def _fmt(value: Any, digits: int = 3) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
        return "–"
    if isinstance(value, float):
        return f"{value:.{digits}f}"
    return str(value)


def _interval(success: Any, episodes: Any) -> str:
    """The 95% Wilson interval of a success rate over ``episodes``, as ``low–high``."""
    if not isinstance(episodes, int) or isinstance(episodes, bool) or not isinstance(success, (int, float)):
        return "–"
    low, high = success_interval(float(success), episodes)
    return "–" if math.isnan(low) else f"{low:.3f}–{high:.3f}"


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


def validation_split(environment: str) -> str:
    """The split an agent of ``environment`` is checked on: ``validation`` where the environment has one, else its
    first split that is not ``train`` (ALFWorld's ``valid_seen``)."""
    from ..envs import load_tasks

    try:
        splits = list(load_tasks(environment))
    except Exception:  # not installed here: the usual name
        return "validation"
    if "validation" in splits:
        return "validation"
    return next((split for split in splits if split != "train"), "validation")


def install_command(environments: list[str]) -> str:
    """The pip line that installs trl_starpo and the environments' packages: from a clone of the trl_starpo
    repository for the environments it ships (``environments/<name>``), by name for the others."""
    words = ["pip install -e trl_starpo"]
    for environment in environments:
        distribution = environment_distribution(environment)
        if distribution == f"starpo-{environment}":
            words.append(f"-e trl_starpo/environments/{_shell_word(environment)}")
        elif distribution is not None:  # (an environment not installed where the card is written is left out)
            words.append(_shell_word(distribution))
    return " ".join(words) + "   # in the folder that holds a clone of the trl_starpo repository"


def play_snippet(repo_id: str, environment: str, split: str = "validation") -> str:
    """Python that loads the agent ``repo_id`` and plays one ``environment`` episode, printing each turn.

    Every name enters the code as a string literal (``json.dumps``), never as code.
    """
    model, env, split = (json.dumps(str(v)) for v in (repo_id, environment, split))
    return (
        "from trl_starpo import load_tasks\n"
        "from trl_starpo.evaluation import make_policy\n"
        "from trl_starpo.play import play_model\n"
        "\n"
        f"policy = make_policy(\"model\", model={model})  # a LoRA adapter is merged into its base model\n"
        f"task = dict(load_tasks({env}, {split})[0])\n"
        f"trajectory = play_model(policy, {env}, task)  # prints observation, thinking, actions, reward\n"
        "print(trajectory.success, trajectory.episode_return)\n"
    )


def model_card(
    record: AgentRecord,
    *,
    repo_id: str,
    model_name: str | None = None,
    plot_file: str | None = PLOT_FILE,
    extra_tags: list[str] | None = None,
) -> str:
    """The README.md of an agent repository: metadata, results, learning curves, a play snippet, the config.

    Rendered from ``templates/model_card.md`` with ``huggingface_hub.ModelCard``. Whatever comes from the record
    (a ``starpo_agent.json`` may come from anywhere) is escaped as Markdown, quoted as code or refused.
    """
    from huggingface_hub import ModelCard, ModelCardData

    from .. import __version__

    environments = [check_environment_name(e) for e in record.environments] or ["unknown"]
    base = _hub_id(record.base_model)
    tags = list(dict.fromkeys(TAGS + [f"env:{e}" for e in environments] + list(extra_tags or [])))
    trajectories = _hub_id(record.trajectories_repo)
    card_data = ModelCardData(
        base_model=base,
        library_name="peft" if record.adapter else "transformers",
        pipeline_tag="text-generation",
        tags=tags,
        datasets=[trajectories] if trajectories else None,
    )
    environment, repo = _shell_word(environments[0]), _shell_word(repo_id)
    validation = record.validation if isinstance(record.validation, dict) else {}
    # the eval command plays what the results table reports: its split, at its temperature
    split = validation.get("split")
    if not (isinstance(split, str) and re.fullmatch(r"[\w.-]+", split)):  # a record may come from anywhere
        split = validation_split(environments[0])
    temperature = validation.get("temperature")
    sampling = (f" --temperature {float(temperature):g}"
                if isinstance(temperature, (int, float)) and not isinstance(temperature, bool) and temperature != 1
                else "")
    settings = {**record.training, **record.rollout}
    card = ModelCard.from_template(
        card_data,
        template_path=TEMPLATES / "model_card.md",
        title=markdown_text(model_name or repo_id.split("/")[-1]),
        environment_list=", ".join(f"**{e}**" for e in environments),
        environment_count=len(environments),
        environment_codes=", ".join(markdown_code(e) for e in environments),
        kind="a LoRA adapter on" if record.adapter else "a fine-tune of",
        base_text=_model_link(record.base_model),
        adapter=record.adapter,
        results=_results(record.validation),
        plot_file=plot_file,
        install_command=install_command(list(dict.fromkeys(environments))),
        play_snippet=play_snippet(repo_id, environments[0], split).rstrip(),
        play_command=f"trl-starpo play --env {environment} --model {repo}",
        eval_command=f"trl-starpo eval --env {environment} --model {repo} --split {_shell_word(split)} --episodes 64"
                     f"{sampling}",
        version=markdown_text(record.trl_starpo_version or __version__),
        preset=markdown_code(record.preset or "none (StarPOConfig defaults)"),
        global_step=_fmt(record.global_step),
        trajectories_link=f"[{trajectories}](https://huggingface.co/datasets/{trajectories})" if trajectories else None,
        settings_table=_table(["setting", "value"],
                              [[markdown_code(k), markdown_code(_setting(v))] for k, v in settings.items()]),
        versions="\n".join(f"- {name}: {version}" for name, version in _versions().items()),
        citation=RAGEN_CITATION,
    )
    return card.content + "\n"


def _results(validation: dict[str, Any]) -> str:
    if not validation or not any(k in validation for k in ("before", "after")):
        return "Validation success was not measured for this checkpoint (run `trl-starpo eval`, below)."
    episodes = validation.get("episodes")
    temperature = validation.get("temperature")
    how = [f"{_fmt(episodes)} episodes" if episodes else None,
           f"sampling temperature {markdown_text(temperature)}" if temperature is not None else None]
    rows = []
    for when in ("before", "after"):
        stats = validation.get(when)
        if isinstance(stats, dict):
            rows.append([f"{when} training", _fmt(stats.get("success")),
                         _interval(stats.get("success"), stats.get("episodes", episodes)),
                         _fmt(stats.get("return")), _fmt(stats.get("turns"), 2), _fmt(stats.get("format_error_rate"))])
    intro = (f"On the {markdown_code(validation.get('split', 'validation'))} split "
             f"({', '.join(h for h in how if h) or 'as logged'}; the interval is the 95% Wilson interval of the "
             "success rate):")
    table = _table(["", "success", "95% interval", "return", "turns", "format errors"], rows)
    return f"{intro}\n\n{table}"


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
    """The README.md of a trajectory dataset repository (``summary`` is ``TrajectoryStore.summary()``), rendered from
    ``templates/dataset_card.md`` with ``huggingface_hub.DatasetCard``."""
    from huggingface_hub import DatasetCard, DatasetCardData

    record = record or AgentRecord()
    per_environment = summary.get("environments", {})
    environments = [check_environment_name(e) for e in (sorted(per_environment) or record.environments)]
    card_data = DatasetCardData(
        tags=TAGS + ["trajectories"] + [f"env:{e}" for e in environments],
        configs=[{"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]}],
    )
    rows = [[markdown_code(name), _fmt(stats["trajectories"]), _fmt(stats["success"]),
             _interval(stats["success"], stats["trajectories"]), _fmt(stats["return"]), _fmt(stats["turns"], 2)]
            for name, stats in per_environment.items()]
    card = DatasetCard.from_template(
        card_data,
        template_path=TEMPLATES / "dataset_card.md",
        title=markdown_text(repo_id.split("/")[-1]),
        environment_codes=", ".join(markdown_code(e) for e in environments) or "unknown",
        model_link=_model_link(model_repo or record.base_model),
        preset=markdown_code(record.preset or "none"),
        trajectories=_fmt(summary.get("trajectories", 0)),
        total_added=_fmt(summary.get("total_added", 0)),
        capacity=_fmt(capacity) if capacity else "N",
        first_step=_fmt(summary.get("first_step")),
        last_step=_fmt(summary.get("last_step")),
        success=_fmt(summary.get("success")),
        mean_return=_fmt(summary.get("return")),
        environment_table=_table(["environment", "trajectories", "success", "95% interval", "return", "turns"], rows),
        repo_literal=json.dumps(repo_id),
        offline_command=markdown_code(f"python recipes/offline.py --trajectories {_shell_word(repo_id)} "
                                      "--model_name_or_path <model> --output_dir out"),
        citation=RAGEN_CITATION,
    )
    return card.content + "\n"


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
    from huggingface_hub import DatasetCard, DatasetCardData

    environment = check_environment_name(environment)
    splits = [{"name": split, "num_bytes": tasks[split].data.nbytes, "num_examples": len(tasks[split])}
              for split in data_files]
    card_data = DatasetCardData(
        tags=TAGS + ["environment-tasks", f"env:{environment}"] if repo_id else None,
        configs=[{"config_name": "default",
                  "data_files": [{"split": split, "path": path} for split, path in data_files.items()]}],
        # datasets keys the cache of a folder with `configs` on its card, not on its files: these sizes change with
        # the data, so a new version of the files is not served from the cache of the old one.
        dataset_info={"splits": splits, "download_size": download_size,
                      "dataset_size": sum(split["num_bytes"] for split in splits)},
    )
    first = next(iter(data_files))
    load_arguments = [json.dumps(environment), json.dumps(first)] + ([f"source={json.dumps(repo_id)}"] if repo_id else [])
    card = DatasetCard.from_template(
        card_data,
        template_path=TEMPLATES / "tasks_card.md",
        title=markdown_text(repo_id.split("/")[-1] if repo_id else f"{environment} tasks"),
        environment_code=markdown_code(environment),
        split_table=_table(["split", "rows"], [[markdown_code(s["name"]), _fmt(s["num_examples"])] for s in splits]),
        where=json.dumps(repo_id) if repo_id else f"str(trl_starpo.envs.tasks_data_dir({json.dumps(environment)}))",
        split_names=" ".join(", ".join(data_files).split()),
        load_arguments=", ".join(load_arguments),
        eval_command=markdown_code(f"trl-starpo eval --env {environment} --split {_shell_word(first)} --tasks "
                                   f"{_shell_word(repo_id)} --policy random") if repo_id else "",
    )
    return card.content.rstrip() + "\n"
