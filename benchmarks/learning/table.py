"""The generated section of docs/results.md (or another records folder's table) from run records alone."""

from __future__ import annotations

import json
from pathlib import Path

from .plots import plot
from .protocol import (
    COLUMNS, METHODS, PRESET_THINKING_SCALE_RULES, RECORDS, RESULTS_MD, RL_METHODS, ROOT, eval_precision,
    recorded_rule,
)
from .statistics import cells, lift, matched, paired


def load_records(records: Path = RECORDS) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(records.glob("*/*.json"))]


def percent(x: float) -> str:
    return f"{100 * x:.0f}"


def markdown(records: list[dict], folder: Path | None = None) -> str:
    """The generated part of docs/results.md: the table, the lift over SFT, per-run details and the curves.

    ``folder`` names another records folder than the main table's (an ablation's, another budget's): the
    command shown and the curves' links are then that folder's.
    """
    table = cells(records)
    environments = list(COLUMNS)
    command = ("python benchmarks/learning.py --table   # this section, from benchmarks/learning_runs/*/*.json"
               if folder is None else f"python benchmarks/learning.py --table --records {display_path(folder)}")
    lines = [
        "```bash",
        command,
        "```",
        "",
        "Held-out success in % over the seeds (how many in parentheses) with its 95% interval, a bootstrap over",
        "tasks that resamples each task's seeds within it: every seed plays the same tasks, so the task is the unit.",
        "`*` marks cells whose records predate per-task outcomes; their interval is the per-episode Wilson interval,",
        "which counts a task's episodes over the seeds as independent and so is too narrow. — where no run is recorded",
        "yet.",
        "",
        "| method | " + " | ".join(environments) + " |",
        "|---|" + "---:|" * len(environments),
    ]
    for method in METHODS:
        row = []
        for environment in environments:
            cell = table.get((method, environment))
            row.append("—" if cell is None else f"{percent(cell['success'])} [{percent(cell['low'])}–"
                       f"{percent(cell['high'])}]{'*' if cell['unit'] == 'episode' else ''} ({len(cell['seeds'])})")
        lines.append(f"| `{method}` | " + " | ".join(row) + " |")
    lines += ["", *lift_lines(records, environments), *paired_lines(records, environments), *rule_lines(records), ""]
    settings = {(r["environment"], r["setting"]) for r in records}
    mixed = sorted(e for e in environments if len({s for env, s in settings if env == e}) > 1)
    if mixed:
        lines += [f"Warning: the records of {', '.join(mixed)} come from different settings (see their `setting`).", ""]
    lines += precision_lines(records, environments) + task_set_lines(records, environments)
    if records:
        lines += ["Per run (held-out successes / episodes; turns of training and updates or DPO rounds; recorded "
                  "at commit):", "", "| environment | method | seed | held-out | turns | updates | commit |",
                  "|---|---|---:|---:|---:|---:|---|"]
        for r in sorted(records, key=lambda r: (r["environment"], METHODS.index(r["method"]), r["seed"])):
            h = r["held_out"]
            lines.append(f"| {r['environment']} | `{r['method']}` | {r['seed']} | {h['successes']}/{h['episodes']} | "
                         f"{r['turns']} | {r['updates']} | `{r['commit'][:10]}` |")
        lines.append("")
    for environment in environments:
        if any(r["environment"] == environment and r["curve"] for r in records):
            lines.append(f"![training-rollout success against environment turns, {environment}]"
                         f"({curves_link(environment, folder)})")
    return "\n".join(lines).rstrip()


def task_set_lines(records: list[dict], environments: list[str]) -> list[str]:
    """A warning for each column whose rows played different held-out tasks (a split regenerated between them), or
    mix rows that name their task set with rows made before records did."""
    lines = []
    for environment in environments:
        digests = {r["held_out"].get("tasks_sha256") for r in records if r["environment"] == environment}
        named = sorted(digests - {None})
        if len(named) > 1:
            lines += [f"Warning: the rows of {environment} played different held-out task sets "
                      f"({', '.join(named)}); compare only rows that played the same.", ""]
        elif named and None in digests:
            lines += [f"Warning: some rows of {environment} were recorded before records named their held-out tasks; "
                      "check that they played the same split as the others.", ""]
    return lines


def precision_lines(records: list[dict], environments: list[str]) -> list[str]:
    """A warning for each column whose rows played their held-out episodes in different precisions."""
    lines = []
    for environment in environments:
        methods_by_precision: dict[str, set] = {}
        for record in records:
            if record["environment"] == environment and record["method"] != "random":  # no model, no precision
                methods_by_precision.setdefault(eval_precision(record), set()).add(record["method"])
        if len(methods_by_precision) > 1:
            parts = "; ".join(f"{precision}: " + ", ".join(f"`{m}`" for m in sorted(methods, key=METHODS.index))
                              for precision, methods in sorted(methods_by_precision.items()))
            lines += [f"Warning: the rows of {environment} played their held-out episodes in different precisions "
                      f"({parts}).", ""]
    return lines


