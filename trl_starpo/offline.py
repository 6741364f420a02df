"""Offline StarPO: train on a logged trajectory dataset, with no environment.

``OfflineStarPOTrainer`` is a ``StarPOTrainer`` whose "rollouts" are read from a dataset with the trajectory store's
schema (``docs/trajectories.md``) instead of being played. Its training rows are the logged groups (trajectories that
share a step and a group, i.e. a start state); each group's trajectories are scored exactly as in online training —
group-relative advantages from their stored returns, the same masks, filters and critics — and the policy-gradient
loss weighs each token by the importance ratio between the current policy and the **logged sampling log-probs**
(GRPO's ``old_per_token_logps``), clipped as usual.

A logged trajectory without log-probs is weighed against the policy being trained as it was when the batch was read
(a ratio of one on the first update of the batch): the stored returns still drive the update, but nothing corrects
for the distance between the policy that sampled it and the current one.
"""

from __future__ import annotations

import logging
import math
from collections import OrderedDict
from typing import Any

import torch

from .monitor.callbacks import attach_agent_callbacks
from .store import TrajectoryStore, record_trajectory
from .trainer import StarPOTrainer
from .trajectory import Trajectory

logger = logging.getLogger(__name__)


def load_trajectory_dataset(source):
    """A ``datasets.Dataset`` of logged trajectories from a Dataset, a ``TrajectoryStore``, a saved store folder, a
    ``save_to_disk`` / Parquet folder or file, or a Hub dataset id."""
    import datasets

    if isinstance(source, datasets.Dataset):
        return source
    if isinstance(source, TrajectoryStore):
        return source.to_dataset()
    from pathlib import Path

    path = Path(str(source))
    if path.is_dir() and ((path / "CURRENT").is_file() or (path / "state.json").is_file()):
        return TrajectoryStore.load(path).to_dataset()
    if path.is_file() and path.suffix == ".parquet":
        return datasets.load_dataset("parquet", data_files=str(path), split="train")
    return datasets.load_dataset(str(source), split="train")


def logged_groups(dataset, group_size: int) -> list[list[int]]:
    """Row indices of the logged groups (same step, environment and group) that have exactly ``group_size`` rows.

    Groups of another size (cut by the store's capacity, or logged with another ``num_generations``) are left out,
    with a warning; none left is an error that names the sizes found.
    """
    keys = zip(dataset["step"], dataset["environment"], dataset["group"])
    groups: OrderedDict[tuple, list[int]] = OrderedDict()
    for index, key in enumerate(keys):
        groups.setdefault(key, []).append(index)
    kept = [rows for rows in groups.values() if len(rows) == group_size]
    if not kept:
        sizes = sorted({len(rows) for rows in groups.values()})
        raise ValueError(
            f"No logged group has num_generations={group_size} trajectories (the groups have {sizes}); set "
            f"num_generations to the group size the trajectories were logged with."
        )
    if len(kept) < len(groups):
        logger.warning("Left out %d of %d logged groups whose size is not %d.", len(groups) - len(kept), len(groups),
                       group_size)
    return kept


def _no_environment():
    raise RuntimeError("OfflineStarPOTrainer has no environment: it trains on logged trajectories only.")


