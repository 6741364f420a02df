"""The ``trl-starpo`` command line.

    trl-starpo envs                                   installed environments and their task counts
    trl-starpo eval --env NAME --policy random        a success table (model, random or expert policy)
    trl-starpo play --env NAME [--model M]            a person (or a model) plays one episode in the terminal
    trl-starpo train --env NAME --model M             the recipe of recipes/<env>.py, any StarPOConfig flag
    trl-starpo push CHECKPOINT --repo_id USER/NAME    an agent and its trajectories to the Hub
    trl-starpo push-tasks --env NAME --repo_id U/N    an environment's task splits to the Hub
    trl-starpo plot RUN                               learning curves of a logged run as a PNG
    trl-starpo html TRAJECTORIES                      sampled trajectories as an HTML page

Heavy modules (torch, transformers) are imported by the commands that need them, so ``envs`` and the baselines
start fast. Errors a user can fix (an unknown environment, split, model or policy) print one line and exit with 2.
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
from pathlib import Path

import yaml

EXIT_USAGE = 2


class CommandError(Exception):
    """A mistake in the command's arguments or inputs, reported in one line."""


# ------------------------------------------------------------------------------------------------------ envs


def _envs(_: argparse.Namespace) -> int:
    from .envs import list_environments, load_tasks
    from .envs.registry import task_split_sizes

    for name in list_environments():
        try:
            # Counted in the package's data files, without importing it; a package that keeps its tasks elsewhere
            # is asked for them.
            sizes = task_split_sizes(name) or {split: len(ds) for split, ds in load_tasks(name).items()}
            counts = ", ".join(f"{split}={size}" for split, size in sizes.items())
        except Exception as error:  # one broken package must not hide the others
            counts = f"(tasks unavailable: {type(error).__name__}: {str(error).splitlines()[0][:100]})"
        print(f"{name:<12} {counts}")
    return 0


# ------------------------------------------------------------------------------------------------------ eval

TABLE_COLUMNS = (
    ("environment", "environment", "{}"),
    ("split", "split", "{}"),
    ("policy", "policy", "{}"),
    ("episodes", "episodes", "{}"),
    ("success", "success", "{:.3f}"),
    ("95% interval", ("success_low", "success_high"), "{:.3f}–{:.3f}"),
    ("return", "return", "{:.3f}"),
    ("turns", "turns", "{:.2f}"),
    ("valid actions", "action_validity", "{:.3f}"),
    ("format errors", "format_error_rate", "{:.3f}"),
    ("env errors", "env_errors", "{}"),
)


def _cell(row: dict, keys: str | tuple[str, ...], fmt: str) -> str:
    values = [row.get(key) for key in ((keys,) if isinstance(keys, str) else keys)]
    return "-" if any(value is None for value in values) else fmt.format(*values)


def format_table(rows: list[dict]) -> str:
    """A Markdown table of evaluation summaries (``EvaluationResult.to_dict()`` rows), the success rate with its
    95% Wilson interval."""
    header = "| " + " | ".join(title for title, _, _ in TABLE_COLUMNS) + " |"
    rule = "|" + "|".join("---" for _ in TABLE_COLUMNS) + "|"
    lines = [header, rule]
    for row in rows:
        lines.append("| " + " | ".join(_cell(row, keys, fmt) for _, keys, fmt in TABLE_COLUMNS) + " |")
    models = sorted({row["model"] for row in rows if row.get("model")})
    if models:
        lines.append("")
        lines.extend(f"model: {model}" for model in models)
    return "\n".join(lines)


def _settings(args: argparse.Namespace, model_path: str | None):
    from .rollout.settings import RolloutSettings

    settings = RolloutSettings.from_pretrained(model_path)
    return settings.updated(
        max_turns=args.max_turns,
        max_actions_per_turn=args.max_actions_per_turn,
        max_actions_per_trajectory=args.max_actions_per_trajectory,
        max_tokens_per_turn=args.max_tokens_per_turn,
        max_context_length=args.max_context_length,
    )


def _environment_kwargs(text: str | None) -> dict:
    if not text:
        return {}
    try:
        value = json.loads(text)
    except json.JSONDecodeError as error:
        raise CommandError(f"--env_kwargs must be a JSON object, e.g. '{{\"size\": 6}}': {error}") from None
    if not isinstance(value, dict):
        raise CommandError("--env_kwargs must be a JSON object, e.g. '{\"size\": 6}'.")
    return value


