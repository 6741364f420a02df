"""A progress bar over rollout collection: one tick per generated turn, with the number of episodes still playing.

``RolloutCollector.collect`` calls its generation backend once per turn; wrapping the backend is enough to follow a
collection without touching the collector or the trainer.
"""

from __future__ import annotations

import functools
from typing import Any


class ProgressGenerator:
    """Wraps a generation backend and advances a tqdm bar by one turn per ``generate`` call."""

    def __init__(self, generator: Any, bar: Any):
        self.generator = generator
        self.bar = bar

    def reset(self) -> None:
        self.generator.reset()

    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]:
        output = self.generator.generate(contexts, max_new_tokens)
        self.bar.set_postfix(playing=len(contexts), refresh=False)
        self.bar.update(1)
        return output

    def __getattr__(self, name: str) -> Any:
        return getattr(self.generator, name)


def show_rollout_progress(collector: Any, *, enabled: bool = True, description: str = "rollouts") -> Any:
    """Make ``collector.collect`` show a per-turn progress bar (on this process); returns the collector.

    Calling it again on the same collector does nothing more.
    """
    if not enabled or getattr(collector.collect, "_shows_progress", False):
        return collector
    from tqdm.auto import tqdm

    original = collector.collect

    @functools.wraps(original)
    def collect(environments, tasks, generator, groups=None):
        with tqdm(total=collector.max_turns, desc=f"{description} ({len(tasks)} episodes)", unit="turn",
                  leave=False, dynamic_ncols=True) as bar:
            return original(environments, tasks, ProgressGenerator(generator, bar), groups)

    collect._shows_progress = True
    collector.collect = collect
    return collector
