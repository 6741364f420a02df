"""Pushing trained agents and their trajectory datasets to the Hugging Face Hub.

An agent repository holds the weights (a LoRA adapter stays an adapter), the tokenizer, ``starpo_agent.json``, the
learning-curve PNG and a model card made for agents (``cards.model_card``). The trajectories go to a dataset
repository (one Parquet file and a dataset card), and so do an environment's task splits (``push_tasks``: one Parquet
file a split and a card mapping each). Everything goes through ``huggingface_hub.HfApi``: one ``create_repo`` and one
``create_commit`` per repository, so a push is all or nothing.

``StarPOHubMixin`` gives a trainer (``StarPOTrainer`` inherits it) the agent card and push (``create_model_card``,
``push_to_hub``).
"""

from __future__ import annotations

import dataclasses
import io
import json
import logging
import re
import tempfile
from pathlib import Path
from typing import Any

from ..checkpoints import SEAL_FILE
from ..json_files import json_text
from .cards import PLOT_FILE, AgentRecord, dataset_card, model_card, tasks_card
from ..rollout.settings import AGENT_FILE

logger = logging.getLogger(__name__)

TRAJECTORY_FOLDER = "trajectories"
"""Where the trajectory store is saved inside an output_dir or a checkpoint."""

AGENT_IGNORE_PATTERNS = [
    "_*",
    "checkpoint-*",
    SEAL_FILE,  # a checkpoint's own bookkeeping
    f"{TRAJECTORY_FOLDER}/*",
    "runs/*",
    "optimizer.*",
    "scheduler.*",
    "scaler.*",
    "rng_state*",
    "*.pt",
    "*.pth",
    "*.bin",  # pickles (training_args.bin, pytorch_model.bin): weights go as safetensors
    "*.html",
    ".*",
]
"""Files of an output_dir or checkpoint that are not part of an agent repository."""


# ----------------------------------------------------------------------------------------- agent records


def public_model_name(name: str | None) -> str | None:
    """``name``, except the embedded default model's cache folder, which maps back to its Hub id."""
    if not name:
        return None
    from ..models import DEFAULT_MODEL, cache_dir

    try:
        if Path(name).resolve() == (cache_dir() / "models" / "SmolLM2-135M-Instruct").resolve():
            return DEFAULT_MODEL
    except OSError:
        pass
    return name


def is_adapter_model(model) -> bool:
    """Whether ``model`` (possibly wrapped) is a PEFT model whose saved weights are an adapter."""
    return bool(getattr(model, "peft_config", None))


def base_model_name(model) -> str | None:
    """The model a (possibly PEFT) model was fine-tuned from, as a Hub id where known."""
    peft_config = getattr(model, "peft_config", None)
    if peft_config:
        return public_model_name(next(iter(peft_config.values())).base_model_name_or_path)
    return public_model_name(getattr(model.config, "_name_or_path", None))


def agent_record(trainer) -> AgentRecord:
    """The ``AgentRecord`` of a trainer: what ``attach_agent_callbacks`` recorded, updated with the run's state."""
    base: AgentRecord | None = getattr(trainer, "starpo_agent", None)
    model = trainer.accelerator.unwrap_model(trainer.model)
    environment = getattr(trainer, "environment_name", None)
    record = AgentRecord.from_config(
        trainer.args,
        environments=list(base.environments) if base and base.environments else ([environment] if environment else []),
        base_model=(base.base_model if base and base.base_model else None) or base_model_name(model),
        adapter=is_adapter_model(model),
        validation=dict(base.validation) if base else {},
        global_step=trainer.state.global_step,
        trajectories_repo=base.trajectories_repo if base else None,
    )
    if base and base.preset:
        record.preset = base.preset
    if base:  # what the run added (its warm start, say), under the figures read from the trainer now
        record.training = {**base.training, **record.training}
    return record