def _load_split(environment: str, split: str, source: str | None):
    from .envs import load_tasks

    try:
        return load_tasks(environment, split=split, source=source)
    except ValueError:
        raise
    except (FileNotFoundError, KeyError) as error:
        raise CommandError(f"Environment {environment!r} has no {split!r} split: {error}") from None


def _eval(args: argparse.Namespace) -> int:
    from .evaluation import POLICIES, evaluate, make_policy
    from .json_files import json_text

    environments = [name for value in args.env for name in value.split(",") if name]
    for name in environments:
        _check_environment_name(name)
    policies = [p for value in args.policy for p in value.split(",") if p]
    for policy in policies:
        if policy not in POLICIES:
            raise CommandError(f"Unknown policy {policy!r};{_did_you_mean(policy, POLICIES)} choose among "
                               f"{', '.join(POLICIES)}.")
    if "model" in policies and not args.model:
        raise CommandError("--policy model needs --model (a local folder or a Hub id).")
    _check_sampling(args)
    if args.save_trajectories:
        _check_writable_folder(Path(args.save_trajectories), "--save_trajectories")
    env_kwargs = _environment_kwargs(args.env_kwargs)
    splits = {name: _load_split(name, args.split, args.tasks) for name in environments}
    model_path = None
    if "model" in policies:
        from .models import resolve_model_path

        model_path = resolve_model_path(args.model)
    settings = _settings(args, model_path)  # refuses impossible episode limits before a model loads
    scripted = [make_policy(name) for name in policies if name != "model"]
    for name in environments:
        _check_environment(name, env_kwargs, scripted)
    results = []
    for policy_name in policies:
        policy = make_policy(
            policy_name,
            model=args.model,
            settings=settings,
            seed=args.seed,
            temperature=args.temperature,
            top_p=args.top_p,
            batch_size=args.batch_size,
            device=args.device,
            dtype=args.dtype,
            bf16=args.bf16,
        )
        for name in environments:
            result = evaluate(
                policy,
                name,
                splits[name],
                args.episodes,
                environment_kwargs=env_kwargs,
                split=args.split,
                model_name=args.model if policy_name == "model" else None,
                progress=not args.json and not args.no_progress,
            )
            results.append(result)
            if args.save_trajectories:
                _save_eval_trajectories(result, Path(args.save_trajectories))
    rows = [result.to_dict() for result in results]
    print(json_text(rows if len(rows) > 1 else rows[0], indent=2) if args.json else format_table(rows))
    return _report_environment_errors(results)


def _check_environment(name: str, env_kwargs: dict, scripted=(), flag: str = "--env_kwargs") -> None:
    """Build one ``name`` environment before anything is played: refuse keyword arguments it rejects, and a
    baseline policy it cannot support."""
    from .envs import load_environment

    try:
        env = load_environment(name, **env_kwargs)
    except Exception as error:  # the environment's own code: whatever it raises is the user's input to fix
        given = f" with {flag} {json.dumps(env_kwargs)}" if env_kwargs else ""
        raise CommandError(f"Environment {name!r} cannot be built{given}: {_one_line(error)}") from None
    try:
        for policy in scripted:
            policy.check(env)
    finally:
        env.close()


def _one_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0] if text else ''}".rstrip(": ")


def _report_environment_errors(results) -> int:
    """Warn about episodes whose environment failed (one line per evaluation); 1 when one had no other episode."""
    code = 0
    for result in results:
        if not result.env_errors:
            continue
        failed_all = result.env_errors == result.episodes
        kind = "error" if failed_all else "warning"
        print(f"trl-starpo eval: {kind}: {result.environment} ({result.policy}): {result.env_errors} of "
              f"{result.episodes} episodes failed in the environment, e.g. {result.first_env_error}",
              file=sys.stderr)
        code = code or int(failed_all)
    return code


def _save_eval_trajectories(result, folder: Path) -> None:
    from .store import TrajectoryStore

    store = TrajectoryStore(capacity=max(len(result.trajectories), 1))
    store.add(result.trajectories, step=0, environment=result.environment)
    store.save(folder / f"{result.environment}-{result.split}-{result.policy}")


# ------------------------------------------------------------------------------------------------------ play


