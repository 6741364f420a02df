"""The cached generator's decode steps with torch's SDPA against ``rollout.attention.grouped_decode_attention``.

The rollout of ``benchmarks/rollout.py`` (``CachedTransformersGenerator`` on SmolLM2-135M-Instruct with a LoRA adapter
of rank 16 on every projection, under bf16 autocast with the frozen weights held in bf16, as the trainer samples),
at batch ``--batch`` after contexts of each ``--context-tokens`` length: one call prefills the contexts and decodes
the first turn, then each later turn appends ``--observation-tokens`` tokens and decodes ``--new-tokens`` more. The
later turns are what is timed (the steady state of a multi-turn episode; the first prefill is the same for both arms),
both arms interleaved, ``--repeats`` times. *sdpa* is the generator with transformers' SDPA for every step (what it
used before the grouped decode attention); *grouped* is the generator as shipped. Alongside, each arm's greedy
log-probs against a float32 run without autocast, on the same tokens: how far each sampling distribution is from the
exact one.

Usage: ``python benchmarks/decode_attention.py`` (about 10 minutes on 2 CPU cores); ``--no-record`` to only print.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")

import torch  # noqa: E402
from provenance import provenance  # noqa: E402
from rollout import load_policy, machine, publish, sampling_precision  # noqa: E402
from transformers import GenerationConfig  # noqa: E402

import trl_starpo.rollout.generation as generation  # noqa: E402
from trl_starpo import resolve_model_path  # noqa: E402

RECORDS = Path(__file__).with_name("decode_attention_runs")
ARMS = ("sdpa", "grouped")


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--context-tokens", type=int, nargs="+", default=[512, 2048])
    parser.add_argument("--batch", type=int, default=8, help="Rows decoded together (ALFWorld's rollout batch: 8).")
    parser.add_argument("--turns", type=int, default=3, help="Turns timed after the first.")
    parser.add_argument("--new-tokens", type=int, default=32)
    parser.add_argument("--observation-tokens", type=int, default=60)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--no-record", action="store_true")
    return parser.parse_args(argv)


ATTENTION = generation.decode_attention


def attention_of(arm: str):
    """The generator's attention switch for ``arm``: SDPA throughout, or the grouped decode attention."""
    return (lambda model: nullcontext()) if arm == "sdpa" else ATTENTION


def later_turns_seconds(model, contexts: dict, observation: list[int], args, arm: str) -> float:
    generation.decode_attention = attention_of(arm)
    config = GenerationConfig(do_sample=True, min_new_tokens=args.new_tokens)
    generator = generation.CachedTransformersGenerator(model, pad_token_id=0, eos_token_ids=[2],
                                                       generation_config=config)
    torch.manual_seed(0)
    responses = generator.generate(contexts, args.new_tokens)  # the prefill: not timed
    start = time.perf_counter()
    for _ in range(args.turns):
        contexts = {row: contexts[row] + responses[row] + observation for row in contexts}
        responses = generator.generate(contexts, args.new_tokens)
    return time.perf_counter() - start


def greedy_logprobs(model, context: list[int], tokens: int, arm: str, precision: str) -> tuple[list[int], list[float]]:
    generation.decode_attention = attention_of(arm)
    generator = generation.CachedTransformersGenerator(model, pad_token_id=0, eos_token_ids=[2],
                                                       generation_config=GenerationConfig(do_sample=False))
    with sampling_precision(model, precision):
        response = generator.generate({0: context}, tokens)
    return response[0], generator.last_logprobs[0]


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    model = load_policy(resolve_model_path(), lora_r=16)
    rng = torch.Generator().manual_seed(0)
    observation = torch.randint(100, 40_000, (args.observation_tokens,), generator=rng).tolist()
    rows = []
    for length in args.context_tokens:
        contexts = {row: torch.randint(100, 40_000, (length,), generator=rng).tolist() for row in range(args.batch)}
        seconds = {arm: [] for arm in ARMS}
        with sampling_precision(model, "bf16"):
            for _ in range(args.repeats):
                for arm in ARMS:
                    seconds[arm].append(later_turns_seconds(model, contexts, observation, args, arm))
        exact_tokens, exact = greedy_logprobs(model, contexts[0], 16, "sdpa", "fp32")
        gaps = {}
        for arm in ARMS:
            tokens, logprobs = greedy_logprobs(model, contexts[0], 16, arm, "bf16")
            shared = next((i for i, (a, b) in enumerate(zip(tokens, exact_tokens)) if a != b), len(tokens))
            gaps[arm] = max((abs(a - b) for a, b in zip(logprobs[: shared + 1], exact[: shared + 1])), default=0.0)
        medians = {arm: statistics.median(values) for arm, values in seconds.items()}
        rows.append({"context_tokens": length, "seconds": seconds, "median": medians,
                     "speedup": medians["sdpa"] / medians["grouped"], "logprob_gap_vs_fp32": gaps})
        print(json.dumps(rows[-1]), flush=True)
    generation.decode_attention = ATTENTION
    steps = args.turns * args.new_tokens
    lines = [
        f"### {datetime.date.today().isoformat()}: decode-step attention, SDPA against grouped (decode_attention.py)",
        "",
        f"{machine()}. {args.batch} rows, then {args.turns} turns of {args.observation_tokens} appended and "
        f"{args.new_tokens} decoded tokens each, timed; medians of {args.repeats} interleaved repeats.",
        "",
        "| context tokens | sdpa: s | grouped: s | sdpa / grouped | grouped: ms a decoded token step (observations "
        "included) | largest greedy log-prob gap to fp32: sdpa | grouped |",
        "|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for row in rows:
        m, gap = row["median"], row["logprob_gap_vs_fp32"]
        lines.append(f"| {row['context_tokens']} | {m['sdpa']:.1f} | {m['grouped']:.1f} | {row['speedup']:.2f} | "
                     f"{1000 * m['grouped'] / steps:.0f} | {gap['sdpa']:.3f} | {gap['grouped']:.3f} |")
    publish("\n".join(lines), record=not args.no_record)
    if not args.no_record:
        RECORDS.mkdir(exist_ok=True)
        record = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "machine": machine(),
                  "args": vars(args), "rows": rows, **provenance()}
        path = RECORDS / f"{datetime.datetime.now():%Y-%m-%d-%H%M}.json"
        path.write_text(json.dumps(record, indent=1) + "\n")
        print(f"record: {path}")


if __name__ == "__main__":
    sys.exit(main())