def write_agent_files(trainer, folder: str | Path | None = None) -> AgentRecord:
    """Write ``starpo_agent.json`` and the learning-curve PNG of ``trainer``'s run into ``folder`` (its output_dir)."""
    from ..display.plotting import plot_learning_curves

    folder = Path(folder or trainer.args.output_dir)
    record = agent_record(trainer)
    record.save(folder)
    if trainer.state.log_history:
        title = f"{', '.join(record.environments) or 'StarPO'} — {Path(trainer.args.output_dir).name}"
        plot_learning_curves(trainer.state.log_history, folder / PLOT_FILE, title=title, validation=record.validation)
    return record


# ------------------------------------------------------------------------------------------ trainer methods


def create_model_card(trainer, model_name: str | None = None, dataset_name: str | None = None,
                      tags: str | list[str] | None = None, **_: Any) -> None:
    """``Trainer.create_model_card`` for agents: README.md, starpo_agent.json and the learning curves in output_dir.

    Same signature as TRL's, so ``Trainer.push_to_hub`` and ``_save_checkpoint`` call it unchanged.
    """
    if not trainer.is_world_process_zero():
        return
    record = write_agent_files(trainer)
    # Before a push the card names the folder as given, so its commands run from where training was launched.
    repo_id = getattr(trainer, "hub_model_id", None) or trainer.args.hub_model_id or str(trainer.args.output_dir)
    extra = [tags] if isinstance(tags, str) else list(tags or [])
    plot = PLOT_FILE if (Path(trainer.args.output_dir) / PLOT_FILE).is_file() else None
    card = model_card(record, repo_id=repo_id, model_name=model_name, plot_file=plot, extra_tags=extra)
    Path(trainer.args.output_dir, "README.md").write_text(card, encoding="utf-8")


def push_to_hub(trainer, commit_message: str | None = "End of training", blocking: bool = True,
                token: str | None = None, revision: str | None = None, private: bool | None = None,
                push_trajectories: bool = True, **kwargs: Any):
    """``Trainer.push_to_hub`` for agents: the agent (card, curves, weights; no optimizer or pickles), then its
    trajectories, when a store was saved in output_dir, to the dataset repository ``<repo>-trajectories``.

    Returns the model commit (or its future when ``blocking=False``).
    """
    trainer.callback_handler.on_push_begin(trainer.args, trainer.state, trainer.control)
    token = token if token is not None else trainer.args.hub_token
    if trainer.hub_model_id is None:
        trainer.init_hf_repo(token=token, private=private)
    trainer.save_model(_internal_call=True)
    if not trainer.is_world_process_zero():
        return None
    model_name = kwargs.pop("model_name", None) or trainer.hub_model_id.split("/")[-1]
    store_dir = Path(trainer.args.output_dir, TRAJECTORY_FOLDER)
    if push_trajectories and _has_store(store_dir):
        from ..store import TrajectoryStore

        dataset_repo = f"{trainer.hub_model_id}-trajectories"
        record = agent_record(trainer)
        push_trajectories_to_hub(TrajectoryStore.load(store_dir), dataset_repo, record=record,
                                 model_repo=trainer.hub_model_id, token=token, private=private)
        base = getattr(trainer, "starpo_agent", None) or AgentRecord()
        base.trajectories_repo = dataset_repo
        trainer.starpo_agent = base
    trainer.create_model_card(model_name=model_name, **kwargs)
    trainer._finish_current_push()
    from huggingface_hub import HfApi

    return HfApi(token=token).upload_folder(
        repo_id=trainer.hub_model_id,
        folder_path=trainer.args.output_dir,
        commit_message=commit_message,
        ignore_patterns=AGENT_IGNORE_PATTERNS,
        revision=revision if revision is not None else trainer.args.hub_revision,
        run_as_future=not blocking,
    )