def _play(args: argparse.Namespace) -> int:
    from .play import play_human, play_model

    tasks = _load_split(args.env, args.split, args.tasks)
    if not 0 <= args.task < len(tasks):
        raise CommandError(f"--task must be between 0 and {len(tasks) - 1} for the {args.split} split.")
    task = dict(tasks[args.task])
    env_kwargs = _environment_kwargs(args.env_kwargs)
    _check_environment(args.env, env_kwargs)
    if args.model:
        from .evaluation import make_policy
        from .models import resolve_model_path

        _check_sampling(args)
        settings = _settings(args, resolve_model_path(args.model))
        policy = make_policy("model", model=args.model, settings=settings, seed=args.seed,
                             temperature=args.temperature, top_p=args.top_p, device=args.device, dtype=args.dtype,
                             bf16=args.bf16)
        trajectory = play_model(policy, args.env, task, environment_kwargs=env_kwargs)
    else:
        settings = _settings(args, None)
        trajectory = play_human(args.env, task, settings, environment_kwargs=env_kwargs)
    return 0 if trajectory is not None and trajectory.env_error is None else 1


# ----------------------------------------------------------------------------------------------------- train


def _train(args: argparse.Namespace, extra: list[str]) -> int:
    _check_environment_name(args.env)
    from .checkpoints import IncompleteCheckpointError
    from .nonfinite import NothingTrainedError
    from .recipes import parse_arguments, recipe_parser, train

    _check_flags(recipe_parser(), extra, "train")

    argv = list(extra)
    if args.config:
        if not Path(args.config).is_file():
            raise CommandError(f"--config: no file at {args.config}")
        argv = ["--config", args.config, *argv]
    if args.model:
        argv += ["--model_name_or_path", args.model]
    if args.preset:
        argv += ["--preset", args.preset]
    try:  # a configuration that cannot work is one line; errors of the run itself keep their tracebacks
        recipe, config, model_args = parse_arguments(argv)
    except ValueError as error:
        raise CommandError(str(error)) from None
    except yaml.YAMLError as error:  # a broken file, or a tag safe_load refuses (!!python/...)
        raise CommandError(f"--config {args.config}: not a plain YAML mapping: {_one_line(error)}") from None
    _check_inputs_before_training(args.env, recipe, config, model_args)
    _check_environment(args.env, config.environment_kwargs or {}, flag="--environment_kwargs")
    try:
        train(args.env, recipe, config, model_args)
    except (NothingTrainedError, IncompleteCheckpointError) as error:
        raise CommandError(str(error)) from None
    return 0


def _check_sampling(args: argparse.Namespace) -> None:
    """Refuse a temperature or top-p that sampling would not honour (NaN fails every comparison)."""
    if not 0 <= args.temperature < float("inf"):
        raise CommandError(f"--temperature must be a number >= 0 (0 decodes greedily), got {args.temperature}.")
    if not 0 < args.top_p <= 1:
        raise CommandError(f"--top-p must be in (0, 1], got {args.top_p}.")


def _check_writable_folder(folder: Path, flag: str) -> None:
    """Refuse a folder that cannot be made or written (checked on the nearest part of it that exists; nothing is
    created)."""
    path = folder.expanduser().absolute()
    existing = next(part for part in (path, *path.parents) if part.exists())
    if not existing.is_dir():
        raise CommandError(f"{flag} {folder}: {existing} is a file, not a folder")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise CommandError(f"{flag} {folder}: {existing} is not writable")


def _check_inputs_before_training(environment: str, recipe, config, model_args) -> None:
    """Refuse, before any model loads or folder is made, what would fail the run: a model that is not there, an
    output_dir that cannot be made or written, a task source that does not load."""
    from .envs import load_tasks
    from .models import resolve_model_path

    try:
        resolve_model_path(model_args.model_name_or_path)
    except (ValueError, OSError) as error:
        raise CommandError(f"--model_name_or_path: {str(error).strip().splitlines()[0]}") from None
    _check_writable_folder(Path(config.output_dir), "--output_dir")
    if recipe.tasks:
        try:
            load_tasks(environment, split="train", source=recipe.tasks)
        except (OSError, ValueError) as error:
            raise CommandError(f"--tasks {recipe.tasks}: {_one_line(error)}") from None


# ------------------------------------------------------------------------------------------------------ push


