"""Every command of docs/cli.md runs, in the order a reader would run them: the tiny agent stands in for SmolLM2
(and what the training example makes stands in for a trained agent), the Hub is faked at its HTTP layer, and the
person who plays types one turn and quits."""

import io
import re
import shlex
from pathlib import Path

import pytest
from mock_hub import fake_hub

from trl_starpo.cli import main

ROOT = Path(__file__).parents[1]
SMALL_MODEL = "HuggingFaceTB/SmolLM2-135M-Instruct"
# Only for time: two training steps instead of eight, saved every step instead of every 4. The tiny agent's Sokoban
# rollouts all earn the same return, and a run that changes nothing saves no agent: a small entropy bonus gives its
# two updates a gradient, so the commands after it have an agent to play.
FASTER = {"--max_steps 8": "--max_steps 2 --entropy_coef 0.01", "--save_steps 4": "--save_steps 1",
          "checkpoint-4": "checkpoint-1"}


def documented_commands() -> list[str]:
    text = (ROOT / "docs" / "cli.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for line in block.replace("\\\n", " ").splitlines():
            if line.strip().startswith("trl-starpo "):
                commands.append(" ".join(shlex.split(line, comments=True)))
    return commands


def test_the_docs_list_every_command():
    commands = documented_commands()
    assert {c.split()[1] for c in commands} == {"eval", "play", "train", "push", "push-tasks", "plot", "html", "envs"}


@pytest.mark.slow
def test_every_documented_command_runs(monkeypatch, tmp_path, tiny_agent_dir, capsys):
    monkeypatch.chdir(tmp_path)
    commands = documented_commands()
    train = [c for c in commands if c.startswith("trl-starpo train")]
    for command in train + [c for c in commands if c not in train]:  # training makes the agent the others use
        for old, new in {**FASTER, SMALL_MODEL: tiny_agent_dir, "recipes/": f"{ROOT}/recipes/"}.items():
            command = command.replace(old, new)
        argv = shlex.split(command)[1:]
        human = argv[0] == "play" and "--model" not in argv
        monkeypatch.setattr("sys.stdin", io.StringIO("Up || Left\nquit\n"))
        with fake_hub(monkeypatch) as hub:
            code = main(argv)
        out, err = capsys.readouterr()
        assert code == (1 if human else 0), f"{command}\n{err[-2000:]}"
        if argv[0].startswith("push") and "--dry_run" not in argv:
            assert hub.commits, command
        elif argv[0] == "push":  # the preview is written, nothing is sent
            assert not hub.commits and (tmp_path / "preview" / "me--sokoban-agent" / "README.md").is_file()
    assert (tmp_path / "outputs" / "sokoban-starpo" / "learning_curves.png").is_file()
    assert (tmp_path / "page.html").is_file()