def paired_lines(records: list[dict], environments: list[str]) -> list[str]:
    """Each RL method against the SFT start, and GiGPO against StarPO-S, episode by episode, where the records keep
    per-episode outcomes."""
    lines = []
    comparisons = [*((method, "sft") for method in RL_METHODS), ("gigpo", "starpo-s")]
    for environment in environments:
        for method, other in comparisons:
            test = paired(records, method, other, environment)
            if test is None:
                continue
            seeds = f"seed{'s' if len(test['seeds']) > 1 else ''} {', '.join(map(str, test['seeds']))}"
            other_name, other_short = ("the SFT start", "the start") if other == "sft" else (f"`{other}`",) * 2
            lines.append(f"- {environment}: `{method}` against {other_name}, episode by episode on the same tasks "
                         f"({test['episodes']} episodes, {seeds}): "
                         f"{test['alone']} solved by `{method}` alone, {test['other_alone']} by {other_short} alone; "
                         f"by task over the seeds, {test['tasks_gained']} gained and {test['tasks_lost']} lost "
                         f"(exact sign test p = {test['p']:.2g}).")
    return lines


def seeds_note(cell: dict, *rows: dict) -> str:
    """Which seeds a matched comparison used, where a row of the table pools more."""
    if all(row["seeds"] == cell["seeds"] for row in rows):
        return ""
    return f"; seed{'s' if len(cell['seeds']) > 1 else ''} {', '.join(map(str, cell['seeds']))}"


def lift_lines(records: list[dict], environments: list[str]) -> list[str]:
    """Which RL methods beat the SFT start by at least 10 points with the 95% interval of the lift above zero, and how
    GiGPO compares with StarPO-S; each comparison pools only the seeds both sides ran, paired by task where the
    records allow it (``statistics.lift``)."""
    table = cells(records)
    lines = []
    for environment in environments:
        if ("sft", environment) not in table or not any((m, environment) in table for m in RL_METHODS):
            continue
        lifted, unmatched = [], []
        for method in RL_METHODS:
            if (method, environment) not in table:
                continue
            gain = lift(records, method, "sft", environment)
            if gain is None:
                unmatched.append(f"`{method}`")
                continue
            if gain["difference"] >= 0.10 and gain["low"] > 0:
                note = seeds_note(gain, table[(method, environment)], table[("sft", environment)])
                lifted.append(f"`{method}` (+{percent(gain['difference'])} points, {interval_note(gain)}{note})")
        verdict = " and ".join(lifted) if lifted else "no method"
        unmatched_note = f" ({', '.join(unmatched)}: no seed in common with it)" if unmatched else ""
        lines.append(f"- {environment}: {verdict} {'lift' if len(lifted) > 1 else 'lifts'} success over the SFT "
                     f"start{unmatched_note} by at least 10 points with the 95% interval of the lift above zero.")
    for environment in environments:
        if ("gigpo", environment) not in table or ("starpo-s", environment) not in table:
            continue
        pair, gain = matched(records, "gigpo", "starpo-s", environment), lift(records, "gigpo", "starpo-s", environment)
        if pair is None:
            lines.append(f"- {environment}: `gigpo` and `starpo-s` have no seed in common, so are not compared.")
            continue
        gigpo, starpo_s = pair
        lines.append(f"- {environment}: `gigpo` {percent(gigpo['success'])}% against `starpo-s` "
                     f"{percent(starpo_s['success'])}% on the same budget ({interval_note(gain)}"
                     f"{seeds_note(gigpo, table[('gigpo', environment)], table[('starpo-s', environment)])}).")
    return lines


