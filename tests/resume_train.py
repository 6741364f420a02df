"""Run by test_resume.py under `accelerate launch --multi_gpu --num_processes 2`: a StarPO-S run with both critics,
the trajectory store and the echo-trap monitor, checkpointing every 3 steps. `--kill-at N` ends it with SIGKILL
(kill -9: no handler, no cleanup) at step N; `--resume CHECKPOINT` continues a killed run."""

import argparse
import os
import signal

import torch.distributed as dist
from conftest import CounterEnv
from datasets import Dataset
from test_trainer import make_args
from transformers import TrainerCallback

from trl_starpo import StarPOTrainer
from trl_starpo.monitor.callbacks import attach_agent_callbacks
from trl_starpo.monitor import add_echo_trap_monitor

MAX_STEPS = 9
SAVE_STEPS = 3


class KillAt(TrainerCallback):
    def __init__(self, step: int):
        self.step = step

    def on_step_end(self, args, state, control, **kwargs):
        if state.global_step == self.step:
            os.kill(os.getpid(), signal.SIGKILL)


def kill_while_saving(trainer, stage: str, step: int) -> None:
    """SIGKILL every process at ``stage`` of writing checkpoint-``step``: before the optimizer state (only the weights
    written), after the Trainer's own files, after the trajectory store, or just before the seal."""
    from trl_starpo.monitor.callbacks import TrajectoryStoreCallback

    def kill() -> None:
        if trainer.state.global_step == step:
            os.kill(os.getpid(), signal.SIGKILL)

    def before(owner, name):
        original = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: (kill(), original(*args, **kwargs))[1])

    def after(owner, name):
        original = getattr(owner, name)
        setattr(owner, name, lambda *args, **kwargs: (original(*args, **kwargs), kill())[0])

    if stage == "weights":
        before(trainer, "_save_optimizer_and_scheduler")
    elif stage == "trainer_state":
        after(trainer, "_save_checkpoint")
    elif stage == "store":
        after(next(c for c in trainer.callback_handler.callbacks if isinstance(c, TrajectoryStoreCallback)), "on_save")
    elif stage == "seal":
        before(trainer.checkpoint_seal, "on_save")
    else:
        raise ValueError(stage)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("output_dir")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--resume", help="a checkpoint folder, or 'last' for the newest whole one")
    parser.add_argument("--kill-while-saving", help="weights, trainer_state, store or seal (of checkpoint-6)")
    options = parser.parse_args()
    resume = True if options.resume == "last" else options.resume

    # Three tasks, one group of 4 trajectories (2 per rank) per generation, each used for two updates: an epoch is 6
    # steps, so the run crosses an epoch, and checkpoint-3 falls between the two updates of a generation batch.
    tasks = Dataset.from_list([{"task_id": f"t{i}", "seed": i, "start": 0, "target": 1 + i} for i in range(3)])
    args = make_args(
        options.output_dir, preset="starpo-s", advantage_estimator="gae", beta=0.0, num_generations=4,
        per_device_train_batch_size=2, num_iterations=2, max_steps=MAX_STEPS, max_turns=2,
        save_strategy="steps", save_steps=SAVE_STEPS,
    )
    trainer = StarPOTrainer(options.model_dir, environment=CounterEnv, args=args, train_dataset=tasks)
    folder = None if resume is True else resume  # with 'last', the callbacks read trainer.resumed_from
    attach_agent_callbacks(trainer, environment="counter", progress=False, resume_from_checkpoint=folder)
    add_echo_trap_monitor(trainer, probe_every=3, probe_size=2, resume_from_checkpoint=folder)
    if options.kill_at:
        trainer.add_callback(KillAt(options.kill_at))
    if options.kill_while_saving:
        kill_while_saving(trainer, options.kill_while_saving, step=2 * SAVE_STEPS)
    trainer.train(resume_from_checkpoint=resume)
    trainer.accelerator.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
