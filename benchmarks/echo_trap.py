"""The Echo Trap on a CPU: how often does StarPO collapse, and what do the StarPO-S presets buy?

RAGEN (arXiv:2504.20073) reports that vanilla StarPO's success climbs and then collapses (the Echo Trap) in about
30% of runs, and that StarPO-S makes collapse rare (about 2%). This script replicates the comparison at toy scale:
many seeds of a tiny model on a toy multi-turn task, trained hard enough that vanilla StarPO can collapse, under the
presets ``starpo``, ``starpo-s`` and ``starpo-s-ragen`` (trl_starpo/presets.py) with every other setting equal, plus
``starpo-s+gae``: ``starpo-s`` with the value critic's GAE as its estimator, the advantage the specification writes
(``reward - value(s)``), so that the preset's choice of the group estimator is measured rather than asserted, and
``starpo-s-literal``: ``starpo-s`` with the specification's 2-sigma batch filter taken literally (its other literal
formula, ``advantage * sigmoid(q)``, is the preset's own thinking scale since 2026-12-03), and the preset under its
two other thinking-scale rules: ``starpo-s+sign_aware`` (its rule until 2026-12-03) and ``starpo-s+relative`` (the
scale taken relative to its batch).

Setting (``--setting``; ``SETTINGS`` and the environments below)
    Tasks: ``grid`` (``HintedGridEnv``): a position on a 10 x 10 grid and a target one step away; the observation
    names the target's compass direction ("At (3, 5). Target (3, 6) is north."); the actions are ``up``, ``down``,
    ``left``, ``right``. ``counter`` (``HintedCounterEnv``): a counter at 0-9 and a target one step away ("At 3.
    Target 4 is higher."); the actions are ``inc`` and ``dec``. Either way reaching the target pays 1 and ends the
    episode, and an episode has up to 3 turns of one action, so a wrong first move can be undone by two right ones.
    A policy that ignores its input succeeds on 1/4 of the grid tasks and 1/2 of the counter tasks.
    Agent: a 2-layer Llama (hidden size 64, ~0.1M parameters) with a byte-level BPE tokenizer trained on the task's
    text, supervised from scratch for 300 steps on well-formed turns (``<think>north</think><answer>up</answer>``,
    ``<think>up</think><answer>inc</answer>``) whose move is the right one 55% (grid) or 65% (counter) of the time:
    it starts in the format, with a real but weak policy to improve.
    RL: ``StarPOTrainer`` with the preset under test; 4 tasks x 4 rollouts (``num_generations=4``) per batch,
    ``num_iterations=2`` (two updates per batch, so that StarPO-S's KL early stopping has something to stop),
    learning rate 2e-3 held constant after the preset's warmup (``constant_with_warmup``), ``--steps`` optimizer
    steps (default 80, i.e. 40 rollout batches). The learning rate is aggressive on purpose: it is what makes this
    small model collapse. Each run also carries the echo-trap monitor (``trl_starpo.monitor``) in ``warn`` mode, so
    its detections can be compared with the collapses.

Collapse (defined before any run was made, and not changed after)
    Let ``s_b`` be the success rate of rollout batch ``b`` (16 episodes) and ``m_b`` its trailing mean over
    ``WINDOW = 5`` batches (defined from the 5th batch on); the peak is ``P = max_b m_b``.
    - A run **collapsed** if its final trailing mean ``m_B`` (the last 5 batches) is at most ``DROP = 0.5`` times
      its peak and at least ``MIN_DROP = 0.2`` below it: ``m_B <= min(0.5 * P, P - 0.2)``.
    - Its **time to collapse** is the first optimizer step at which ``m_b <= min(0.5 * R_b, R_b - 0.2)``, where
      ``R_b = max_{b' <= b} m_b'`` is the running peak (so it uses no knowledge of the future).
    - A run **dipped** if that condition held at some batch, whether or not the run was still below it at the end.
    Peak, final and initial success are ``P``, ``m_B`` and ``m_5`` (the first 5 batches).

Usage
    python benchmarks/echo_trap.py --setting grid          # a recorded study: 7 arms x 10 seeds
    python benchmarks/echo_trap.py --setting counter       # the other one
    python benchmarks/echo_trap.py --seeds 1 --steps 10 --no-record   # a smoke run
    python benchmarks/echo_trap.py --setting grid --analyse-only      # table, plot and results.md from saved runs

Each run is saved as ``<workdir>/runs/<setting>/<preset>-seed<N>.json`` and reused while the setting and the arm's
configuration (``arm_key``) are unchanged, so an interrupted study resumes. With ``--record`` (the default) the plot
``docs/echo_trap_<setting>.png``, the raw curves ``benchmarks/echo_trap_runs_<setting>.json`` and the setting's
generated part of ``docs/results.md`` (between its ``echo-trap:<setting>`` markers) are written, with the git commit
the runs came from. A study takes 15-30 minutes on 2 shared CPU cores with ``--jobs 2`` (runs of 20-110 s, depending
on the load).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import warnings
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

import scipy.stats
from provenance import cpus, provenance

from trl_starpo.statistics import success_interval

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ROOT = Path(__file__).resolve().parent.parent
RESULTS_MD = ROOT / "docs" / "results.md"

ARMS = {  # study arm -> (preset, fields set on top of it)
    "starpo": ("starpo", {}),
    "starpo-s": ("starpo-s", {}),
    "starpo-s-ragen": ("starpo-s-ragen", {}),
    # the specification's StarPO-S writes its advantage as reward - value(s) with GAE: the same preset on that estimator
    "starpo-s+gae": ("starpo-s", {"advantage_estimator": "gae"}),
    # the specification's formulas taken literally: the 2-sigma batch filter (the preset's scale is already literal)
    "starpo-s-literal": ("starpo-s", {"trajectory_filter": "outlier"}),
    # the thinking-scale rules the preset does not apply: blame never shrunk, and that rule relative to the batch
    "starpo-s+sign_aware": ("starpo-s", {"thinking_scale_rule": "sign_aware"}),
    "starpo-s+relative": ("starpo-s", {"thinking_scale_rule": "relative"}),
}
PRESETS = tuple(ARMS)
WINDOW, DROP, MIN_DROP = 5, 0.5, 0.2  # the collapse definition (see the docstring)


def arm_key(arm: str) -> str:
    """A short hash of what an arm trains with (its preset's values and the fields set on top): a saved run is
    reused only while its arm is unchanged, so renaming arms or changing a preset never mixes runs of two configs."""
    from trl_starpo.presets import PRESETS as PRESET_VALUES

    preset, overrides = ARMS[arm]
    return hashlib.sha1(json.dumps({**PRESET_VALUES[preset], **overrides}, sort_keys=True).encode()).hexdigest()[:10]


COUNTER = {
    "sft_steps": 300,
    "sft_correct": 0.65,
    "num_generations": 4,
    "batch_size": 16,
    "num_iterations": 2,
    "learning_rate": 2e-3,
    "lr_scheduler_type": "constant_with_warmup",
    "max_turns": 3,
    "max_tokens_per_turn": 12,
    "max_context_length": 256,
    "probe_every": 5,
    "gradient_checkpointing": False,
}
SETTINGS = {"counter": COUNTER, "grid": {**COUNTER, "sft_correct": 0.55}}
"""Everything that defines a run besides the task, the preset and the seed, per study setting."""
SERIES = (
    "rollout/success", "rollout/format_error_rate", "rollout/group_return_std", "entropy", "grad_norm", "kl",
    "kl_early_stop/sampling_kl", "filter/kept_fraction", "filter/mean_weight", "clip_ratio/region_mean",
    "critic/explained_variance", "monitor/thinking_distinct_1",
    "monitor/unique_response_fraction", "monitor/probe/mutual_information", "monitor/probe/retrieval_accuracy",
)


# -- the task -----------------------------------------------------------------------------------------------------


class HintedCounterEnv:
    """A counter and a target one step away; the observation says whether the target is higher or lower.

    Actions ``inc`` / ``dec`` (anything else is invalid and changes nothing); reaching the target pays 1 and ends the
    episode. An input-agnostic policy (always ``inc``) succeeds on half the tasks.
    """

    system_prompt = "Move the counter to the target."
    action_description = "inc, dec"
    actions = ("inc", "dec")
    thoughts = {"inc": "up", "dec": "down"}  # what the starting agent thinks before each action
    corpus = [system_prompt, "inc dec Invalid. up down <think> </think> <answer> </answer>"] + [
        f"At {i}. Target {j} is higher. lower" for i in range(-5, 15) for j in range(-5, 15)
    ]

    def reset(self, *, seed=None, options=None):
        task = (options or {}).get("task") or self.make_task(seed or 0)
        self.value, self.target = task["start"], task["target"]
        return self._observation(), {}

    def _observation(self) -> str:
        relation = "higher" if self.target > self.value else "lower"
        return f"At {self.value}. Target {self.target} is {relation}."

    def step(self, action: str):
        action = action.strip().lower()
        if action not in self.actions:
            info = {"action_is_valid": False, "action_is_effective": False, "success": False}
            return "Invalid. " + self._observation(), 0.0, False, False, info
        self.value += 1 if action == "inc" else -1
        success = self.value == self.target
        info = {"action_is_valid": True, "action_is_effective": True, "success": success}
        return self._observation(), float(success), success, False, info

    def close(self):
        pass

    @staticmethod
    def make_task(seed: int, index: int = 0) -> dict:
        rng = random.Random(seed)
        start = rng.randrange(10)
        return {"task_id": f"t{index}", "seed": seed, "start": start, "target": start + rng.choice((-1, 1))}

    @staticmethod
    def right_action(task: dict) -> str:
        return "inc" if task["target"] > task["start"] else "dec"


class HintedGridEnv:
    """A position on a grid and a target one step away; the observation gives the target's compass direction.

    Actions ``up`` / ``down`` / ``left`` / ``right`` (anything else is invalid and changes nothing); reaching the
    target pays 1 and ends the episode. After a wrong move the target is two steps away and the hint names both
    directions ("north and west"). An input-agnostic policy (always ``up``) succeeds on a quarter of the tasks.
    """

    system_prompt = "Move to the target."
    action_description = "up, down, left, right"
    actions = ("up", "down", "left", "right")
    moves = {"up": (0, 1), "down": (0, -1), "left": (-1, 0), "right": (1, 0)}
    thoughts = {"up": "north", "down": "south", "left": "west", "right": "east"}
    corpus = [system_prompt, "up down left right Invalid. north south east west and "
              "<think> </think> <answer> </answer>"]
    corpus += [
        f"At ({i}, {j}). Target ({j}, {i}) is north and west. south east" for i in range(-3, 13) for j in range(-3, 13)
    ]

    def reset(self, *, seed=None, options=None):
        task = (options or {}).get("task") or self.make_task(seed or 0)
        self.position, self.target = tuple(task["start"]), tuple(task["target"])
        return self._observation(), {}

    def _observation(self) -> str:
        (x, y), (tx, ty) = self.position, self.target
        if self.position == self.target:
            return f"At ({x}, {y}). Target reached."
        parts = [word for word, on in (("north", ty > y), ("south", ty < y), ("east", tx > x), ("west", tx < x)) if on]
        return f"At ({x}, {y}). Target ({tx}, {ty}) is {' and '.join(parts)}."

    def step(self, action: str):
        action = action.strip().lower()
        if action not in self.actions:
            info = {"action_is_valid": False, "action_is_effective": False, "success": False}
            return "Invalid. " + self._observation(), 0.0, False, False, info
        dx, dy = self.moves[action]
        self.position = (self.position[0] + dx, self.position[1] + dy)
        success = self.position == self.target
        info = {"action_is_valid": True, "action_is_effective": True, "success": success}
        return self._observation(), float(success), success, False, info

    def close(self):
        pass

    @classmethod
    def make_task(cls, seed: int, index: int = 0) -> dict:
        rng = random.Random(seed)
        x, y = rng.randrange(10), rng.randrange(10)
        dx, dy = cls.moves[rng.choice(cls.actions)]
        return {"task_id": f"t{index}", "seed": seed, "start": [x, y], "target": [x + dx, y + dy]}

    @classmethod
    def right_action(cls, task: dict) -> str:
        step = (task["target"][0] - task["start"][0], task["target"][1] - task["start"][1])
        return next(action for action, move in cls.moves.items() if move == step)


TASKS = {"counter": HintedCounterEnv, "grid": HintedGridEnv}
ENV_IDS = {"counter": "HintedCounterEnv-v1", "grid": "HintedGridEnv-v1"}


def task_dataset(setting: str, n: int, seed: int):
    from datasets import Dataset

    return Dataset.from_list([TASKS[setting].make_task(seed * 100_000 + i, i) for i in range(n)])


# -- the agent ----------------------------------------------------------------------------------------------------

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + "
    "'\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def build_agent(path: Path, setting: str) -> None:
    """The starting agent: a tokenizer trained on the task's text and a tiny Llama supervised on its format."""
    import torch
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    from trl_starpo.rollout.collector import RolloutCollector

    env, config = TASKS[setting], SETTINGS[setting]
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=320, special_tokens=["<|pad|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    backend.train_from_iterator(env.corpus * 5, trainer=trainer)
    tags = ("<think>", "</think>", "<answer>", "</answer>")
    backend.add_tokens([AddedToken(tag, special=False, normalized=False) for tag in tags])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, eos_token="<|im_end|>", pad_token="<|pad|>",
                                        bos_token="<|im_start|>")
    tokenizer.chat_template = CHATML

    torch.manual_seed(0)
    llama = LlamaConfig(
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=1024, pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id, bos_token_id=tokenizer.bos_token_id, tie_word_embeddings=False,
    )
    model = LlamaForCausalLM(llama)
    collector = RolloutCollector(tokenizer, max_actions_per_turn=1)
    examples = []
    for row in task_dataset(setting, 64, seed=999_999):
        prompt = collector._start(env(), row, 0)[0].token_ids  # ends with the prefilled <think>
        right = env.right_action(row)
        wrong = [action for action in env.actions if action != right]
        for k in range(20):  # the right move sft_correct of the time, the wrong ones in turn otherwise
            action = right if k < 20 * config["sft_correct"] else wrong[k % len(wrong)]
            text = f"{env.thoughts[action]}</think><answer>{action}</answer>"
            examples.append((prompt, tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]))
    rng = random.Random(0)
    optimizer = torch.optim.Adam(model.parameters(), lr=3e-3)
    for _ in range(config["sft_steps"]):
        batch = rng.sample(examples, 16)
        width = max(len(p) + len(r) for p, r in batch)
        ids = torch.full((16, width), tokenizer.pad_token_id)
        labels = torch.full((16, width), -100)
        mask = torch.zeros((16, width), dtype=torch.long)
        for row, (prompt, response) in enumerate(batch):
            sequence = prompt + response
            ids[row, : len(sequence)] = torch.tensor(sequence)
            labels[row, len(prompt) : len(sequence)] = torch.tensor(response)
            mask[row, : len(sequence)] = 1
        model(input_ids=ids, attention_mask=mask, labels=labels).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    tokenizer.save_pretrained(path)


