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


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("model_dir")
    parser.add_argument("output_dir")
    parser.add_argument("--kill-at", type=int)
    parser.add_argument("--resume")
    options = parser.parse_args()

    # Three tasks, one group of 4 trajectories (2 per rank) per generation, each used for two updates: an epoch is 6
    # steps, so the run crosses an epoch, and checkpoint-3 falls between the two updates of a generation batch.
    tasks = Dataset.from_list([{"task_id": f"t{i}", "seed": i, "start": 0, "target": 1 + i} for i in range(3)])
    args = make_args(
        options.output_dir, preset="starpo-s", advantage_estimator="gae", beta=0.0, num_generations=4,
        per_device_train_batch_size=2, num_iterations=2, max_steps=MAX_STEPS, max_turns=2,
        save_strategy="steps", save_steps=SAVE_STEPS,
    )
    trainer = StarPOTrainer(options.model_dir, environment=CounterEnv, args=args, train_dataset=tasks)
    attach_agent_callbacks(trainer, environment="counter", progress=False, resume_from_checkpoint=options.resume)
    add_echo_trap_monitor(trainer, probe_every=3, probe_size=2, resume_from_checkpoint=options.resume)
    if options.kill_at:
        trainer.add_callback(KillAt(options.kill_at))
    trainer.train(resume_from_checkpoint=options.resume)
    trainer.accelerator.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
