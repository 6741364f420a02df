"""Checkpoints that are whole or not used: a run killed while it writes one resumes from the one before.

A checkpoint is written in steps (the weights, the optimizer, the RNG and rollout state, ``trainer_state.json``, then
the callbacks' trajectory store, monitor state and agent files), and a process killed in between leaves a folder that
looks like a checkpoint. ``CheckpointSeal``, the trainer's last callback, writes ``checkpoint_complete.json`` once
everything else is on disk: the list of the folder's files with their sizes, renamed into place so that it is
itself whole. Resuming takes the newest sealed checkpoint whose files all match their seal, says which one and why
newer ones were passed over, and refuses a folder named explicitly that is not whole. A folder left by a killed
write is removed before its step is saved again, so no file of an earlier attempt mixes with the new one; the oldest
sealed checkpoints beyond ``save_total_limit`` are removed only after the newest is sealed.
"""

from __future__ import annotations

import json
import logging
import os
import re
import shutil
from pathlib import Path

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

logger = logging.getLogger(__name__)

SEAL_FILE = "checkpoint_complete.json"
_CHECKPOINT_NAME = re.compile(rf"^{PREFIX_CHECKPOINT_DIR}-(\d+)$")


class IncompleteCheckpointError(ValueError):
    """A checkpoint to resume from is missing, or was not written to the end."""


def _listing(folder: Path) -> dict[str, int]:
    return {str(path.relative_to(folder)): path.stat().st_size
            for path in sorted(folder.rglob("*")) if path.is_file() and path.name != SEAL_FILE}


def seal_checkpoint(folder: str | Path) -> None:
    """Mark ``folder`` whole: write ``checkpoint_complete.json`` (every file and its size) atomically."""
    folder = Path(folder)
    partial = folder / f".{SEAL_FILE}.partial"
    partial.write_text(json.dumps({"files": _listing(folder)}, indent=0))
    os.replace(partial, folder / SEAL_FILE)


def checkpoint_problem(folder: str | Path) -> str | None:
    """Why ``folder`` is not a whole checkpoint (one line), or ``None`` when it is."""
    folder = Path(folder)
    if not folder.is_dir():
        return f"{folder} is not a folder"
    try:
        files = json.loads((folder / SEAL_FILE).read_text())["files"]
        if not isinstance(files, dict):
            raise TypeError
    except FileNotFoundError:
        return f"{folder.name} has no {SEAL_FILE}: the run stopped while writing it"
    except (ValueError, KeyError, TypeError):
        return f"{folder.name}/{SEAL_FILE} is damaged"
    for name, size in files.items():
        path = folder / name
        if not path.is_file():
            return f"{folder.name}/{name} is missing"
        if path.stat().st_size != size:
            return f"{folder.name}/{name} has {path.stat().st_size} bytes where {size} were written"
    return None


def checkpoint_folders(output_dir: str | Path) -> list[tuple[int, Path]]:
    """``(step, folder)`` of every ``checkpoint-<step>`` folder in ``output_dir``, oldest first."""
    output_dir = Path(output_dir)
    if not output_dir.is_dir():
        return []
    found = [(int(match.group(1)), path) for path in output_dir.iterdir()
             if path.is_dir() and (match := _CHECKPOINT_NAME.match(path.name))]
    return sorted(found)


def _seals_its_checkpoints(output_dir: str | Path) -> bool:
    """Whether the run that wrote ``output_dir`` seals its checkpoints (one of them is sealed). Checkpoints of an
    earlier trl_starpo, or of a tool that does not seal, have no seal at all and are taken as they are."""
    return any((folder / SEAL_FILE).is_file() for _, folder in checkpoint_folders(output_dir))