# -- one run ------------------------------------------------------------------------------------------------------


def run_one(setting: str, preset: str, seed: int, steps: int, agent: str, out: str, threads: int) -> str:
    """Train one preset with one seed; save its logged curves and detections as JSON at ``out``."""
    import torch
    import transformers
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    from trl_starpo import StarPOConfig, StarPOTrainer
    from trl_starpo.monitor import add_echo_trap_monitor

    torch.set_num_threads(threads)
    transformers.logging.set_verbosity_error()
    transformers.utils.logging.disable_progress_bar()
    warnings.filterwarnings("ignore", category=FutureWarning)
    config = SETTINGS[setting]
    preset_name, overrides = ARMS[preset]
    with tempfile.TemporaryDirectory() as output_dir:
        args = StarPOConfig(
            output_dir=output_dir, preset=preset_name, **overrides, seed=seed, max_steps=steps,
            num_generations=config["num_generations"], per_device_train_batch_size=config["batch_size"],
            num_iterations=config["num_iterations"], learning_rate=config["learning_rate"],
            lr_scheduler_type=config["lr_scheduler_type"], max_turns=config["max_turns"], max_actions_per_turn=1,
            max_tokens_per_turn=config["max_tokens_per_turn"], max_context_length=config["max_context_length"],
            gradient_checkpointing=False, logging_steps=1, report_to="none", save_strategy="no", disable_tqdm=True,
        )
        trainer = StarPOTrainer(agent, environment=TASKS[setting], args=args,
                                train_dataset=task_dataset(setting, 512, seed))
        for callback in (PrinterCallback, ProgressCallback):
            trainer.remove_callback(callback)
        echo = add_echo_trap_monitor(trainer, action="warn", probe_every=config["probe_every"], probe_size=4)
        start = time.time()
        trainer.train()
        seconds = time.time() - start
    entries = [e for e in trainer.state.log_history if "loss" in e]
    record = {
        "preset": preset, "arm": arm_key(preset), "seed": seed, "steps": steps, "setting": setting_key(setting, steps),
        "seconds": round(seconds, 1), **provenance(),
        "step": [e["step"] for e in entries],
        "series": {name: [e.get(name) for e in entries] for name in SERIES},
        "detections": [{k: d[k] for k in ("step", "detectors", "action")} for d in echo.detections],
    }
    Path(out).write_text(json.dumps(record))
    return out


