"""Sampled trajectories as one self-contained HTML page, to read what an agent saw, thought and did.

Each trajectory is a card: its task, outcome and return, then every turn with the observation, the thinking and
the actions in distinct styles, and the turn's reward. All text is escaped: model output is shown, never run.
"""

from __future__ import annotations

import html
import random
from collections.abc import Sequence
from pathlib import Path

from .trajectory import Trajectory

CSS = """
body { font-family: system-ui, sans-serif; margin: 24px; background: #f6f7f9; color: #1d1f23; }
h1 { font-size: 22px; } .summary { color: #555; margin-bottom: 16px; }
.trajectory { background: #fff; border: 1px solid #d8dbe0; border-radius: 8px; margin: 16px 0; padding: 12px 16px; }
.trajectory.success { border-left: 6px solid #2e9d57; } .trajectory.failure { border-left: 6px solid #c9383a; }
.header { display: flex; gap: 12px; align-items: baseline; flex-wrap: wrap; }
.badge { border-radius: 10px; padding: 1px 8px; font-size: 12px; font-weight: 600; }
.badge.success { background: #daf2e3; color: #1c6b3b; } .badge.failure { background: #f8dcdc; color: #8e2224; }
.turn { border-top: 1px dashed #d8dbe0; margin-top: 10px; padding-top: 8px; }
.turn-title { font-size: 12px; color: #777; text-transform: uppercase; letter-spacing: .04em; }
.observation { font-family: ui-monospace, monospace; white-space: pre-wrap; background: #eef1f5; padding: 6px 8px;
  border-radius: 4px; margin: 4px 0; }
.thinking { font-style: italic; color: #6b3fa0; white-space: pre-wrap; margin: 4px 0; }
.action { font-weight: 700; color: #1c6b3b; font-family: ui-monospace, monospace; margin: 4px 0; }
.malformed { color: #8e2224; font-family: ui-monospace, monospace; white-space: pre-wrap; margin: 4px 0; }
.reward { font-size: 13px; color: #8a5a00; } .reward.positive { color: #1c6b3b; } .reward.negative { color: #8e2224; }
.label { font-size: 11px; color: #888; margin-right: 6px; font-style: normal; font-weight: 400; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _reward_class(reward: float) -> str:
    return "positive" if reward > 0 else "negative" if reward < 0 else ""


def trajectory_html(trajectory: Trajectory, *, environment: str | None = None, step: int | None = None) -> str:
    """One trajectory as an HTML ``<section>``."""
    outcome = "success" if trajectory.success else "failure"
    ended = trajectory.truncation or ("terminated" if trajectory.terminated else "")
    details = [f"task <b>{_e(trajectory.task_id)}</b>", f"group {trajectory.group}"]
    if environment:
        details.insert(0, _e(environment))
    if step is not None:
        details.append(f"step {step}")
    parts = [
        f'<section class="trajectory {outcome}">',
        '<div class="header">',
        f'<span class="badge {outcome}">{outcome}</span>',
        f"<span>{' · '.join(details)}</span>",
        f'<span class="reward {_reward_class(trajectory.episode_return)}">'
        f"return {trajectory.episode_return:+.3f}</span>",
        f"<span>{len(trajectory.turns)} turns{f', ended: {_e(ended)}' if ended else ''}</span>",
        "</div>",
    ]
    if trajectory.env_error:
        parts.append(
            f'<div class="malformed"><span class="label">environment error</span>{_e(trajectory.env_error)}</div>'
        )
    for index, turn in enumerate(trajectory.turns):
        parts.append('<div class="turn">')
        parts.append(f'<div class="turn-title">turn {index + 1}</div>')
        parts.append(f'<div class="observation">{_e(turn.observation)}</div>')
        if turn.thinking is not None:
            parts.append(f'<div class="thinking"><span class="label">thinking</span>{_e(turn.thinking.strip())}</div>')
        if turn.format_ok:
            actions = " ‖ ".join(_e(a) for a in turn.actions) or "(no action)"
            parts.append(f'<div class="action"><span class="label">action</span>{actions}</div>')
        else:
            parts.append(
                f'<div class="malformed"><span class="label">malformed ({_e(turn.format_error)})</span>'
                f"{_e(turn.response)}</div>"
            )
        parts.append(f'<div class="reward {_reward_class(turn.reward)}">reward {turn.reward:+.3f}</div>')
        parts.append("</div>")
    parts.append("</section>")
    return "\n".join(parts)


def trajectories_html(
    trajectories: Sequence[Trajectory],
    *,
    title: str = "StarPO trajectories",
    environments: Sequence[str | None] | None = None,
    steps: Sequence[int | None] | None = None,
) -> str:
    """A complete HTML page showing ``trajectories`` (optionally labelled with their environment and step)."""
    n = len(trajectories)
    environments = environments or [None] * n
    steps = steps or [None] * n
    successes = sum(t.success for t in trajectories)
    mean_return = sum(t.episode_return for t in trajectories) / n if n else 0.0
    cards = "\n".join(
        trajectory_html(t, environment=env, step=step) for t, env, step in zip(trajectories, environments, steps)
    )
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        f"<title>{_e(title)}</title><style>{CSS}</style></head><body>\n"
        f"<h1>{_e(title)}</h1>\n"
        f'<div class="summary">{n} trajectories · success {successes}/{n} · mean return {mean_return:+.3f}</div>\n'
        f"{cards}\n</body></html>\n"
    )


def write_html(
    trajectories: Sequence[Trajectory],
    path: str | Path,
    *,
    sample: int | None = None,
    seed: int = 0,
    title: str = "StarPO trajectories",
    environments: Sequence[str | None] | None = None,
    steps: Sequence[int | None] | None = None,
) -> Path:
    """Write an HTML page of ``trajectories`` (a seeded random sample of ``sample`` of them, in order) to ``path``."""
    keep = list(range(len(trajectories)))
    if sample is not None and sample < len(keep):
        keep = sorted(random.Random(seed).sample(keep, sample))
    page = trajectories_html(
        [trajectories[i] for i in keep],
        title=title,
        environments=[environments[i] for i in keep] if environments else None,
        steps=[steps[i] for i in keep] if steps else None,
    )
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(page, encoding="utf-8")
    return path


def write_store_html(store, path: str | Path, **kwargs) -> Path:
    """``write_html`` for a ``TrajectoryStore``, labelling each trajectory with its environment and step."""
    table = store.table()
    return write_html(
        store.trajectories(),
        path,
        environments=table.column("environment").to_pylist(),
        steps=table.column("step").to_pylist(),
        **kwargs,
    )