def _push(args: argparse.Namespace) -> int:
    from .hub import push_agent

    if args.dry_run:
        _check_writable_folder(Path(args.dry_run), "--dry-run")
    try:
        urls = push_agent(
            args.checkpoint,
            repo_id=args.repo_id,
            trajectories_repo_id=args.trajectories_repo_id,
            private=args.private,
            token=args.token,
            push_trajectories=not args.no_trajectories,
            commit_message=args.commit_message,
            dry_run=args.dry_run,
        )
    except OSError as error:  # the Hub's answers (HfHubHTTPError) and network failures
        raise CommandError(f"the Hub refused or could not be reached: {_one_line(error)}") from None
    for kind, url in urls.items():
        print(f"{kind}: {url}")
    return 0


def _push_tasks(args: argparse.Namespace) -> int:
    from .envs import list_environments
    from .hub import push_tasks

    if args.env not in list_environments():
        raise CommandError(
            f"Unknown environment {args.env!r}. Installed environments: {', '.join(list_environments()) or 'none'}."
        )
    print(push_tasks(args.env, args.repo_id, private=args.private, token=args.token,
                     commit_message=args.commit_message))
    return 0


# ------------------------------------------------------------------------------------------------------ plot


def _plot(args: argparse.Namespace) -> int:
    from .display.plotting import plot_run

    try:
        path = plot_run(args.run, args.output)
    except FileNotFoundError as error:
        raise CommandError(str(error)) from None
    print(path)
    return 0


def _html(args: argparse.Namespace) -> int:
    from .display.html_export import write_store_html
    from .store import TrajectoryStore

    try:
        store = TrajectoryStore.load(args.trajectories)
    except (FileNotFoundError, ValueError) as error:  # no store, or a damaged one
        raise CommandError(str(error)) from None
    path = write_store_html(store, args.output, sample=args.sample, seed=args.seed, title=args.title,
                            tokenizer=_store_tokenizer(args.trajectories, args.tokenizer))
    print(path)
    return 0


def _store_tokenizer(store_folder: str, tokenizer: str | None):
    """The tokenizer named by --tokenizer, else the one saved beside the store (an output_dir or checkpoint holding
    ``trajectories/``), else ``None``: the page then shows no prompts or tokens."""
    from transformers import AutoTokenizer

    folder = Path(store_folder).resolve().parent
    if tokenizer is None and not (folder / "tokenizer_config.json").is_file():
        return None
    try:
        return AutoTokenizer.from_pretrained(tokenizer or str(folder))
    except (OSError, ValueError) as error:
        raise CommandError(f"Cannot load the tokenizer {tokenizer or str(folder)!r}: {error}") from None


# ------------------------------------------------------------------------------------------------------ main


def _did_you_mean(word: str, choices) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" did you mean {close[0]!r}?" if close else ""


def _check_environment_name(name: str) -> None:
    from .envs import list_environments
    from .envs.registry import unknown_environment

    if name not in list_environments():
        raise CommandError(str(unknown_environment(name)))


def _flag_key(flag: str) -> str:
    """A flag's name, spelling aside: ``--max-turns=3`` and ``--max_turns`` are both ``max_turns``."""
    return flag.split("=", 1)[0].lstrip("-").replace("-", "_")


def _canonical_flags(parser: argparse.ArgumentParser, argv: list[str]) -> list[str]:
    """``argv`` with every ``--flag`` spelled as ``parser`` defines it, so that ``--max_turns`` and ``--max-turns``
    are the same flag in every subcommand."""
    spelled = {_flag_key(option): option for action in parser._actions for option in action.option_strings}
    canonical = []
    for word in argv:
        if word == "--":
            return canonical + argv[len(canonical):]
        if word.startswith("--") and _flag_key(word) in spelled:
            name, sep, value = word.partition("=")
            word = spelled[_flag_key(name)] + sep + value
        canonical.append(word)
    return canonical


def _check_flags(parser: argparse.ArgumentParser, argv: list[str], command: str) -> None:
    """Refuse a flag ``parser`` does not know, naming the closest one it does."""
    known = {_flag_key(option) for action in parser._actions for option in action.option_strings}
    for word in argv:
        if word.startswith("--") and _flag_key(word) not in known:
            close = difflib.get_close_matches(_flag_key(word), sorted(known), n=1)
            hint = f"; did you mean --{close[0]}?" if close else f"; see trl-starpo {command} --help"
            raise CommandError(f"unrecognized argument {word.split('=', 1)[0]}{hint}")


