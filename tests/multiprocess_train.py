"""Run by test_multiprocess.py on two processes (`accelerate launch --config_file
recipes/accelerate_configs/multi_gpu.yaml`): trains a few StarPO steps with one task group split across the two
ranks, and writes what each rank saw and ended with."""

import hashlib
import json
import sys

import torch
import torch.distributed as dist
from conftest import CounterEnv
from datasets import Dataset

from test_trainer import make_args

from trl_starpo import StarPOTrainer
from trl_starpo.algorithms.gigpo import step_records


def digest_of(module) -> str:
    digest = hashlib.sha256()
    for name, parameter in sorted(module.named_parameters()):
        digest.update(name.encode())
        digest.update(parameter.detach().cpu().numpy().tobytes())
    return digest.hexdigest()


def main(model_dir: str, output_dir: str, preset: str | None = None) -> None:
    tasks = Dataset.from_list([{"task_id": f"t{i}", "seed": i, "start": 0, "target": 2} for i in range(8)])
    if preset is None:  # one group of 8 rollouts spans both ranks (4 each)
        args = make_args(output_dir, num_generations=8, per_device_train_batch_size=4, max_steps=3)
    elif preset == "gigpo":  # the same, so that GiGPO's step groups span both ranks
        args = make_args(output_dir, preset=preset, num_generations=8, per_device_train_batch_size=4, max_steps=3)
    elif preset == "window":  # the same, each turn a row: the ranks' turn counts differ, their rows must not
        args = make_args(output_dir, num_generations=8, per_device_train_batch_size=4, gradient_accumulation_steps=2,
                         max_steps=3, context_policy="window", history_turns=1)
    else:  # two groups of 4, one on each rank
        args = make_args(output_dir, preset=preset, num_generations=4, per_device_train_batch_size=4, max_steps=3)
    trainer = StarPOTrainer(model_dir, environment=CounterEnv, args=args, train_dataset=tasks)
    advantages, turn_advantages, kept, rows = [], [], [], []
    original = trainer._generate_and_score_completions

    def record(inputs):
        output = original(inputs)
        kept.append(trainer._metrics["train"]["filter/kept_fraction"][-1])
        rows.append([len(output["prompt_ids"]), sum(len(t.turns) for t in trainer.last_trajectories)])
        if args.context_policy == "window":
            return output
        mask = output["tool_mask"].bool()
        advantages.append([row[m][0].item() if m.any() else None for row, m in zip(output["advantages"], mask)])
        turn_advantages.append([
            [output["advantages"][row, turn.response_start - t.prompt_length].item() for turn in t.turns]
            for row, t in enumerate(trainer.last_trajectories)
        ])
        return output

    trainer._generate_and_score_completions = record
    trainer.train()
    rank = trainer.accelerator.process_index
    record = {
        "world_size": trainer.accelerator.num_processes,
        "weights": digest_of(trainer.model),
        "critics": {name: digest_of(critic) for name, critic in trainer._critics().items()},
        "kept_fraction": kept,
        "rows": rows,
        "returns": [t.episode_return for t in trainer.last_trajectories],
        "task_ids": [t.task_id for t in trainer.last_trajectories],
        "groups": [t.group for t in trainer.last_trajectories],
        "advantages": advantages[-1] if advantages else None,
        "turn_advantages": turn_advantages[-1] if turn_advantages else None,
        "step_records": [step_records(t, args.gigpo_gamma) for t in trainer.last_trajectories],
        "changed": not torch.equal(
            trainer.model.get_input_embeddings().weight.detach().cpu(),
            type(trainer.model).from_pretrained(model_dir).get_input_embeddings().weight,
        ),
    }
    with open(f"{output_dir}/rank{rank}.json", "w") as handle:
        json.dump(record, handle)
    trainer.accelerator.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:])