class StarPOHubMixin:
    """Agent model cards and pushes for a ``Trainer`` subclass (put it before ``GRPOTrainer`` in the bases)."""

    def create_model_card(self, model_name=None, dataset_name=None, tags=None, **kwargs):
        return create_model_card(self, model_name=model_name, dataset_name=dataset_name, tags=tags, **kwargs)

    def push_to_hub(self, commit_message="End of training", blocking=True, token=None, revision=None, private=None,
                    **kwargs):
        return push_to_hub(self, commit_message=commit_message, blocking=blocking, token=token, revision=revision,
                           private=private, **kwargs)


# ---------------------------------------------------------------------------------------------- pushing


def _has_store(folder: Path) -> bool:
    from ..store import POINTER

    return (folder / POINTER).is_file()


def dataset_files(store, *, repo_id: str, record: AgentRecord | None = None,
                  model_repo: str | None = None) -> dict[str, bytes]:
    """The files a trajectory push sends: ``README.md`` (dataset card) and the Parquet data file."""
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    pq.write_table(store.table(), buffer)
    card = dataset_card(store.summary(), repo_id=repo_id, record=record, model_repo=model_repo,
                        capacity=store.capacity)
    return {"README.md": card.encode("utf-8"), "data/train-00000-of-00001.parquet": buffer.getvalue()}