def setting_key(setting: str, steps: int) -> str:
    """A short hash of everything that defines a run besides its preset and seed."""
    # `learning_signal` names the trainer's update: runs made before the issue-12 fixes are not reused.
    text = json.dumps(
        {**SETTINGS[setting], "steps": steps, "window": WINDOW, "env": ENV_IDS[setting], "learning_signal": 2},
        sort_keys=True,
    )
    return hashlib.sha1(text.encode()).hexdigest()[:10]


# -- analysis -----------------------------------------------------------------------------------------------------


def success_curve(record: dict) -> tuple[list[int], list[float]]:
    """``(steps, success)`` of the run's rollout batches."""
    pairs = [(s, v) for s, v in zip(record["step"], record["series"]["rollout/success"]) if v is not None]
    return [s for s, _ in pairs], [v for _, v in pairs]


def trailing_means(values: list[float], window: int = WINDOW) -> list[float | None]:
    return [None if i + 1 < window else sum(values[i + 1 - window : i + 1]) / window for i in range(len(values))]


def collapsed_below(value: float, peak: float) -> bool:
    return value <= min(DROP * peak, peak - MIN_DROP)


def classify(record: dict) -> dict:
    """The run's initial / peak / final success and its collapse verdict, by the definition in the docstring."""
    steps, success = success_curve(record)
    smooth = trailing_means(success)
    points = [(s, m) for s, m in zip(steps, smooth) if m is not None]
    if not points:
        raise ValueError(f"{record['preset']} seed {record['seed']}: fewer than {WINDOW} rollout batches")
    peak_step, peak = max(points, key=lambda p: p[1])
    final = points[-1][1]
    running, collapse_step = -1.0, None
    for step, value in points:
        running = max(running, value)
        if collapse_step is None and collapsed_below(value, running):
            collapse_step = step
    collapsed = collapsed_below(final, peak)
    detections = record["detections"]
    probes = [x for x in record["series"]["monitor/probe/mutual_information"] if x is not None]
    spread = [x for x in record["series"]["rollout/group_return_std"] if x is not None][-WINDOW:]
    return {
        "initial": points[0][1], "peak": peak, "peak_step": peak_step, "final": final,
        "collapsed": collapsed, "dipped": collapse_step is not None,
        "collapse_step": collapse_step if collapsed else None, "dip_step": collapse_step,
        "first_detection": detections[0]["step"] if detections else None,
        "first_detectors": detections[0]["detectors"] if detections else [],
        "detected_by": sorted({name for d in detections for name in d["detectors"]}),
        "final_mi": probes[-1] if probes else float("nan"),
        "final_spread": sum(spread) / len(spread) if spread else float("nan"),
    }


