"""One (method, environment, seed) run: made or resumed in its own folder, and its record written."""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import shutil
import sys
import time
from pathlib import Path

from provenance import cpus, provenance  # benchmarks/provenance.py

from .evaluation import held_out, held_out_tasks, load_model, tasks_digest
from .protocol import (
    COLUMNS, Column, METHODS, PRESET_METHODS, PROGRESS_FILE, RECORDS, ROOT, Scale, WORKDIR, applied_rule,
    collection_precision, native_bf16, recorded_collection_precision, recorded_rule, setting_key,
    training_key,
)
from .training import (load_checkpoint, shipped_warm_start_name, time_split, train_dpo, train_preset,
                       training_means, warm_start)


def record_path(records: Path, environment: str, method: str, seed: int) -> Path:
    return records / environment / f"{method}-seed{seed}.json"


def run_one(method: str, environment: str, seed: int, *, scale: Scale = Scale(), model: str | None = None,
            workdir: Path = WORKDIR, records: Path = RECORDS, column: Column | None = None,
            rerun: bool = False, checkpoint: Path | None = None) -> dict:
    """Make (or resume) one run and write its record; a run already recorded with these settings is returned, unless
    ``rerun``: then it is made again from the start (its checkpoints removed; the shared warm start is kept) and its
    record replaced. With ``checkpoint`` (a ``checkpoint-N`` folder of an RL run of these settings, or a copy of one
    kept with its run folder's ``setting.json`` and ``warm_start.json``) nothing is trained: the record is the run's
    held-out success at that checkpoint, its curve and training log up to it."""
    import torch

    from trl_starpo.models import DEFAULT_MODEL, resolve_model_path

    column = column or COLUMNS[environment]
    if scale.bf16 is None:
        scale = dataclasses.replace(scale, bf16=native_bf16())
    model_name = model or DEFAULT_MODEL
    key, rule = setting_key(environment, column, scale, model_name), applied_rule(method, column, scale)
    trained_as = training_key(environment, column, scale, model_name)
    path = record_path(records, environment, method, seed)
    point = checkpoint.name if checkpoint else None
    if path.is_file() and not rerun:
        recorded = json.loads(path.read_text())
        if recorded.get("checkpoint") != point:
            raise ValueError(f"{path} records {recorded.get('checkpoint') or 'the end of a run'}, not "
                             f"{point or 'the end of a run'}: give this one its own --records folder (or --rerun to "
                             "replace that record).")
        played = recorded.get("held_out", {}).get("tasks_sha256")  # records before 2026-12-05 name none
        same_tasks = played is None or played == tasks_digest(held_out_tasks(environment, column, scale))
        # the key names a shipped adapter by its path; a rebuilt one is another warm start
        same_start = method in ("random", "untrained") or not column.warm_start_adapter or recorded.get(
            "warm_start") == shipped_warm_start_name(environment, column.warm_start_adapter,
                                                     resolve_model_path(model_name))
        if (recorded.get("setting") == key and recorded_rule(recorded) == rule and same_tasks and same_start
                and recorded_collection_precision(recorded) == collection_precision(method, scale.bf16)):
            print(f"[{environment}] {method} seed {seed}: already recorded with these settings in {path} "
                  f"({recorded.get('recorded')}, commit {str(recorded.get('commit'))[:10]}); not run again "
                  "(--rerun makes it again)", flush=True)
            return recorded
    held_out_tasks(environment, column, scale)  # a split that cannot be evaluated fails before any training
    if checkpoint is not None:
        check_checkpoint(checkpoint, method, (trained_as, key), rule)
    started = time.time()
    torch.manual_seed(seed)
    if checkpoint is None:
        run_dir = run_directory(workdir, environment, method, seed, (trained_as, key), rule)
        if rerun and run_dir.is_dir():
            shutil.rmtree(run_dir)
        run_dir.mkdir(parents=True, exist_ok=True)
        (run_dir / "setting.json").write_text(json.dumps(setting_marker(trained_as, rule)))

    curve: list = []
    log_history: list = []
    dpo_rounds: list = []
    start = None
    if method == "random":
        trained, tokenizer = None, None
    elif method == "untrained":
        trained, tokenizer = load_model(resolve_model_path(model_name))
    else:
        start = warm_start(environment, column, scale, resolve_model_path(model_name), workdir)
        if checkpoint is not None:
            check_marker(checkpoint.parent / "warm_start.json", {"warm_start": start.name},
                         f"{checkpoint} was not trained from the warm start {start.name}")
            trained, tokenizer, curve, log_history = load_checkpoint(start, checkpoint)
        else:
            restart_on_new_warm_start(run_dir, start.name)
            if method == "sft":
                trained, tokenizer = load_model(str(start))
            elif method == "dpo":
                trained, tokenizer, curve, dpo_rounds = train_dpo(environment, column, scale, seed, start, run_dir)
            elif method in PRESET_METHODS:
                trained, tokenizer, curve, log_history = train_preset(method, environment, column, scale, seed,
                                                                      start, run_dir)
            else:
                raise ValueError(f"Unknown method {method!r}; choose from {METHODS}.")
    print(f"[{environment}] {method} seed {seed}: evaluating on {scale.eval_episodes} {column.held_out} tasks",
          flush=True)
    evaluation_started = time.time()
    result = held_out(trained, tokenizer, environment, column, scale, seed)
    evaluated = time.time()
    record = {
        "method": method, "environment": environment, "seed": seed, "setting": key, "thinking_scale_rule": rule,
        "collection_precision": collection_precision(method, scale.bf16), "model": model_name,
        "warm_start": start.name if start else None, **({"checkpoint": point} if point else {}),
        "held_out": result, "turns": curve[-1][0] if curve else 0,
        "updates": len(curve), "budget": column.budget, "curve": curve,
        "training_means": training_means(log_history), "time_split": time_split(log_history),
        **({"dpo_rounds": dpo_rounds} if dpo_rounds else {}),
        "column": dataclasses.asdict(column),
        "scale": dataclasses.asdict(scale),
        "recorded": datetime.date.today().isoformat(), **provenance(ROOT),
        # wall_s - evaluation_s is what this process spent before evaluating: loading the model or warm start and
        # whatever training it did itself (none when an earlier process finished the run)
        "machine": machine(), "wall_s": round(evaluated - started),
        "evaluation_s": round(evaluated - evaluation_started),
        "load": [round(x, 1) for x in os.getloadavg()], **peak_memory(),
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1) + "\n")
    print(f"[{environment}] {method} seed {seed}: held-out success {result['success']:.3f} "
          f"({result['successes']}/{result['episodes']}) -> {path}", flush=True)
    return record