class _HelpFormatter(argparse.HelpFormatter):
    """Shows flags in one spelling, with underscores as TRL's scripts write them (``--max_turns``); dashes work too."""

    def _format_action_invocation(self, action):
        text = super()._format_action_invocation(action)
        return re.sub(r"--[\w-]+", lambda match: "--" + match.group(0)[2:].replace("-", "_"), text)

    def _format_usage(self, *args, **kwargs):
        text = super()._format_usage(*args, **kwargs)
        return re.sub(r"--[\w-]+", lambda match: "--" + match.group(0)[2:].replace("-", "_"), text)


def _add_rollout_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("episode limits (default: the agent's starpo_agent.json, else StarPOConfig's)")
    group.add_argument("--max-turns", type=int)
    group.add_argument("--max-actions-per-turn", type=int)
    group.add_argument("--max-actions-per-trajectory", type=int, help="actions sent to the environment an episode")
    group.add_argument("--max-tokens-per-turn", type=int)
    group.add_argument("--max-context-length", type=int)


def _add_model_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("model policy")
    group.add_argument("--temperature", type=float, default=1.0, help="sampling temperature; 0 decodes greedily")
    group.add_argument("--top-p", type=float, default=1.0)
    group.add_argument("--device", help="cuda, cpu, ... (default: cuda when available)")
    group.add_argument("--dtype", choices=["auto", "float32", "bfloat16", "float16"])
    group.add_argument("--bf16", action=argparse.BooleanOptionalAction,
                       help="play under bf16 autocast, as a run trained with bf16 collects its rollouts (default: the "
                            "agent's training precision, from its starpo_agent.json, where the device computes bf16)")
    parser.add_argument("--seed", type=int, default=0, help="seeds sampling and the random policy")