def fisher_exact(a: int, b: int, c: int, d: int) -> float:
    """Two-sided Fisher exact test p-value of the 2x2 table ``[[a, b], [c, d]]``."""
    return float(scipy.stats.fisher_exact([[a, b], [c, d]]).pvalue)


def quartiles(values: list[float]) -> tuple[float, float, float]:
    if len(values) == 1:
        return values[0], values[0], values[0]
    q1, q2, q3 = statistics.quantiles(values, n=4, method="inclusive")
    return q1, q2, q3


def summarize(records: list[dict]) -> dict[str, dict]:
    """Per preset: collapse rate with its 95% interval, times to collapse, success quartiles, detections."""
    summary = {}
    for preset in PRESETS:
        runs = [(r, classify(r)) for r in records if r["preset"] == preset]
        if not runs:
            continue
        verdicts = [v for _, v in runs]
        collapsed = [v for v in verdicts if v["collapsed"]]
        healthy = [v for v in verdicts if not v["collapsed"]]
        caught = [v for v in collapsed if v["first_detection"] is not None
                  and v["first_detection"] <= v["collapse_step"]]
        dipped_only = [v for v in healthy if v["dipped"]]
        steady = [v for v in healthy if not v["dipped"]]
        summary[preset] = {
            "runs": len(runs),
            "collapsed": len(collapsed),
            "interval": success_interval(len(collapsed) / max(len(runs), 1), len(runs)),
            "dipped": sum(v["dipped"] for v in verdicts),
            "collapse_steps": sorted(v["collapse_step"] for v in collapsed),
            "initial": quartiles([v["initial"] for v in verdicts]),
            "peak": quartiles([v["peak"] for v in verdicts]),
            "final": quartiles([v["final"] for v in verdicts]),
            "final_mean": statistics.fmean(v["final"] for v in verdicts),
            "final_mi": statistics.median(v["final_mi"] for v in verdicts),
            "final_spread": statistics.median(v["final_spread"] for v in verdicts),
            "caught": len(caught),
            "lead": [v["collapse_step"] - v["first_detection"] for v in caught],
            "dipped_only": len(dipped_only),
            "dipped_only_flagged": sum(v["first_detection"] is not None for v in dipped_only),
            "steady": len(steady),
            "steady_flagged": sum(v["first_detection"] is not None for v in steady),
            "detectors": {name: sum(name in v["detected_by"] for v in verdicts) for name in
                          sorted({n for v in verdicts for n in v["detected_by"]})},
            "seconds": statistics.median(r["seconds"] for r, _ in runs),
        }
    return summary


