"""A counter environment registered through a real entry point, for tests of the CLI and the evaluation baselines.

``install_counter_env(folder)`` writes a module and a ``.dist-info`` folder declaring the entry point
``trl_starpo.environments: testcounter`` (and ``testplain``, the same without the optional baseline methods); putting ``folder`` on ``sys.path`` (or ``PYTHONPATH`` for a subprocess)
makes ``trl_starpo.load_environment("testcounter")`` and ``trl-starpo eval --env testcounter`` find it.
"""

from __future__ import annotations

import textwrap
from pathlib import Path

NAME = "testcounter"

MODULE = textwrap.dedent(
    '''
    """Counter environment: reach the target by "inc" / "dec"; has admissible_actions(), expert_action() and
    expert_thinking()."""
    import json
    from pathlib import Path

    from trl_starpo.envs import TextEnvironment, load_task_dataset

    DATA_DIR = Path(__file__).with_name("starpo_testcounter_data")


    class CounterEnv(TextEnvironment):
        system_prompt = "Reach the target number."
        action_description = "inc, dec"

        def __init__(self, expert_gives_up=False):
            self.expert_gives_up = expert_gives_up

        def reset(self, *, seed=None, options=None):
            task = (options or {}).get("task", {})
            self.value, self.target = int(task.get("start", 0)), int(task.get("target", 2))
            return self._observation(), {}

        def _observation(self):
            return f"The counter is at {self.value}."

        def admissible_actions(self):
            return ["inc", "dec"]

        def expert_action(self):
            if self.expert_gives_up:
                return None
            return "inc" if self.value < self.target else "dec"

        def expert_thinking(self):
            return f"At {self.value}, target {self.target}."

        def step(self, action):
            action = action.strip().lower()
            if action not in ("inc", "dec"):
                return "Invalid action. " + self._observation(), 0.0, False, False, self.step_info(
                    valid=False, effective=False, success=False)
            self.value += 1 if action == "inc" else -1
            success = self.value == self.target
            return self._observation(), 1.0 if success else 0.0, success, False, self.step_info(
                valid=True, effective=True, success=success)


    def load_environment(**kwargs):
        return CounterEnv(**kwargs)


    def load_tasks(split=None, source=None):
        return load_task_dataset(DATA_DIR, split, source)
    '''
)


PLAIN_NAME = "testplain"

PLAIN_MODULE = textwrap.dedent(
    '''
    """The counter environment without the optional admissible_actions() / expert_action() methods."""
    from starpo_testcounter import CounterEnv, load_tasks


    class PlainCounterEnv(CounterEnv):
        admissible_actions = None
        expert_action = None
        expert_thinking = None


    def load_environment(**kwargs):
        return PlainCounterEnv(**kwargs)
    '''
)


def task_rows(split: str, n: int) -> list[dict]:
    first = {"train": 0, "validation": 1000, "test": 2000}[split]
    return [{"task_id": f"{split}-{i}", "seed": first + i, "start": 0, "target": 1 + i % 3} for i in range(n)]


def install_counter_env(folder: Path) -> Path:
    """Write the ``testcounter`` environment package into ``folder`` and return ``folder``."""
    from trl_starpo.envs import write_task_split

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "starpo_testcounter.py").write_text(MODULE)
    (folder / "starpo_testplain.py").write_text(PLAIN_MODULE)
    for split, n in (("train", 8), ("validation", 6), ("test", 6)):
        write_task_split(folder / "starpo_testcounter_data", split, task_rows(split, n))
    declare_environments(folder, "starpo-testcounter", {NAME: "starpo_testcounter", PLAIN_NAME: "starpo_testplain"})
    return folder


def declare_environments(folder: Path, distribution: str, environments: dict[str, str]) -> None:
    """Write a ``.dist-info`` folder into ``folder`` registering each ``{name: module}`` as an environment."""
    info = folder / f"{distribution.replace('-', '_')}-0.0.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {distribution}\nVersion: 0.0\n")
    lines = "".join(f"{name} = {module}\n" for name, module in environments.items())
    (info / "entry_points.txt").write_text(f"[trl_starpo.environments]\n{lines}")


def register(folder: Path):
    """Put ``folder`` on ``sys.path`` and refresh the environment registry; returns an undo function."""
    import sys

    from trl_starpo.envs import registry

    sys.path.insert(0, str(folder))
    registry._entry_points.cache_clear()

    def undo():
        sys.path.remove(str(folder))
        sys.modules.pop("starpo_testcounter", None)
        sys.modules.pop("starpo_testplain", None)
        registry._entry_points.cache_clear()

    return undo
