"""What a checkpoint needs, beyond the Trainer's own files, for a resumed run to go on exactly as an uninterrupted one.

``Trainer`` restores weights, optimizer, scheduler and RNG states, and skips the batches already trained. GRPO's
training loop also keeps state between optimizer steps that decides what is trained next: the count of micro-steps
(when to collect fresh rollouts), the rollouts collected but not yet used (``num_iterations > 1`` or
``steps_per_generation > gradient_accumulation_steps``), and StarPO's KL early stopping. ``save_rollout_state`` writes
them with the RNG state of each process and ``load_rollout_state`` restores them, so a run resumed from any
checkpoint trains on the same rollouts, in the same order, as the uninterrupted run.

``EpochSeededSampler`` fixes the order of the tasks: GRPO's sampler draws each epoch's shuffle from one generator
that a resumed process creates afresh, so a run resumed after its first epoch would see the first epoch's order again.
"""

from __future__ import annotations

import json
import logging
import os

import torch
from safetensors.torch import load_file, save_file
from torch.utils.data import Sampler

logger = logging.getLogger(__name__)

STATE_FILE = "rollout_state_{rank}.json"
BUFFER_FILE = "rollout_buffer_{rank}.safetensors"


class EpochSeededSampler(Sampler):
    """Wraps a sampler that shuffles with its own ``generator`` (TRL's ``RepeatSampler``) so that the order of epoch
    ``e`` depends on ``seed + e`` alone, however many epochs this process has iterated before.

    The Trainer (through accelerate's data loader) calls ``set_epoch`` before every epoch.
    """

    def __init__(self, sampler: Sampler, seed: int):
        self.sampler = sampler
        self.seed = seed

    def set_epoch(self, epoch: int) -> None:
        generator = getattr(self.sampler, "generator", None)
        if generator is not None:
            generator.manual_seed(self.seed + epoch)

    def __iter__(self):
        return iter(self.sampler)

    def __len__(self) -> int:
        return len(self.sampler)


def _files(folder: str, rank: int) -> tuple[str, str]:
    return os.path.join(folder, STATE_FILE.format(rank=rank)), os.path.join(folder, BUFFER_FILE.format(rank=rank))


def save_rollout_state(trainer, folder: str) -> None:
    """Write this process's micro-step count, buffered rollouts and KL early-stopping state into ``folder``."""
    state_path, buffer_path = _files(folder, trainer.args.process_index)
    buffer = trainer._buffered_inputs or []
    names = list(buffer[0]) if buffer else []
    if any(not isinstance(batch[name], (torch.Tensor, type(None))) for batch in buffer for name in names):
        logger.warning("The rollout buffer holds more than tensors; a run resumed from %s collects fresh rollouts.", folder)
        buffer, names = [], []
    if buffer:
        tensors = {f"{index}/{name}": batch[name].detach().cpu().clone()
                   for index, batch in enumerate(buffer) for name in names if batch[name] is not None}
        save_file(tensors, buffer_path)
    early_stopping = trainer.kl_early_stopping
    state = {
        "micro_step": trainer._step,
        "generation_start": trainer._generation_start,
        "buffered_batches": len(buffer),
        "names": names,
        "kl_early_stop": {"triggered": early_stopping.triggered, "last_kl": early_stopping.last_kl},
        "kl_early_stops": list(trainer.kl_early_stops),
    }
    with open(state_path, "w") as handle:
        json.dump(state, handle)


def load_rollout_state(trainer, folder: str) -> None:
    """Restore what ``save_rollout_state`` wrote; a checkpoint without it leaves the trainer to collect afresh."""
    state_path, buffer_path = _files(folder, trainer.args.process_index)
    if not os.path.isfile(state_path):
        logger.warning(
            "%s has no rollout state: the resumed run collects fresh rollouts at its first step and may differ from "
            "an uninterrupted one.", folder
        )
        return
    with open(state_path) as handle:
        state = json.load(handle)
    trainer._step = int(state["micro_step"])
    trainer._generation_start = int(state.get("generation_start", 0))
    trainer._buffered_inputs = None
    if state["buffered_batches"]:
        tensors = {key: value.to(trainer.accelerator.device) for key, value in load_file(buffer_path).items()}
        trainer._buffered_inputs = [
            {name: tensors.get(f"{index}/{name}") for name in state["names"]}
            for index in range(state["buffered_batches"])
        ]
    trainer.kl_early_stopping.triggered = bool(state["kl_early_stop"]["triggered"])
    trainer.kl_early_stopping.last_kl = float(state["kl_early_stop"]["last_kl"])
    trainer.kl_early_stops = list(state["kl_early_stops"])