def push_trajectories_to_hub(store, repo_id: str, *, record: AgentRecord | None = None,
                             model_repo: str | None = None, token: str | None = None, private: bool | None = None,
                             commit_message: str = "Upload StarPO trajectories") -> str:
    """Push a ``TrajectoryStore`` as the dataset repository ``repo_id`` with a dataset card; returns its URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    api = HfApi(token=token)
    files = dataset_files(store, repo_id=repo_id, record=record, model_repo=model_repo)
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    api.create_commit(
        url.repo_id,
        [CommitOperationAdd(path, content) for path, content in files.items()],
        commit_message=commit_message,
        repo_type="dataset",
    )
    return str(url)


def task_files(environment: str, tasks, *, repo_id: str) -> dict[str, bytes]:
    """The files a task push sends: ``data/<split>-00000-of-00001.parquet`` for each split of ``tasks`` (a
    ``DatasetDict``) and ``README.md``, a card whose ``configs`` map every split by its own name."""
    files, data_files = {}, {}
    for split, dataset in tasks.items():
        if not re.fullmatch(r"\w+", split):
            raise ValueError(f"Split name {split!r} is not a word (letters, digits, underscores); it names a file.")
        buffer = io.BytesIO()
        dataset.to_parquet(buffer)
        data_files[split] = f"data/{split}-00000-of-00001.parquet"
        files[data_files[split]] = buffer.getvalue()
    size = sum(len(content) for content in files.values())
    files["README.md"] = tasks_card(environment, data_files, tasks, download_size=size, repo_id=repo_id).encode("utf-8")
    return files


def write_tasks_card(name: str, data_dir: str | Path | None = None) -> Path:
    """Write the ``README.md`` of environment ``name``'s data folder (``tasks_data_dir`` by default): a dataset card
    whose ``configs`` map each split of ``load_tasks(name)`` to its ``<split>.jsonl``, so that
    ``datasets.load_dataset(folder)`` returns the splits by the environment's own names (without it, ALFWorld's
    ``valid_seen`` and ``valid_unseen`` merge into one ``validation`` split)."""
    from ..envs import load_tasks, tasks_data_dir

    folder = Path(data_dir) if data_dir is not None else tasks_data_dir(name)
    tasks = load_tasks(name)
    files = {split: f"{split}.jsonl" for split in tasks}
    size = sum((folder / file).stat().st_size for file in files.values())
    path = folder / "README.md"
    path.write_text(tasks_card(name, files, tasks, download_size=size), encoding="utf-8")
    return path


def push_tasks(environment: str, repo_id: str, *, private: bool | None = None, token: str | None = None,
               commit_message: str = "Upload StarPO environment tasks") -> str:
    """Push every task split of the installed environment ``environment`` to the dataset repository ``repo_id``;
    ``datasets.load_dataset(repo_id)`` then returns them by the environment's split names, and
    ``load_tasks(environment, split, source=repo_id)`` plays them. Returns the repository URL."""
    from huggingface_hub import CommitOperationAdd, HfApi

    from ..envs import load_tasks

    tasks = load_tasks(environment)
    api = HfApi(token=token)
    url = api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
    files = task_files(environment, tasks, repo_id=url.repo_id)
    api.create_commit(url.repo_id, [CommitOperationAdd(path, content) for path, content in files.items()],
                      commit_message=commit_message, repo_type="dataset")
    return str(url)


def agent_files(folder: str | Path, *, repo_id: str, record: AgentRecord | None = None) -> dict[str, Path | bytes]:
    """The files an agent push sends from ``folder`` (an output_dir or checkpoint): its weights, tokenizer and
    configs (``AGENT_IGNORE_PATTERNS`` left out), ``starpo_agent.json``, the learning curves (drawn from
    ``trainer_state.json`` when the folder has no PNG) and a fresh model card. Paths are read lazily; generated
    files are bytes.
    """
    from huggingface_hub.utils import filter_repo_objects

    from ..display.plotting import plot_learning_curves

    folder = Path(folder)
    record = record or AgentRecord.load(folder) or AgentRecord()
    relative = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file())
    files: dict[str, Path | bytes] = {
        path: folder / path for path in filter_repo_objects(relative, ignore_patterns=AGENT_IGNORE_PATTERNS)
    }
    weights = ("model.safetensors", "adapter_model.safetensors", "model.safetensors.index.json")
    if not any(name in files for name in weights):
        raise ValueError(f"{folder} holds no safetensors weights (model.safetensors or adapter_model.safetensors).")
    record.adapter = record.adapter or "adapter_config.json" in files
    if PLOT_FILE not in files and (folder / "trainer_state.json").is_file():
        history = _log_history(folder / "trainer_state.json")
        with tempfile.TemporaryDirectory() as scratch:
            png = plot_learning_curves(history, Path(scratch) / PLOT_FILE, title=folder.name,
                                       validation=record.validation)
            files[PLOT_FILE] = png.read_bytes()
    files[AGENT_FILE] = (json_text(dataclasses.asdict(record), indent=2, default=str) + "\n").encode("utf-8")
    card = model_card(record, repo_id=repo_id, plot_file=PLOT_FILE if PLOT_FILE in files else None)
    files["README.md"] = card.encode("utf-8")
    return files


def _log_history(path: Path) -> list[dict[str, Any]]:
    try:
        history = json.loads(path.read_text(encoding="utf-8"))["log_history"]
    except (OSError, ValueError, TypeError, KeyError) as error:
        raise ValueError(f"{path} is not a readable trainer state: {type(error).__name__}: {error}") from None
    if not isinstance(history, list) or not all(isinstance(entry, dict) for entry in history):
        raise ValueError(f"{path} is not a readable trainer state: log_history is not a list of entries.")
    return history


def push_agent(checkpoint: str | Path, repo_id: str, *, trajectories_repo_id: str | None = None,
               push_trajectories: bool = True, private: bool | None = None, token: str | None = None,
               commit_message: str = "Upload StarPO agent", dry_run: str | Path | None = None) -> dict[str, str]:
    """Push a local agent (an output_dir or checkpoint-N folder) and its trajectory store to the Hub.

    The trajectories (``<checkpoint>/trajectories``) go first, to ``trajectories_repo_id`` (default
    ``<repo_id>-trajectories``), so the model card can link them. Returns ``{"model": url, "trajectories": url}``.

    Everything sent is read and built before the first request: a folder without weights, an unreadable
    ``starpo_agent.json``, ``trainer_state.json`` or store, a repository id without its namespace, or offline mode
    (``HF_HUB_OFFLINE=1``) raise ``ValueError`` and leave nothing on the Hub. With ``dry_run`` (a folder), nothing
    is sent, online or not: each repository's generated files (cards, ``starpo_agent.json``, curves, the trajectory
    data) and ``files.json``, the list of every file it would receive with its size, are written under
    ``<dry_run>/<repository>/``; the returned mapping holds those folders.
    """
    from huggingface_hub import CommitOperationAdd, HfApi, constants

    folder = Path(checkpoint)
    if not folder.is_dir():
        raise ValueError(f"No checkpoint folder at {folder}.")
    record = _read_record(folder)
    store_dir = folder / TRAJECTORY_FOLDER
    store = _read_store(store_dir) if push_trajectories and _has_store(store_dir) else None
    if push_trajectories and trajectories_repo_id and store is None:
        raise ValueError(f"No trajectory store in {store_dir} to push to {trajectories_repo_id}.")
    _check_repo_id(repo_id)
    dataset_repo = (trajectories_repo_id or f"{repo_id}-trajectories") if store is not None else None
    if dataset_repo is not None:
        _check_repo_id(dataset_repo)
    linked = dataclasses.replace(record, trajectories_repo=dataset_repo) if dataset_repo else record
    files = agent_files(folder, repo_id=repo_id, record=linked)
    if dry_run is not None:
        written = {"model": str(write_dry_run(Path(dry_run) / repo_id.replace("/", "--"), files))}
        if dataset_repo is not None:
            trajectory_files = dataset_files(store, repo_id=dataset_repo, record=record, model_repo=repo_id)
            written["trajectories"] = str(write_dry_run(Path(dry_run) / dataset_repo.replace("/", "--"),
                                                        trajectory_files))
        return written
    if constants.HF_HUB_OFFLINE:
        raise ValueError(f"HF_HUB_OFFLINE is set: pushing needs the Hub. {folder} is ready; push it online.")

    api = HfApi(token=token)
    model_url = api.create_repo(repo_id, private=private, exist_ok=True)
    urls = {}
    if dataset_repo is not None:
        urls["trajectories"] = push_trajectories_to_hub(
            store, dataset_repo, record=record, model_repo=repo_id, token=token, private=private
        )
    operations = [CommitOperationAdd(path, content if isinstance(content, bytes) else str(content))
                  for path, content in files.items()]
    api.create_commit(model_url.repo_id, operations, commit_message=commit_message)
    urls["model"] = str(model_url)
    return urls


def write_dry_run(folder: Path, files: dict[str, Path | bytes]) -> Path:
    """Write what a push would send to one repository: the generated files themselves, and ``files.json`` listing
    every path with its size in bytes (files already on disk, such as the weights, are listed, not copied)."""
    folder.mkdir(parents=True, exist_ok=True)
    listing = {}
    for path, content in files.items():
        if isinstance(content, bytes):
            target = folder / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(content)
            listing[path] = len(content)
        else:
            listing[path] = Path(content).stat().st_size
    (folder / "files.json").write_text(json.dumps(listing, indent=1) + "\n", encoding="utf-8")
    return folder


def _check_repo_id(repo_id: str) -> None:
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(repo_id)
    except HFValidationError as error:
        raise ValueError(f"Invalid Hub repository id {repo_id!r}: {error}") from None
    if "/" not in repo_id:
        raise ValueError(f"Name the repository with its owner, 'USER/{repo_id}' or 'ORG/{repo_id}'.")


def _read_record(folder: Path) -> AgentRecord:
    try:
        record = AgentRecord.load(folder)
    except (OSError, ValueError, TypeError, AttributeError) as error:
        raise ValueError(f"{folder / AGENT_FILE} is not a readable agent record: {error}") from None
    if record is None:
        logger.warning("%s has no %s: the card will not name the environment or settings.", folder, AGENT_FILE)
    return record or AgentRecord()


def _read_store(folder: Path):
    from ..store import TrajectoryStore

    try:
        return TrajectoryStore.load(folder)
    except Exception as error:  # whatever a damaged store raises (arrow, json, missing files): refuse the push
        raise ValueError(f"{folder} is not a readable trajectory store: {type(error).__name__}: {error}") from None
