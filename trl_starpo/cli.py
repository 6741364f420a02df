"""The ``trl-starpo`` command line."""

from __future__ import annotations

import argparse
import sys


def _envs(_: argparse.Namespace) -> int:
    from .envs import list_environments, load_tasks

    for name in list_environments():
        tasks = load_tasks(name)
        counts = ", ".join(f"{split}={len(ds)}" for split, ds in tasks.items())
        print(f"{name:<12} {counts}")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="trl-starpo", description="StarPO multi-turn agent RL on top of TRL.")
    commands = parser.add_subparsers(dest="command", required=True)
    commands.add_parser("envs", help="list installed environments and their task counts").set_defaults(func=_envs)
    args = parser.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