class _TrainHelp(argparse.Action):
    """``train --help``: the command's own flags, then every field of the recipe's parser (``RecipeArguments``,
    ``StarPOConfig``, ``ModelConfig``), as TRL's scripts list their configs."""

    def __call__(self, parser, namespace, values, option_string=None):
        from .recipes import recipe_parser

        recipe = recipe_parser()
        recipe.prog = f"{parser.prog} [recipe fields]"
        print(parser.format_help())
        print(recipe.format_help())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    """The ``trl-starpo`` argument parser (``train`` passes unknown flags on to the recipe's parser)."""
    parser = argparse.ArgumentParser(prog="trl-starpo", description="StarPO multi-turn agent RL on top of TRL.",
                                     formatter_class=_HelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)

    commands.add_parser("envs", help="list installed environments and their task counts").set_defaults(func=_envs)

    ev = commands.add_parser("eval", help="success table of a model, random or expert policy",
                             description="Play evaluation episodes and print a success table.")
    ev.add_argument("--env", action="append", required=True,
                    help="environment name; repeat it or separate names with commas for several")
    ev.add_argument("--model", help="a local folder (full model or LoRA adapter) or a Hub id")
    ev.add_argument("--policy", action="append", default=None,
                    help="model, random or expert; repeat or separate with commas (default: model)")
    ev.add_argument("--split", default="validation", help="task split (default: %(default)s)")
    ev.add_argument("--episodes", type=int, default=None, help="episodes per environment (default: the whole split)")
    ev.add_argument("--tasks", help="a Hub dataset id or local folder of tasks instead of the environment's own")
    ev.add_argument("--env-kwargs", help="JSON object of keyword arguments for the environment")
    ev.add_argument("--batch-size", type=int, default=16, help="episodes generated together")
    ev.add_argument("--json", action="store_true", help="print JSON instead of a table")
    ev.add_argument("--no-progress", action="store_true", help="no progress bar")
    ev.add_argument("--save-trajectories", metavar="DIR", help="also save the episodes as trajectory datasets")
    _add_model_flags(ev)
    _add_rollout_flags(ev)
    ev.set_defaults(func=_eval)

    play = commands.add_parser("play", help="play one episode in the terminal (you, or a model with --model)")
    play.add_argument("--env", required=True)
    play.add_argument("--model", help="let this model play instead of you")
    play.add_argument("--split", default="validation")
    play.add_argument("--task", type=int, default=0, help="row of the split to play (default: %(default)s)")
    play.add_argument("--tasks", help="a Hub dataset id or local folder of tasks")
    play.add_argument("--env-kwargs", help="JSON object of keyword arguments for the environment")
    _add_model_flags(play)
    _add_rollout_flags(play)
    play.set_defaults(func=_play)

    train = commands.add_parser(
        "train", help="train with the recipe; any StarPOConfig / ModelConfig flag passes through",
        description="Train a StarPO agent. Flags not listed here go to the recipe (StarPOConfig, ModelConfig, "
        "--eval_episodes, --tasks, --save_trajectories, ...), as for recipes/<env>.py.",
        add_help=False,
    )
    train.add_argument("-h", "--help", action=_TrainHelp, nargs=0, help="show these flags and every recipe field")
    train.add_argument("--env", required=True)
    train.add_argument("--preset", help="a StarPOConfig preset (starpo, starpo-s, ...)")
    train.add_argument("--model", help="model id or folder (--model_name_or_path)")
    train.add_argument("--config", help="YAML file with the recipe's fields")
    train.set_defaults(func=_train, passthrough=True)

    push = commands.add_parser("push", help="push a local checkpoint (agent, card, trajectories) to the Hub")
    push.add_argument("checkpoint", help="an output_dir or checkpoint-N folder")
    push.add_argument("--repo-id", required=True, help="USER/NAME of the model repository")
    push.add_argument("--trajectories-repo-id", help="dataset repository (default: <repo-id>-trajectories)")
    push.add_argument("--no-trajectories", action="store_true", help="push the agent only")
    push.add_argument("--private", action="store_true")
    push.add_argument("--token", help="a Hub token (default: the logged-in one)")
    push.add_argument("--commit-message", default="Upload StarPO agent")
    push.add_argument("--dry-run", metavar="FOLDER",
                      help="send nothing: write each repository's card, generated files and file list under FOLDER")
    push.set_defaults(func=_push)

    tasks = commands.add_parser("push-tasks", help="push an environment's task splits to the Hub as a dataset",
                                description="Push every task split of an installed environment to a Hub dataset "
                                "repository, with a card that maps each split by its own name.")
    tasks.add_argument("--env", required=True, help="installed environment name")
    tasks.add_argument("--repo-id", required=True, help="USER/NAME of the dataset repository")
    tasks.add_argument("--private", action="store_true")
    tasks.add_argument("--token", help="a Hub token (default: the logged-in one)")
    tasks.add_argument("--commit-message", default="Upload StarPO environment tasks")
    tasks.set_defaults(func=_push_tasks)

    plot = commands.add_parser("plot", help="learning curves of a run (trainer_state.json) as a PNG")
    plot.add_argument("run", help="an output_dir, a checkpoint folder or a trainer_state.json file")
    plot.add_argument("--output", "-o", help="PNG path (default: <run>/learning_curves.png)")
    plot.set_defaults(func=_plot)

    html = commands.add_parser("html", help="sampled trajectories of a store as an HTML page")
    html.add_argument("trajectories", help="a saved trajectory store folder")
    html.add_argument("--output", "-o", default="trajectories.html")
    html.add_argument("--sample", type=int, default=16, help="trajectories to show (default: %(default)s)")
    html.add_argument("--seed", type=int, default=0)
    html.add_argument("--title", default="StarPO trajectories")
    html.add_argument("--tokenizer", help="model id or folder whose tokenizer shows prompts and tokens (default: the "
                                          "one saved beside the store, if any)")
    html.set_defaults(func=_html)
    for subcommand in commands.choices.values():
        subcommand.formatter_class = _HelpFormatter
        subcommand.allow_abbrev = False  # a mistyped flag is an error with a suggestion, not a silent prefix match
    parser.subcommands = commands.choices  # name -> subparser, for the flag spellings
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    argv = list(sys.argv[1:] if argv is None else argv)
    command = next((word for word in argv if not word.startswith("-")), None)
    if command in parser.subcommands:
        argv = _canonical_flags(parser.subcommands[command], argv)
    args, extra = parser.parse_known_args(argv)
    passthrough = getattr(args, "passthrough", False)
    if extra and not passthrough:
        subparser = parser.subcommands[args.command]
        try:
            _check_flags(subparser, extra, args.command)
        except CommandError as error:
            subparser.error(str(error))
        subparser.error(f"unrecognized arguments: {' '.join(extra)}")
    if args.command == "eval" and args.policy is None:
        args.policy = ["model"]
    # A training run keeps the tracebacks of its errors; the other commands report them in one line.
    caught = (CommandError,) if passthrough else (CommandError, ValueError)
    try:
        return args.func(args, extra) if passthrough else args.func(args)
    except caught as error:
        print(f"trl-starpo {args.command}: error: {error}", file=sys.stderr)
        return EXIT_USAGE


if __name__ == "__main__":
    sys.exit(main())