class OfflineStarPOTrainer(StarPOTrainer):
    """StarPO on logged trajectories, without an environment.

    Args:
        model: A model id or path, or a loaded causal LM; it must share the tokenizer the trajectories were logged
            with, since they are kept as token ids.
        trajectories: The logged trajectories (see ``load_trajectory_dataset`` for the accepted sources).
        args: A ``StarPOConfig``; ``num_generations`` must be the logged group size.
        processing_class, callbacks, optimizers, peft_config: As for ``StarPOTrainer``.

    Example:
    ```python
    from trl_starpo import StarPOConfig
    from trl_starpo.offline import OfflineStarPOTrainer

    trainer = OfflineStarPOTrainer(
        model="HuggingFaceTB/SmolLM2-135M-Instruct",
        trajectories="outputs/sokoban-starpo/trajectories",
        args=StarPOConfig(output_dir="sokoban-offline", num_generations=4, per_device_train_batch_size=8),
    )
    trainer.train()
    ```
    """

    _tag_names = ["trl", "starpo", "agent", "offline"]

    def __init__(self, model, trajectories, args=None, processing_class=None, callbacks=None,
                 optimizers=(None, None), peft_config=None):
        import datasets

        from .config import StarPOConfig

        args = args or StarPOConfig(output_dir="starpo-offline")
        self.logged = load_trajectory_dataset(trajectories)
        self.logged_groups = logged_groups(self.logged, args.num_generations)
        task_ids = self.logged["task_id"]
        rows = [{"task_id": task_ids[members[0]], "logged_group": i} for i, members in enumerate(self.logged_groups)]
        super().__init__(
            model=model,
            environment=_no_environment,
            args=args,
            train_dataset=datasets.Dataset.from_list(rows),
            processing_class=processing_class,
            callbacks=callbacks,
            optimizers=optimizers,
            peft_config=peft_config,
        )
        self._check_vocabulary()
        attach_agent_callbacks(self, save_trajectories=False)  # the logged trajectories are the data, not a log

    def _check_vocabulary(self) -> None:
        import pyarrow.compute as pc

        table = self.logged.data.table
        largest = pc.max(pc.list_flatten(table.column("token_ids"))).as_py()
        vocabulary = len(self._tokenizer)
        if largest is not None and largest >= vocabulary:
            raise ValueError(
                f"The logged trajectories hold token id {largest}, beyond this tokenizer's {vocabulary} tokens: train "
                "offline with the model (tokenizer) the trajectories were logged with."
            )

    def _check_environment(self) -> None:
        """Nothing to check: offline training plays no environment."""

    def collect_trajectories(self, tasks: list[dict[str, Any]], groups: list[int]) -> list[Trajectory]:
        """Read, instead of play, the logged trajectories of ``tasks`` (logged-group rows, each repeated once per
        member by the sampler): the k-th repetition of a group takes the group's k-th trajectory."""
        group_size = self.num_generations if self.model.training else self.num_generations_eval
        offset = self.accelerator.process_index * len(tasks)
        trajectories = []
        for i, (task, group) in enumerate(zip(tasks, groups)):
            member = offset + i - group * group_size
            rows = self.logged_groups[task["logged_group"]]
            record = self.logged[rows[member % len(rows)]]
            trajectory = record_trajectory(record)
            trajectory.group = group
            trajectories.append(trajectory)
        return trajectories

    def score_trajectories(self, trajectories: list[Trajectory], group_size: int, offset: int, mode: str = "train"):
        """As in online StarPO, then weigh the loss against the logged sampling log-probs where there are some."""
        output = super().score_trajectories(trajectories, group_size, offset, mode)
        width = output["completion_ids"].size(1)
        logged = [_completion_logps(t, width) for t in trajectories]
        if not any(row is not None for row in logged):
            return output
        device = output["completion_ids"].device
        if "old_per_token_logps" in output:
            old = output["old_per_token_logps"].clone()
        else:
            old = self._current_logps(output)
        for row, values in enumerate(logged):
            if values is not None:
                old[row] = values.to(device=device, dtype=old.dtype)
        output["old_per_token_logps"] = old
        self._metrics[mode]["offline/logged_logprobs_fraction"].append(
            sum(row is not None for row in logged) / len(logged)
        )
        return output

    def _current_logps(self, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        input_ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
        attention_mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
        with torch.no_grad(), self._scoring(batch["completion_mask"] * batch["tool_mask"]):
            logps, _, _ = self._get_per_token_logps_and_entropies(
                self.model, input_ids, attention_mask, batch["completion_ids"].size(1),
                batch_size=self.args.per_device_train_batch_size,
            )
        return logps

    def evaluate_episodes(self, tasks, num_episodes: int | None = None) -> dict[str, float]:
        raise RuntimeError("OfflineStarPOTrainer has no environment to play; evaluate with trl-starpo eval.")


def _completion_logps(trajectory: Trajectory, width: int) -> torch.Tensor | None:
    """The logged log-probs of the trajectory's completion tokens, padded to ``width``; NaN (unsampled) -> 0."""
    values = getattr(trajectory, "logprobs", None)
    if values is None:
        return None
    completion = [0.0 if (v is None or math.isnan(v)) else float(v) for v in values[trajectory.prompt_length:]]
    completion = (completion or [0.0])[:width]
    return torch.tensor(completion + [0.0] * (width - len(completion)), dtype=torch.float32)
