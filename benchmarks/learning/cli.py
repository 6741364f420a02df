"""The command line: ``python benchmarks/learning.py ...`` (see the package's docstring)."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from .protocol import (COLUMNS, DPO_PAIRINGS, ENTRY, METHODS, RECORDS, SMOKE, THINKING_SCALE_RULES, WORKDIR,
                       Scale, shipped_adapter_fits, thinks)
from .runs import run_one
from .scheduler import run_processes
from .table import comparison, folder_table, load_records, markdown, regenerate


def group_sizes(args: argparse.Namespace) -> dict[str, int]:
    """The update's sizes the flags give (--smoke and the protocol keep their own otherwise)."""
    sizes = {"num_generations": args.num_generations, "tasks_per_update": args.tasks_per_update}
    return {name: value for name, value in sizes.items() if value is not None}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=sys.modules[__package__].__doc__.split("\n\n")[0])
    parser.add_argument("--env", nargs="+", default=["minigrid"], help=f"Columns: {', '.join(COLUMNS)} or all.")
    parser.add_argument("--method", nargs="+", default=["all"], help=f"Rows: {', '.join(METHODS)} or all.")
    parser.add_argument("--seed", nargs="+", type=int, default=[0])
    parser.add_argument("--budget", type=int, help="Turns per training run (default: the column's).")
    parser.add_argument("--eval-episodes", type=int, default=Scale.eval_episodes)
    parser.add_argument("--sft-episodes", type=int,
                        help="Expert episodes of the warm start (default: the column's); a smaller warm start is "
                             "quicker to make and is its own setting (its records belong in their own --records "
                             "folder).")
    parser.add_argument("--num-iterations", type=int, default=Scale.num_iterations,
                        help="Optimizer passes over each rollout batch in the RL presets (GRPOConfig.num_iterations).")
    parser.add_argument("--num-generations", type=int,
                        help=f"Rollouts of each task in an update (the RL presets' and DPO's group size; default "
                             f"{Scale.num_generations}). With --tasks-per-update it sets the episodes an update plays; "
                             "records of another size belong in their own --records folder.")
    parser.add_argument("--tasks-per-update", type=int,
                        help=f"Tasks an RL update plays, each --num-generations times (default "
                             f"{Scale.tasks_per_update}; e.g. 1 x 8 instead of 2 x 4: more rollouts a task for the "
                             "same episodes an update). DPO's rounds keep their own number of tasks.")
    parser.add_argument("--learning-rate", type=float, default=Scale.learning_rate,
                        help="The RL presets' learning rate (the warm start's and DPO's keep their own).")
    parser.add_argument("--thinking-scale-rule", choices=THINKING_SCALE_RULES,
                        help="How the thinking critic scales advantages in the RL presets (StarPOConfig."
                             "thinking_scale_rule; default: the preset's). Records of another rule belong in their "
                             "own --records folder.")
    parser.add_argument("--advantage-estimator",
                        help="An ablation: the advantage estimator of the RL presets (StarPOConfig."
                             "advantage_estimator, e.g. gigpo with --method starpo-s; default: each preset's). Records "
                             "of an ablation belong in their own --records folder.")
    parser.add_argument("--no-thinking-critic", action="store_true",
                        help="An ablation: the RL presets without the thinking-quality critic (StarPOConfig."
                             "thinking_critic=False), thinking kept. Records belong in their own --records folder.")
    parser.add_argument("--answer-only", action="store_true",
                        help="An ablation: turns that answer without thinking (StarPOConfig.enable_thinking=False), "
                             "from a warm start made the same way. Records belong in their own --records folder.")
    parser.add_argument("--dpo-pairs", choices=DPO_PAIRINGS, default="best_worst",
                        help="How the dpo row pairs episodes (TrajectoryDPOConfig.pairs): the policy's best against "
                             "its worst episode of a task, or ETO's `expert`, the expert's episode against each of "
                             "the policy's (each task played once). Records of another pairing belong in their own "
                             "--records folder.")
    parser.add_argument("--max-turns", type=int,
                        help="Turns an episode may take (and the actions those turns allow; default: the column's), "
                             "for long episodes, e.g. ALFWorld's 50. Under the full context policy a longer horizon "
                             "scales the column's max_context_length with it. Records of another horizon belong in "
                             "their own --records folder.")
    parser.add_argument("--context-policy", choices=["full", "window"],
                        help="What each turn is given (StarPOConfig.context_policy; default: the column's, full); the "
                             "warm start follows it. Records of another policy belong in their own --records folder.")
    parser.add_argument("--history-turns", type=int, default=2,
                        help="Turns a window keeps (StarPOConfig.history_turns; with --context-policy window).")
    parser.add_argument("--model", help="The base model (default: the embedded SmolLM2-135M-Instruct).")
    parser.add_argument("--workdir", type=Path, default=WORKDIR, help="Checkpoints and warm starts.")
    parser.add_argument("--records", type=Path, help="Where run records go (default: benchmarks/learning_runs).")
    parser.add_argument("--threads", type=int,
                        help="Torch threads (default: torch's, all cores); 1 on a machine shared with other jobs.")
    parser.add_argument("--jobs", type=int, default=1,
                        help="Runs side by side, each its own process (default 1): on a GPU, several runs share it "
                             "well (five WebShop runs, started as separate commands, took 11 minutes side by side on "
                             "one H200); each run's output then goes to <workdir>/logs (<workdir>/smoke/logs with "
                             "--smoke), and each gets its share of the cores unless --threads says.")
    parser.add_argument("--held-out-split",
                        help="Evaluate on this split instead of the column's held-out one: `validation` (ALFWorld: "
                             "`valid_seen`) for exploring budgets, warm starts and learning rates, keeping the test "
                             "split for the final settings. Needs its own --records folder.")
    parser.add_argument("--checkpoint", type=Path, metavar="DIR",
                        help="Train nothing: evaluate this checkpoint-N folder of an RL run of the same flags (a point "
                             "on its way to the budget, e.g. for a budget curve on validation). One --env, --method "
                             "and --seed; its record needs its own --records folder.")
    parser.add_argument("--rerun", action="store_true",
                        help="Make the runs again from the start (their checkpoints removed, which every evaluation of "
                             "the same training shares; the warm start kept) even where a record with the same "
                             "settings exists, and replace their records.")
    parser.add_argument("--table", action="store_true",
                        help="Only regenerate docs/results.md from the records (with --records: print their table and "
                             "write their curves into that folder).")
    parser.add_argument("--compare", nargs="+", type=Path, metavar="RECORDS",
                        help="Only compare one --method on one --env across records folders (an ablation's against "
                             "the main table's, e.g. benchmarks/learning_runs benchmarks/learning_runs/ablations/"
                             "thinking-no-critic): each against the first, paired by task.")
    parser.add_argument("--smoke", action="store_true",
                        help="Tiny budgets (8 turns, 2 episodes an update, 2 held-out episodes), records under "
                             "<workdir>/smoke: the pipeline end to end, not a result.")
    args = parser.parse_args(argv)
    if args.num_iterations < 1:
        parser.error(f"--num-iterations must be at least 1, got {args.num_iterations}")
    if args.sft_episodes is not None and args.sft_episodes < 1:
        parser.error(f"--sft-episodes must be at least 1, got {args.sft_episodes}")
    if args.max_turns is not None and args.max_turns < 1:
        parser.error(f"--max-turns must be at least 1, got {args.max_turns}")
    if args.history_turns < 1:
        parser.error(f"--history-turns must be at least 1, got {args.history_turns}")
    if args.jobs < 1:
        parser.error(f"--jobs must be at least 1, got {args.jobs}")
    sizes = {**{"num_generations": Scale.num_generations, "tasks_per_update": Scale.tasks_per_update},
             **group_sizes(args)}
    if sizes["num_generations"] < 2 or sizes["tasks_per_update"] < 1:
        parser.error("--num-generations must be at least 2 (a group compares its rollouts) and --tasks-per-update at "
                     f"least 1, got {sizes['num_generations']} and {sizes['tasks_per_update']}")
    if (sizes["num_generations"] * sizes["tasks_per_update"]) % Scale.micro_batch:
        parser.error(f"an update's episodes ({sizes['tasks_per_update']} tasks x {sizes['num_generations']}) must be a "
                     f"multiple of the micro-batch of {Scale.micro_batch}")
    if not args.learning_rate > 0:
        parser.error(f"--learning-rate must be positive, got {args.learning_rate}")
    if args.advantage_estimator and not args.table:
        from trl_starpo.config import ADVANTAGE_ESTIMATORS

        if args.advantage_estimator not in ADVANTAGE_ESTIMATORS:
            parser.error(f"--advantage-estimator must be one of {', '.join(ADVANTAGE_ESTIMATORS)}, got "
                         f"{args.advantage_estimator!r}")
    if args.threads:
        import torch

        torch.set_num_threads(args.threads)
    records = args.records or (args.workdir / "smoke" / "records" if args.smoke else RECORDS)
    if args.held_out_split and not args.table and records.resolve() == RECORDS:
        parser.error("--held-out-split needs its own --records folder: the main table's records are test-split "
                     "figures (e.g. --records benchmarks/learning_runs/validation)")
    if (args.max_turns or args.context_policy) and not args.table and records.resolve() == RECORDS:
        parser.error("--max-turns and --context-policy make another setting than the main table's: give it its own "
                     "--records folder (e.g. --records benchmarks/learning_runs/ablations/alfworld-50-window)")
    other_sizes = any(value != getattr(Scale, name) for name, value in group_sizes(args).items())
    if other_sizes and not args.table and records.resolve() == RECORDS:
        parser.error("--num-generations and --tasks-per-update make another setting than the main table's: give it "
                     "its own --records folder (e.g. --records benchmarks/learning_runs/validation/alfworld-groups-8)")
    if (args.no_thinking_critic or args.answer_only) and not args.table and records.resolve() == RECORDS:
        parser.error("--no-thinking-critic and --answer-only are ablations of the main table's setting: give them their "
                     "own --records folder (e.g. --records benchmarks/learning_runs/ablations/thinking-no-critic)")
    if args.checkpoint:
        if args.table or args.compare:
            parser.error("--checkpoint evaluates a checkpoint; --table and --compare only read records")
        if len(args.env) != 1 or len(args.method) != 1 or len(args.seed) != 1 or "all" in args.env + args.method:
            parser.error("--checkpoint evaluates one run's checkpoint: give one --env, one --method and one --seed")
        if records.resolve() == RECORDS:
            parser.error("--checkpoint records a point on a run's way, not its end: give it its own --records folder "
                         "(e.g. --records benchmarks/learning_runs/validation/alfworld-budget-update36)")
        if not args.checkpoint.is_dir():
            parser.error(f"no checkpoint folder {args.checkpoint}")
    if args.compare:
        if len(args.env) != 1 or len(args.method) != 1 or "all" in args.env + args.method:
            parser.error("--compare compares one method on one column: give one --env and one --method")
        if args.env[0] not in COLUMNS or args.method[0] not in METHODS:
            parser.error(f"--compare needs a column of {', '.join(COLUMNS)} and a method of {', '.join(METHODS)}")
        missing = [str(folder) for folder in args.compare if not folder.is_dir()]
        if missing:
            parser.error(f"no records folder {', '.join(missing)}")
        print(comparison(args.compare, args.env[0], args.method[0]))
        return
    if args.table:
        # another folder's records are printed with their curves, not written into results.md
        print(regenerate(records) if records.resolve() == RECORDS else folder_table(records))
        return
    environments = list(COLUMNS) if args.env == ["all"] else args.env
    methods = list(METHODS) if args.method == ["all"] else args.method
    if args.context_policy == "window" and "dpo" in methods:
        if args.method == ["all"]:
            methods.remove("dpo")  # trajectory DPO pairs whole episodes: no row under a window
        else:
            parser.error("--context-policy window has no dpo row: trajectory DPO pairs whole episodes")
    for name in environments:
        if name not in COLUMNS:
            parser.error(f"unknown environment {name!r}; choose from {', '.join(COLUMNS)}")
    for name in methods:
        if name not in METHODS:
            parser.error(f"unknown method {name!r}; choose from {', '.join(METHODS)}")
    if args.no_thinking_critic or args.answer_only:
        if args.no_thinking_critic and args.answer_only:
            parser.error("--answer-only has no thinking for a critic to score: give one of the two ablations")
        if args.thinking_scale_rule:
            parser.error("--thinking-scale-rule sets how the thinking critic scales advantages: it has no critic to "
                         "set under --no-thinking-critic or --answer-only")
        for name in environments:
            if not thinks(COLUMNS[name].rollout):
                parser.error(f"{name}'s turns answer without thinking already: --no-thinking-critic and --answer-only "
                             "are ablations of a column that thinks (alfworld, minigrid)")
    if args.dpo_pairs != "best_worst" and methods != ["dpo"]:
        parser.error("--dpo-pairs sets how the dpo row pairs episodes: run it with --method dpo alone")
    runs = [(e, m, s) for e in environments for s in args.seed for m in methods]
    if len(runs) == 1:
        environment, method, seed = runs[0]
        column = COLUMNS[environment]
        chosen = dict(num_iterations=args.num_iterations, thinking_scale_rule=args.thinking_scale_rule,
                      advantage_estimator=args.advantage_estimator, learning_rate=args.learning_rate,
                      dpo_pairs=args.dpo_pairs, thinking_critic=False if args.no_thinking_critic else None,
                      **group_sizes(args))
        scale = dataclasses.replace(Scale(), eval_episodes=args.eval_episodes, **chosen)
        if args.smoke:
            column = dataclasses.replace(column, budget=8, sft_episodes=4, sft_epochs=1)
            scale = dataclasses.replace(SMOKE, **chosen)
        if args.budget:
            column = dataclasses.replace(column, budget=args.budget)
        if args.sft_episodes:
            column = dataclasses.replace(column, sft_episodes=args.sft_episodes)
        if args.held_out_split:
            column = dataclasses.replace(column, held_out=args.held_out_split)
        column = with_horizon(column, args.max_turns, args.context_policy, args.history_turns)
        if args.answer_only:
            column = dataclasses.replace(column, rollout={**column.rollout, "enable_thinking": False})
        if column.warm_start_adapter and not shipped_adapter_fits(environment, column, args.model):
            print(f"[{environment}] the shipped warm start ({column.warm_start_adapter}) was trained for the column's "
                  "own model, prompt and demonstrations: this setting builds its own", flush=True)
            column = dataclasses.replace(column, warm_start_adapter=None)
        workdir = args.workdir / "smoke" if args.smoke else args.workdir
        record = run_one(method, environment, seed, scale=scale, model=args.model, workdir=workdir, records=records,
                         column=column, rerun=args.rerun, checkpoint=args.checkpoint)
        print(f"{environment} {method} seed {seed}: {record['updates']} updates, {record['turns']} turns, held-out "
              f"{record['held_out']['successes']}/{record['held_out']['episodes']}", flush=True)
        return
    # One process per run: a run that fails or runs out of memory costs only itself, and frees all it held.
    forwarded = ["--workdir", str(args.workdir), "--records", str(records)]
    # side by side, the runs share the cores instead of each spinning as many threads as there are cores
    side_by_side = min(args.jobs, len(runs))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    threads = args.threads or (max(1, cores // side_by_side) if side_by_side > 1 else None)
    for flag, value in (("--budget", args.budget), ("--sft-episodes", args.sft_episodes), ("--model", args.model),
                        ("--held-out-split", args.held_out_split), ("--threads", threads),
                        ("--max-turns", args.max_turns), ("--context-policy", args.context_policy),
                        ("--history-turns", args.history_turns if args.context_policy == "window" else None)):
        forwarded += [flag, str(value)] if value else []
    forwarded += ["--num-iterations", str(args.num_iterations), "--learning-rate", str(args.learning_rate)]
    for name, value in group_sizes(args).items():
        forwarded += [f"--{name.replace('_', '-')}", str(value)]
    forwarded += ["--thinking-scale-rule", args.thinking_scale_rule] if args.thinking_scale_rule else []
    forwarded += ["--advantage-estimator", args.advantage_estimator] if args.advantage_estimator else []
    forwarded += ["--dpo-pairs", args.dpo_pairs]
    forwarded += ["--no-thinking-critic"] * args.no_thinking_critic + ["--answer-only"] * args.answer_only
    forwarded += ["--smoke"] if args.smoke else ["--eval-episodes", str(args.eval_episodes)]
    forwarded += ["--rerun"] if args.rerun else []
    commands = {f"{environment}/{method}/seed {seed}": [sys.executable, str(ENTRY), "--env", environment, "--method",
                                                        method, "--seed", str(seed), *forwarded]
                for environment, method, seed in runs}
    failed = run_processes(commands, args.jobs, (args.workdir / "smoke" if args.smoke else args.workdir) / "logs")
    if args.smoke:
        print(markdown(load_records(records)))
    if failed:
        sys.exit(f"Failed runs (rerun them to resume): {'; '.join(failed)}")


def with_horizon(column, max_turns: int | None, context_policy: str | None, history_turns: int):
    """``column`` with episodes of ``max_turns`` turns (and as many actions) and the given context policy.

    Under ``full`` the context limit grows with the horizon, so that a long episode is cut by its turns, as under
    ``window``, and not by the column's context limit.
    """
    rollout = dict(column.rollout)
    if max_turns:
        if context_policy != "window" and max_turns > rollout["max_turns"]:
            rollout["max_context_length"] = -(-rollout["max_context_length"] * max_turns // rollout["max_turns"])
        rollout.update(max_turns=max_turns, max_actions_per_trajectory=max_turns * rollout["max_actions_per_turn"])
    if context_policy == "window":
        rollout.update(context_policy="window", history_turns=history_turns)
    elif context_policy == "full":
        rollout.pop("context_policy", None)  # the default: the column's key stays its own
    return dataclasses.replace(column, rollout=rollout)