def last_complete_checkpoint(output_dir: str | Path) -> str:
    """The newest whole checkpoint in ``output_dir``; logs each newer one passed over, and why. Raises
    ``IncompleteCheckpointError`` when there is none. In a folder where no checkpoint is sealed (written before
    checkpoints were sealed), the newest ``checkpoint-*`` folder, with a warning."""
    folders = checkpoint_folders(output_dir)
    if folders and not _seals_its_checkpoints(output_dir):
        logger.warning("No checkpoint in %s is sealed (%s): resuming from the newest, %s, as it is.", output_dir,
                       SEAL_FILE, folders[-1][1])
        return str(folders[-1][1])
    passed_over = []
    for _, folder in reversed(folders):
        problem = checkpoint_problem(folder)
        if problem is None:
            for reason in passed_over:
                logger.warning("Not resuming from a newer checkpoint: %s.", reason)
            logger.warning("Resuming from %s, the newest complete checkpoint.", folder)
            return str(folder)
        passed_over.append(problem)
    detail = f" ({'; '.join(passed_over)})" if passed_over else ""
    raise IncompleteCheckpointError(f"{output_dir} holds no complete checkpoint-* folder to resume from{detail}.")


def resolve_resume(value, output_dir: str | Path) -> str | None:
    """The checkpoint folder that ``resume_from_checkpoint=value`` names: ``None``/``False`` for none, ``True`` (or
    ``"true"``/``"last"``) for the newest whole one in ``output_dir``, else the folder given, which must be whole."""
    if value is None or value is False or str(value).lower() in ("false", "none", ""):
        return None
    if value is True or str(value).lower() in ("true", "last"):
        return last_complete_checkpoint(output_dir)
    problem = checkpoint_problem(value)
    if problem and not (Path(value, SEAL_FILE).exists() or _seals_its_checkpoints(Path(value).parent)):
        if Path(value, "trainer_state.json").is_file():  # an unsealed run's checkpoint: nothing to check it against
            logger.warning("%s is not sealed (%s): resuming from it as it is.", value, SEAL_FILE)
            return str(value)
    if problem:
        raise IncompleteCheckpointError(f"cannot resume from {value}: {problem}.")
    return str(value)


def clear_checkpoint_folder(folder: str | Path) -> None:
    """Remove what an earlier, interrupted write of ``folder`` left there."""
    if Path(folder).exists():
        logger.warning("Removing %s, left by an earlier run, before saving this step there.", folder)
        shutil.rmtree(folder)


def rotate_complete_checkpoints(output_dir: str | Path, limit: int | None, keep: tuple[str | Path | None, ...] = ()
                                ) -> None:
    """Remove the whole checkpoints sealed longest ago beyond ``limit`` (``None`` or 0: none), never one of ``keep``
    (the one just sealed, the best one). Unsealed folders are left alone: a killed write's is replaced when its step
    is saved again, and an unsealed run's are not this run's to remove."""
    if not limit or limit < 1:
        return
    complete = [folder for _, folder in checkpoint_folders(output_dir) if checkpoint_problem(folder) is None]
    complete.sort(key=lambda folder: (folder / SEAL_FILE).stat().st_mtime_ns)  # by when written, as transformers
    kept = {Path(folder).resolve() for folder in keep if folder}
    for folder in complete[:-limit]:
        if folder.resolve() not in kept:
            shutil.rmtree(folder, ignore_errors=True)


class CheckpointSeal(TrainerCallback):
    """Seals each checkpoint once every process and every other callback has written its part (the trainer keeps
    this callback last), then applies ``save_total_limit`` to the sealed ones."""

    def __init__(self, trainer):
        self.trainer = trainer

    def on_save(self, args, state, control, **kwargs):
        self.trainer.accelerator.wait_for_everyone()  # every rank's rollout state is written
        # the folder the trainer just wrote (a hyperparameter-search trial writes under output_dir/run-<id>)
        folder = Path(getattr(self.trainer, "last_checkpoint_folder", None)
                      or Path(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}"))
        if state.is_world_process_zero and folder.is_dir():
            seal_checkpoint(folder)
            rotate_complete_checkpoints(folder.parent, args.save_total_limit, keep=(folder, state.best_model_checkpoint))
        self.trainer.accelerator.wait_for_everyone()