def comparison(folders: list[Path], environment: str, method: str) -> str:
    """``method``'s runs on ``environment`` in each records folder (an ablation's, a setting's) against the first
    folder's, paired by task over the seeds both ran (``statistics.lift`` and ``statistics.paired``)."""
    names = [display_path(folder) for folder in folders]
    # each folder's runs become a row of their own; the precision is kept, since records that predate naming it
    # are read by their method
    records = [{**record, "method": name, "held_out": {**record["held_out"], "precision": eval_precision(record)}}
               for folder, name in zip(folders, names) for record in load_records(folder)
               if record["environment"] == environment and record["method"] == method]
    table = cells(records)
    lines = [f"`{method}` on {environment}, each folder against `{names[0]}`:", "",
             "| records | held-out success | seeds | difference, paired by task | tasks up / down | sign test p |",
             "|---|---:|---|---|---:|---:|"]
    for name in names:
        cell = table.get((name, environment))
        if cell is None:
            lines.append(f"| `{name}` | — | — | | | |")
            continue
        rate = (f"{round(cell['success'] * cell['episodes'])}/{cell['episodes']} = {percent(cell['success'])}% "
                f"[{percent(cell['low'])}-{percent(cell['high'])}]{'*' if cell['unit'] == 'episode' else ''}")
        digests = {r["held_out"].get("tasks_sha256") for r in records if r["method"] in (name, names[0])}
        if name != names[0] and (None in digests or len(digests) > 1):  # another split, or one records did not name
            lines.append(f"| `{name}` | {rate} | {', '.join(map(str, cell['seeds']))} | not paired: other or unnamed "
                         "held-out tasks | | |")
            continue
        gain = lift(records, name, names[0], environment) if name != names[0] else None
        test = paired(records, name, names[0], environment) if name != names[0] else None
        if name != names[0] and gain is None:
            lines.append(f"| `{name}` | {rate} | {', '.join(map(str, cell['seeds']))} | no seed in common | | |")
            continue
        difference = "" if gain is None else f"{signed(gain['difference'])} points ({interval_note(gain)}" + (
            f"; seed{'s' if len(gain['seeds']) > 1 else ''} {', '.join(map(str, gain['seeds']))})")
        counts = "" if test is None else f"{test['tasks_gained']} / {test['tasks_lost']}"
        p_value = "" if test is None else f"{test['p']:.2g}"
        lines.append(f"| `{name}` | {rate} | {', '.join(map(str, cell['seeds']))} | {difference} | {counts} | "
                     f"{p_value} |")
    return "\n".join(lines)


def interval_note(gain: dict) -> str:
    """How a difference's evidence reads: its task-level interval, or whether the episode intervals overlap."""
    if gain["unit"] == "task":
        return (f"95% interval of the difference [{signed(gain['low'])}, {signed(gain['high'])}] points, paired by "
                "task")
    apart = gain["low"] > 0 or gain["high"] < 0
    return "episode intervals apart" if apart else "episode intervals overlap"


def signed(x: float) -> str:
    return f"{100 * x:+.0f}"


def rule_lines(records: list[dict]) -> list[str]:
    """Where a preset's runs applied a thinking-scale rule other than the one the preset applies now."""
    lines = []
    for method, current in PRESET_THINKING_SCALE_RULES.items():
        by_rule: dict[str, set[str]] = {}
        for r in (r for r in records if r["method"] == method):
            rule = recorded_rule(r)
            if rule is not None and rule != current:
                by_rule.setdefault(rule, set()).add(r["environment"])
        for rule, environments in sorted(by_rule.items()):
            lines.append(f"- `{method}` on {', '.join(sorted(environments))}: these runs applied thinking_scale_rule "
                         f"`{rule}`; the preset applies `{current}`.")
    return lines


def write_results(block: str, results_md: Path = RESULTS_MD) -> None:
    """Replace the generated block of docs/results.md (between its markers), leaving the rest as it is."""
    begin = "<!-- learning:begin (generated by benchmarks/learning.py --table) -->"
    end = "<!-- learning:end -->"
    text = results_md.read_text() if results_md.exists() else "# Results\n"
    if begin not in text or end not in text:
        text = text.rstrip() + f"\n\n{begin}\n{end}\n"
    head, rest = text.split(begin, 1)
    _, tail = rest.split(end, 1)
    results_md.write_text(f"{head}{begin}\n{block}\n{end}{tail}")


def display_path(folder: Path) -> str:
    """``folder`` relative to the repository when it lies inside it, so that a printed command can be rerun."""
    try:
        return str(folder.resolve().relative_to(ROOT))
    except ValueError:
        return str(folder.resolve())


def curves_link(environment: str, folder: Path | None = None) -> str:
    """Where docs/results.md finds an environment's curves: beside it for the main table, else in ``folder``."""
    name = f"learning_{environment}.png"
    if folder is None:
        return name
    shown = display_path(folder)
    return f"../{shown}/{name}" if not Path(shown).is_absolute() else f"{shown}/{name}"


def regenerate(records_dir: Path = RECORDS, results_md: Path = RESULTS_MD) -> str:
    """The table and curves from the records alone."""
    records = load_records(records_dir)
    for environment in COLUMNS:
        plot(records, environment, results_md.parent / f"learning_{environment}.png")
    block = markdown(records)
    write_results(block, results_md)
    return block


def folder_table(records_dir: Path) -> str:
    """Another records folder's table, returned for printing, with its curves written into that folder.

    docs/results.md is left alone: its generated section is the main table's.
    """
    records = load_records(records_dir)
    for environment in COLUMNS:
        plot(records, environment, records_dir / f"learning_{environment}.png")
    return markdown(records, records_dir)