def plot(records: list[dict], path: Path, steps: int) -> Path:
    """Success (trailing mean of 5 batches) per preset: every seed thin, the median bold, the quartiles shaded."""
    from matplotlib.figure import Figure

    arms = [preset for preset in PRESETS if any(r["preset"] == preset for r in records)]
    figure = Figure(figsize=(3.4 * len(arms) + 0.5, 4.6), dpi=100)
    axes = figure.subplots(1, len(arms), sharey=True, squeeze=False)[0]
    for ax, preset in zip(axes, arms):
        runs = [r for r in records if r["preset"] == preset]
        curves = {}
        for record in runs:
            batch_steps, success = success_curve(record)
            smooth = trailing_means(success)
            verdict = classify(record)
            xs = [s for s, m in zip(batch_steps, smooth) if m is not None]
            ys = [m for m in smooth if m is not None]
            ax.plot(xs, ys, color="tab:red" if verdict["collapsed"] else "tab:blue", alpha=0.35, linewidth=0.9)
            for x, y in zip(xs, ys):
                curves.setdefault(x, []).append(y)
        xs = sorted(x for x, ys in curves.items() if len(ys) == len(runs))
        if xs:
            q = [quartiles(curves[x]) for x in xs]
            ax.fill_between(xs, [a for a, _, _ in q], [c for _, _, c in q], color="black", alpha=0.12,
                            label="quartiles")
            ax.plot(xs, [b for _, b, _ in q], color="black", linewidth=2.2, label="median")
        collapsed = sum(classify(r)["collapsed"] for r in runs)
        ax.set_title(f"{preset}: {collapsed}/{len(runs)} collapsed", fontsize=11)
        ax.set_xlabel("optimizer step")
        ax.set_xlim(0, steps)
        ax.set_ylim(-0.02, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"success (trailing mean of {WINDOW} batches)")
    axes[0].plot([], [], color="tab:red", alpha=0.6, label="a collapsed seed")
    axes[0].plot([], [], color="tab:blue", alpha=0.6, label="another seed")
    figure.legend(*axes[0].get_legend_handles_labels(), loc="lower center", ncol=4, fontsize=9, frameon=False)
    figure.tight_layout(rect=(0, 0.07, 1, 1))
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png")
    return path