def restart_on_new_warm_start(run_dir: Path, warm_start_name: str) -> None:
    """Empty ``run_dir`` when its checkpoints were trained from another warm start (one rebuilt since, after its
    training tasks changed): resuming them would go on training an adapter made for the old start."""
    marker = run_dir / "warm_start.json"
    if marker.is_file() and json.loads(marker.read_text()).get("warm_start") != warm_start_name:
        print(f"[{run_dir.name}] its checkpoints were trained from another warm start; starting over", flush=True)
        for child in run_dir.iterdir():
            if child.name != "setting.json":
                shutil.rmtree(child) if child.is_dir() else child.unlink()
    marker.write_text(json.dumps({"warm_start": warm_start_name}))


def setting_marker(key: str, rule: str | None) -> dict:
    """What a run folder's ``setting.json`` holds: the settings its checkpoints were trained with."""
    return {"setting": key, "thinking_scale_rule": rule}


def check_checkpoint(checkpoint: Path, method: str, keys: tuple[str, ...], rule: str | None) -> None:
    """Refuse a checkpoint that is not an RL run's of these settings (``keys``: the training key, then the whole
    setting's, which run folders made before :func:`~.protocol.training_key` name)."""
    if method not in PRESET_METHODS:
        raise ValueError(f"A checkpoint is an RL preset's ({', '.join(PRESET_METHODS)}); {method!r} has none.")
    if not (checkpoint / PROGRESS_FILE).is_file():
        raise ValueError(f"{checkpoint} is not a checkpoint of a learning run: it has no {PROGRESS_FILE}.")
    check_marker(checkpoint.parent / "setting.json", [setting_marker(key, rule) for key in keys],
                 f"{checkpoint} was not trained with these settings (give the flags of the run that made it)")


def check_marker(marker: Path, expected: dict | list[dict], refusal: str) -> None:
    """Refuse, saying ``refusal``, unless the run folder's ``marker`` file holds ``expected`` (or one of them)."""
    accepted = expected if isinstance(expected, list) else [expected]
    if not marker.is_file() or json.loads(marker.read_text()) not in accepted:
        raise ValueError(f"{refusal}: its run folder's {marker.name} ({marker}) is missing or names another.")


def run_directory(workdir: Path, environment: str, method: str, seed: int, keys: tuple[str, ...],
                  rule: str | None) -> Path:
    """Where a run of these settings keeps its checkpoints: a folder of its own for each training setting and rule, so
    that a run of other settings (another budget, an ablation) leaves the checkpoints of this one to evaluate again.
    ``keys``: the training key (:func:`~.protocol.training_key`), then the whole setting's, which named the folders
    of runs made before the training key: such a folder, found by the flags it was made with, is renamed to the
    training key's name, so that every later evaluation finds it too. Runs made before folders were named by setting
    (``<method>-seed<seed>``, their settings in ``setting.json``) keep theirs."""
    name = f"{method}-seed{seed}"
    runs = workdir / "runs" / environment
    marker = runs / name / "setting.json"
    if marker.is_file() and json.loads(marker.read_text()) in [setting_marker(key, rule) for key in keys]:
        return runs / name
    own, *earlier = [runs / "-".join([name, key, *([rule] if rule else [])]) for key in keys]
    for folder in earlier:
        if not own.exists() and folder.is_dir():
            folder.rename(own)
    return own


def peak_memory() -> dict[str, float]:
    """The run's peak memory in GiB: the process's resident set (``peak_rss_gib``; a warm start built by this process
    is in it) and, on a GPU, what torch allocated there (``peak_gpu_gib``)."""
    import resource

    import torch

    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss is in bytes on macOS, KiB on Linux
    peaks = {"peak_rss_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / 2**30, 2)}
    if torch.cuda.is_available():
        peaks["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2**30, 2)
    return peaks


def machine() -> str:
    """What a run ran on: the CPUs, and the GPU where there is one."""
    import torch

    return f"{torch.cuda.get_device_name()}, {cpus()}" if torch.cuda.is_available() else cpus()