def two(x: float) -> str:
    """``x`` to two decimals, without a minus sign on zero."""
    return f"{0.0 if abs(x) < 0.005 else x:.2f}"


def fmt_q(q: tuple[float, float, float]) -> str:
    return f"{q[1]:.2f} ({q[0]:.2f}–{q[2]:.2f})"


def outputs(setting: str) -> tuple[Path, Path]:
    """``(plot, raw curves)`` of a setting's study."""
    return ROOT / "docs" / f"echo_trap_{setting}.png", ROOT / "benchmarks" / f"echo_trap_runs_{setting}.json"


def markdown(setting: str, summary: dict, records: list[dict], meta: dict) -> str:
    """The generated block of docs/results.md for one setting."""
    config = SETTINGS[setting]
    changed = meta["dirty"]
    if isinstance(changed, list):  # records before 2026-12-05 kept a string
        changed = ", ".join(changed[:8]) + (f" and {len(changed) - 8} more" if len(changed) > 8 else "")
        changed += f"; diff sha256 {meta['diff_sha256'][:12]}" if meta.get("diff_sha256") else ""
    dirty = f" (working tree with uncommitted changes: {changed})" if meta["dirty"] else ""
    lines = [
        f"Recorded {meta['date']} from commit `{meta['commit']}`{dirty}; "
        f"{meta['platform']}; torch {meta['torch']}, transformers {meta['transformers']}, trl {meta['trl']}; "
        f"{meta['jobs']} runs at a time, {meta['threads']} thread each; study wall time {meta['wall_minutes']:.1f} min "
        f"(load average at the end {meta['load']}).",
        "",
        "```bash",
        meta["command"],
        "```",
        "",
        *runs_by_commit(records, meta["commit"]),
        f"{meta['seeds']} seeds per preset, {meta['steps']} optimizer steps "
        f"({meta['steps'] // config['num_iterations']} rollout batches of {config['batch_size']} episodes) per run; "
        f"setting `{setting_key(setting, meta['steps'])}`.",
        "Success columns: median (interquartile range) over seeds of the trailing 5-batch mean. In-group std at "
        "the end: median over seeds of `rollout/group_return_std` over the last 5 batches. Probe MI at the end: "
        "median over seeds "
        f"of the last `monitor/probe/mutual_information` (nats; 4 start states, at most log 4 = 1.39; one probe every "
        f"{config['probe_every']} batches).",
        "",
        "| preset | collapsed | 95% interval | dipped (collapsed or not) | steps to collapse | initial | peak | final "
        "| mean final | in-group std at the end | probe MI at the end | s / run |",
        "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for preset, s in summary.items():
        lo, hi = s["interval"]
        steps = ", ".join(str(x) for x in s["collapse_steps"]) or "—"
        lines.append(
            f"| `{preset}` | {s['collapsed']}/{s['runs']} | {lo:.0%}–{hi:.0%} | {s['dipped']}/{s['runs']} | {steps} | "
            f"{fmt_q(s['initial'])} | {fmt_q(s['peak'])} | {fmt_q(s['final'])} | {s['final_mean']:.2f} | "
            f"{s['final_spread']:.2f} | {two(s['final_mi'])} | {s['seconds']:.0f} |"
        )
    lines += ["", "Comparisons between presets (two-sided Fisher exact test on the counts of runs):", ""]
    names = list(summary)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            sa, sb = summary[a], summary[b]
            parts = []
            for what in ("collapsed", "dipped"):
                p = fisher_exact(sa[what], sa["runs"] - sa[what], sb[what], sb["runs"] - sb[what])
                shown = f"{p:.3f}" if p >= 0.001 else f"{p:.1e}"
                parts.append(f"{what} {sa[what]}/{sa['runs']} vs {sb[what]}/{sb['runs']}, p = {shown}")
            lines.append(f"- `{a}` vs `{b}`: " + "; ".join(parts))
    lines += [
        "",
        "The echo-trap monitor (`warn` mode, default detectors) on the same runs:",
        "",
        "| preset | collapses flagged at or before the collapse step | steps of warning "
        "| dipped, not collapsed: flagged "
        "| never dipped: flagged (false alarms) | runs each detector fired in |",
        "|---|---:|---|---:|---:|---|",
    ]
    for preset, s in summary.items():
        fired = ", ".join(f"{k} {v}" for k, v in s["detectors"].items()) or "—"
        lead = ", ".join(str(x) for x in sorted(s["lead"])) or "—"
        lines.append(f"| `{preset}` | {s['caught']}/{s['collapsed']} | {lead} | "
                     f"{s['dipped_only_flagged']}/{s['dipped_only']} | "
                     f"{s['steady_flagged']}/{s['steady']} | {fired} |")
    lines += ["", "Per run (success: initial → peak @ step → final; collapse step; first detection; last probe MI):",
              "",
              "| run | success | collapse | first detection | probe MI at the end |", "|---|---|---|---|---:|"]
    for record in sorted(records, key=lambda r: (PRESETS.index(r["preset"]), r["seed"])):
        v = classify(record)
        detection = f"step {v['first_detection']} ({', '.join(v['first_detectors'])})" if v["first_detection"] else "—"
        verdict = f"dipped at step {v['dip_step']}" if v["dipped"] else "—"
        if v["collapsed"]:
            verdict = f"step {v['collapse_step']}"
        lines.append(f"| `{record['preset']}` seed {record['seed']} | {v['initial']:.2f} → {v['peak']:.2f} @ "
                     f"{v['peak_step']} → "
                     f"{v['final']:.2f} | {verdict} | {detection} | {two(v['final_mi'])} |")
    lines += ["", f"![success curves per preset, {setting} task]({outputs(setting)[0].name})", ""]
    return "\n".join(lines)


def runs_by_commit(records: list[dict], study_commit: str) -> list[str]:
    """A line naming the commit each arm's runs came from, when a study reuses runs made on other commits."""
    arms: dict[str, dict[str, int]] = {}
    for record in records:
        commit = record.get("commit", "unknown")[:10] + (" with uncommitted changes" if record.get("dirty") else "")
        if record.get("diff_sha256"):
            commit += f" (diff {record['diff_sha256'][:8]})"
        arms.setdefault(commit, {}).setdefault(record["preset"], 0)
        arms[commit][record["preset"]] += 1
    if set(arms) <= {study_commit[:10]}:
        return []
    parts = [f"`{commit}`: " + ", ".join(f"`{arm}` ({count})" for arm, count in counts.items())
             for commit, counts in arms.items()]
    return ["The runs came from more than one commit (a saved run is reused while the setting and its arm are "
            "unchanged; each run notes the commit when it finished): " + "; ".join(parts) + ".", ""]


def write_results(setting: str, block: str) -> None:
    """Replace the setting's generated block of docs/results.md (between its markers), leaving the rest as it is."""
    begin = f"<!-- echo-trap:{setting}:begin (generated by benchmarks/echo_trap.py --setting {setting}) -->"
    end = f"<!-- echo-trap:{setting}:end -->"
    text = RESULTS_MD.read_text() if RESULTS_MD.exists() else "# Results\n"
    if begin not in text or end not in text:
        text = text.rstrip() + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    RESULTS_MD.write_text(f"{head}{begin}\n{block}\n{end}{tail}")


# -- main ---------------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--setting", choices=sorted(SETTINGS), default="grid", help="The task (see the docstring).")
    parser.add_argument("--seeds", type=int, default=10, help="Seeds per preset (0 .. seeds-1).")
    parser.add_argument("--steps", type=int, default=80, help="Optimizer steps per run.")
    parser.add_argument("--presets", nargs="+", default=list(PRESETS), choices=PRESETS, help="The study's arms.")
    parser.add_argument("--jobs", type=int, default=2, help="Runs at a time (processes).")
    parser.add_argument("--threads", type=int, default=1, help="Torch threads per run.")
    parser.add_argument("--workdir", type=Path, default=Path.home() / ".cache" / "trl_starpo" / "echo_trap")
    parser.add_argument("--fresh", action="store_true", help="Rerun even the runs already saved.")
    parser.add_argument("--analyse-only", action="store_true", help="Use the saved runs only; train nothing.")
    parser.add_argument("--record", action=argparse.BooleanOptionalAction, default=True,
                        help="Write docs/results.md, docs/echo_trap_<setting>.png and "
                             "benchmarks/echo_trap_runs_<setting>.json.")
    args = parser.parse_args(argv)

    started = time.time()
    origin = provenance()
    setting = args.setting
    agent = args.workdir / f"agent-{setting_key(setting, 0)}"
    runs_dir = args.workdir / "runs" / setting
    runs_dir.mkdir(parents=True, exist_ok=True)
    key = setting_key(setting, args.steps)
    plot_path, raw_path = outputs(setting)
    jobs = [(preset, seed) for seed in range(args.seeds) for preset in args.presets]
    arms = {preset: arm_key(preset) for preset in args.presets}

    def saved(preset, seed):
        path = runs_dir / f"{preset}-seed{seed}.json"
        if path.exists():
            record = json.loads(path.read_text())
            if record.get("setting") == key and record.get("arm") == arms[preset]:
                return record
        return None

    todo = [(p, s) for p, s in jobs if args.fresh or saved(p, s) is None]
    if todo and not args.analyse_only:
        if not (agent / "config.json").exists():
            print(f"building the starting agent in {agent} ...", flush=True)
            build_agent(agent, setting)
        print(f"{len(todo)} runs to make ({len(jobs) - len(todo)} saved), {args.jobs} at a time", flush=True)
        import multiprocessing

        with ProcessPoolExecutor(args.jobs, mp_context=multiprocessing.get_context("spawn")) as pool:
            futures = {
                pool.submit(run_one, setting, p, s, args.steps, str(agent), str(runs_dir / f"{p}-seed{s}.json"),
                            args.threads): (p, s)
                for p, s in todo
            }
            for done, future in enumerate(as_completed(futures), start=1):
                preset, seed = futures[future]
                record = json.loads(Path(future.result()).read_text())
                verdict = classify(record)
                print(f"[{done}/{len(todo)}] {preset} seed {seed}: {record['seconds']:.0f}s, success "
                      f"{verdict['initial']:.2f} -> peak {verdict['peak']:.2f} -> final {verdict['final']:.2f}"
                      + (f", COLLAPSED at step {verdict['collapse_step']}" if verdict["collapsed"] else ""), flush=True)

    records = [r for r in (saved(p, s) for p, s in jobs) if r is not None]
    if args.analyse_only and len(records) < len(jobs) and raw_path.exists():
        recorded = [r for r in json.loads(raw_path.read_text())["runs"]
                    if r["setting"] == key and r.get("arm") == arms.get(r["preset"])]
        wanted = set(jobs)
        records = [r for r in recorded if (r["preset"], r["seed"]) in wanted]  # the recorded study's own curves
    if not records:
        sys.exit("No saved runs for this setting; run without --analyse-only first.")
    summary = summarize(records)
    for preset, s in summary.items():
        print(f"{preset:19s} collapsed {s['collapsed']}/{s['runs']}  final {fmt_q(s['final'])}  "
              f"peak {fmt_q(s['peak'])}")
    if not args.record:
        return
    previous = json.loads(raw_path.read_text())["meta"] if raw_path.exists() else None
    if args.analyse_only and previous is not None and previous.get("setting_key") == key:
        meta = previous  # the runs' own record: commit, date, machine, wall time of the study
    else:
        meta = study_meta(args, key, origin, started)
    plot(records, plot_path, args.steps)
    raw = {"meta": meta, "setting": SETTINGS[setting], "runs": [rounded(r) for r in records]}
    raw_path.write_text(json.dumps(raw, separators=(",", ":")))
    write_results(setting, markdown(setting, summary, records, meta))
    print(f"wrote {RESULTS_MD.relative_to(ROOT)}, {plot_path.relative_to(ROOT)}, {raw_path.relative_to(ROOT)}")


def rounded(record: dict, digits: int = 5) -> dict:
    """The record with its curves rounded (success rates are multiples of 1/16 and stay exact)."""
    series = {name: [None if v is None else round(v, digits) for v in values]
              for name, values in record["series"].items()}
    return {**record, "series": series}


def study_meta(args, key: str, origin: dict, started: float) -> dict:
    """Where and from what the study's runs came: commit, versions, machine, wall time, the command."""
    import torch
    import transformers
    import trl

    return {
        "date": datetime.date.today().isoformat(), **origin,
        "platform": cpus(), "torch": torch.__version__,
        "transformers": transformers.__version__, "trl": trl.__version__, "jobs": args.jobs, "threads": args.threads,
        "wall_minutes": (time.time() - started) / 60, "load": ", ".join(f"{x:.1f}" for x in os.getloadavg()),
        "seeds": args.seeds, "steps": args.steps, "setting_key": key,
        "command": f"python benchmarks/echo_trap.py --setting {args.setting}" + "".join(
            f" {flag} {value}" for flag, value, default in (
                ("--seeds", args.seeds, 10), ("--steps", args.steps, 80), ("--jobs", args.jobs, 2),
                ("--threads", args.threads, 1)) if value != default),
    }


if __name__ == "__main__":
    main()
