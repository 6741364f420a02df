"""An inference engine beside the trainer: does llama.cpp generate rollouts faster than the trainer's decode loop?

An inference engine beside the trainer would keep a second copy of the policy in llama.cpp, sample every rollout
there from token ids, and receive the weights after each update. This script measures what that would buy on this
machine, side by side in one run on ``benchmarks/rollout.py``'s workload (the same prompt, 40 new tokens and 60
observation tokens a turn, min_new_tokens holding back the end of turn):

- generated tokens/s of ``CachedTransformersGenerator`` (what the trainer uses: bf16 autocast, LoRA rank 16, frozen
  weights held in bf16) and of llama.cpp sampling the same policy from a GGUF of its merged weights (f16 and q8_0),
  each row a llama.cpp sequence whose KV cache is kept across turns, batched in one ``llama_decode`` per step;
- the weight sync an update would pay: merging the LoRA adapter, writing the GGUF, loading it;
- the log-prob gap: the same responses scored by each sampler (teacher-forced) against the policy in fp32; the
  exponential of the gap is the importance ratio a trainer would have to correct.

Needs ``pip install llama-cpp-python==0.3.36`` (it builds llama.cpp from source). Usage:
``python benchmarks/inference_engine.py`` (about 8 minutes on 2 CPU cores); ``--no-record`` prints only.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import gguf  # noqa: E402
import numpy as np  # noqa: E402
import torch  # noqa: E402
from rollout import Workload, load_policy, machine, publish, run_multi_turn, sampling_precision, \
    sokoban_prompt_and_observation  # noqa: E402
from transformers import (  # noqa: E402
    AutoTokenizer,
    GenerationConfig,
    LogitsProcessorList,
    MinNewTokensLengthLogitsProcessor,
)

from trl_starpo import resolve_model_path  # noqa: E402
from trl_starpo.rollout.generation import CachedTransformersGenerator, sample_by_inverse_cdf  # noqa: E402


@torch.no_grad()
def merged_weights(model) -> dict[str, torch.Tensor]:
    """The policy's weights under their plain transformers names, each LoRA adapter added into its base weight."""
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    weights, adapted = {}, []
    for name, module in base.named_modules():
        if any(name.startswith(prefix + ".") for prefix in adapted):
            continue
        if hasattr(module, "base_layer") and hasattr(module, "get_delta_weight"):
            adapted.append(name)
            weight = module.base_layer.weight.detach().float()
            for adapter in module.active_adapters:
                weight = weight + module.get_delta_weight(adapter).float()
            weights[f"{name}.weight"] = weight
            continue
        for parameter, value in module.named_parameters(recurse=False):
            weights[f"{name}.{parameter}"] = value.detach().float()
    return weights


def rotary_order(weight: np.ndarray, heads: int) -> np.ndarray:
    """Rows of a query or key projection reordered from transformers' rotary layout (halves) to llama.cpp's (pairs)."""
    rows = weight.shape[0]
    return weight.reshape(heads, 2, rows // heads // 2, -1).swapaxes(1, 2).reshape(weight.shape)


def write_gguf(model, tokenizer, path: Path, matrices: str) -> None:
    """A Llama-architecture policy as a GGUF file: 2-D weights in ``matrices`` ("f16" or "q8_0"), norms in f32, and
    the byte-level BPE vocabulary (llama.cpp is fed token ids, but will not load a model without one)."""
    config = model.config
    heads, kv_heads = config.num_attention_heads, config.num_key_value_heads
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_block_count(config.num_hidden_layers)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_dimension_count(getattr(config, "head_dim", None) or config.hidden_size // heads)
    writer.add_rope_freq_base(float(getattr(config, "rope_theta", None) or config.rope_parameters["rope_theta"]))
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_F16 if matrices == "f16" else gguf.LlamaFileType.MOSTLY_Q8_0)
    tokens = [f"[unused{i}]" for i in range(config.vocab_size)]
    types = [gguf.TokenType.UNUSED] * config.vocab_size
    for text, index in tokenizer.get_vocab().items():
        tokens[index], types[index] = text, gguf.TokenType.NORMAL
    for index, token in tokenizer.added_tokens_decoder.items():
        types[index] = gguf.TokenType.CONTROL if token.special else gguf.TokenType.USER_DEFINED
    merges = json.loads(tokenizer.backend_tokenizer.to_str())["model"]["merges"]
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_types(types)
    writer.add_token_merges([m if isinstance(m, str) else " ".join(m) for m in merges])
    writer.add_eos_token_id(tokenizer.eos_token_id)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, weight in merged_weights(model).items():
        if name == "lm_head.weight" and config.tie_word_embeddings:
            continue
        array = weight.numpy()
        if name.endswith("q_proj.weight"):
            array = rotary_order(array, heads)
        elif name.endswith("k_proj.weight"):
            array = rotary_order(array, kv_heads)
        target = names.get_name(name, try_suffixes=(".weight",))
        if array.ndim == 1:
            writer.add_tensor(target, array.astype(np.float32))
        elif matrices == "f16":
            writer.add_tensor(target, array.astype(np.float16))
        else:
            quantized = gguf.quants.quantize(array, gguf.GGMLQuantizationType.Q8_0)
            writer.add_tensor(target, quantized, raw_shape=quantized.shape, raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


class LlamaCppSampler:
    """A generation backend (``trl_starpo.rollout.generation``) over llama.cpp, for this measurement only: one
    sequence per trajectory, its KV cache kept across turns, all live rows decoded in one batch per step; the
    logits come back to torch and are sampled as the trainer samples (temperature and min_new_tokens only)."""

    def __init__(self, path: Path, *, rows: int, context: int, threads: int, eos_token_ids: list[int],
                 generation_config: GenerationConfig):
        import llama_cpp

        self.lib = lib = llama_cpp
        lib.llama_backend_init()
        model_params = lib.llama_model_default_params()
        model_params.use_extra_bufts = False  # the AMX buffers crash on quantized weights in this build
        self.model = lib.llama_model_load_from_file(str(path).encode(), model_params)
        params = lib.llama_context_default_params()
        params.n_ctx, params.n_seq_max, params.n_batch, params.n_ubatch = rows * context, rows, 1024, 512
        params.n_threads = params.n_threads_batch = threads
        params.kv_unified = False  # a shared cache makes every row attend over every row's slots
        params.flash_attn_type = 0
        self.context = lib.llama_init_from_model(self.model, params)
        self.memory = lib.llama_get_memory(self.context)
        self.vocab_size = lib.llama_vocab_n_tokens(lib.llama_model_get_vocab(self.model))
        self.batch = lib.llama_batch_init(1024, 0, 1)
        self.eos = set(eos_token_ids)
        self.config = generation_config
        self.reset()

    def close(self) -> None:
        self.lib.llama_batch_free(self.batch)
        self.lib.llama_free(self.context)
        self.lib.llama_model_free(self.model)

    def reset(self) -> None:
        self.lib.llama_memory_clear(self.memory, True)
        self.sequence: dict[int, int] = {}
        self.held: dict[int, list[int]] = {}
        self.last_logprobs: dict[int, list[float]] = {}

    def _decode(self, items: list[tuple[int, int, int, bool]]) -> torch.Tensor:
        """Feed (token, position, sequence, wants logits) items; returns the wanted logits, in order."""
        rows = []
        for start in range(0, len(items), 1024):
            chunk = items[start:start + 1024]
            self.batch.n_tokens = len(chunk)
            for i, (token, position, sequence, wanted) in enumerate(chunk):
                self.batch.token[i], self.batch.pos[i], self.batch.logits[i] = token, position, wanted
                self.batch.n_seq_id[i], self.batch.seq_id[i][0] = 1, sequence
            if self.lib.llama_decode(self.context, self.batch) != 0:
                raise RuntimeError("llama_decode failed")
            rows += [np.ctypeslib.as_array(self.lib.llama_get_logits_ith(self.context, i), shape=(self.vocab_size,))
                     .copy() for i, item in enumerate(chunk) if item[3]]
        return torch.from_numpy(np.stack(rows))

    def generate(self, contexts: dict[int, list[int]], max_new_tokens: int) -> dict[int, list[int]]:
        items = []
        for key, context in contexts.items():
            self.sequence.setdefault(key, len(self.sequence))
            held = self.held.get(key, [])
            kept = 0  # the cached tokens this context starts with (at least one token is fed, for its logits)
            while kept < min(len(held), len(context) - 1) and held[kept] == context[kept]:
                kept += 1
            self.lib.llama_memory_seq_rm(self.memory, self.sequence[key], kept, -1)
            items += [(context[position], position, self.sequence[key], position == len(context) - 1)
                      for position in range(kept, len(context))]
            self.held[key] = list(context)
        logits = self._decode(items)
        live, new, logprobs = list(contexts), {key: [] for key in contexts}, {key: [] for key in contexts}
        processors = LogitsProcessorList()
        if self.config.min_new_tokens:
            processors.append(MinNewTokensLengthLogitsProcessor(0, self.config.min_new_tokens, list(self.eos)))
        for step in range(max_new_tokens):
            scores = processors(torch.zeros((len(live), step), dtype=torch.long), logits / self.config.temperature)
            picks = sample_by_inverse_cdf(scores.softmax(dim=-1))
            picked = scores.log_softmax(dim=-1).gather(1, picks[:, None]).squeeze(1)
            for key, token, logprob in zip(live, picks.tolist(), picked.tolist()):
                new[key].append(token)
                logprobs[key].append(logprob)
            live = [key for key in live if new[key][-1] not in self.eos]
            if not live or step == max_new_tokens - 1:
                break
            items = [(new[key][-1], len(self.held[key]), self.sequence[key], True) for key in live]
            for key in live:
                self.held[key].append(new[key][-1])
            logits = self._decode(items)
        self.last_logprobs = logprobs
        return new


def sampler_logprobs(sampler, prompt: list[int], response: list[int]) -> torch.Tensor:
    """Log-probs (temperature 1) a sampler gives ``response`` after ``prompt``, teacher-forced."""
    ids = prompt + response
    if isinstance(sampler, LlamaCppSampler):
        sampler.reset()
        logits = sampler._decode([(token, position, 0, position >= len(prompt) - 1)
                                  for position, token in enumerate(ids[:-1])])
    else:
        logits = sampler(input_ids=torch.tensor([ids])).logits[0, len(prompt) - 1:-1].float()
    return logits.log_softmax(dim=-1).gather(1, torch.tensor(response)[:, None]).squeeze(1)


def logprob_gaps(model, engines: dict, prompt: list[int], eos: list[int], rows: int, new_tokens: int) -> dict:
    """Sample ``rows`` responses from the policy in fp32 at temperature 1; score them with the trainer's bf16
    forward and with each engine, and compare each with the fp32 log-probs."""
    torch.manual_seed(0)
    generator = CachedTransformersGenerator(model, pad_token_id=eos[0], eos_token_ids=eos,
                                            generation_config=GenerationConfig(do_sample=True, temperature=1.0))
    with torch.no_grad():
        responses = list(generator.generate({row: list(prompt) for row in range(rows)}, new_tokens).values())
        reference = [sampler_logprobs(model, prompt, response) for response in responses]
        scored = {}
        with sampling_precision(model, "bf16"):
            scored["trainer (torch, bf16)"] = [sampler_logprobs(model, prompt, response) for response in responses]
        for name, engine in engines.items():
            scored[name] = [sampler_logprobs(engine, prompt, response) for response in responses]
    gaps = {}
    for name, logprobs in scored.items():
        gap = torch.cat([a - b for a, b in zip(reference, logprobs)])
        ratio = gap.exp()
        gaps[name] = {"tokens": len(gap), "mean_abs": gap.abs().mean().item(), "max_abs": gap.abs().max().item(),
                      "ratio_outside_0.8_1.25": ((ratio < 0.8) | (ratio > 1.25)).float().mean().item()}
    return gaps


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batch-sizes", type=int, nargs="*", default=[4, 8, 16])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--gap-rows", type=int, default=32, help="Responses of up to 64 tokens scored for the gap.")
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--no-record", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    path = resolve_model_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = load_policy(path, 16)
    with torch.no_grad():  # a trained adapter, not a fresh one (whose B matrices are zero)
        for name, parameter in model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.01)
    prompt, observation = sokoban_prompt_and_observation(tokenizer, 60)
    eos = [tokenizer.eos_token_id]
    folder = Path(tempfile.mkdtemp(prefix="engine-"))
    sync = {}
    for matrices in ("f16", "q8_0"):
        start = time.perf_counter()
        write_gguf(model, tokenizer, folder / f"{matrices}.gguf", matrices)
        sync[matrices] = {"merge_and_write_s": time.perf_counter() - start,
                          "file_mb": (folder / f"{matrices}.gguf").stat().st_size / 1e6}
    rows = []
    for size in args.batch_sizes:
        workload = Workload(size, 5, 40, 60)
        config = GenerationConfig(do_sample=True, temperature=1.0, min_new_tokens=40)
        cached = CachedTransformersGenerator(model, pad_token_id=tokenizer.pad_token_id, eos_token_ids=eos,
                                             generation_config=config)
        engines = {}
        for matrices in ("f16", "q8_0"):
            start = time.perf_counter()
            engines[matrices] = LlamaCppSampler(folder / f"{matrices}.gguf", rows=size, context=1024,
                                                threads=args.threads, eos_token_ids=eos, generation_config=config)
            sync[matrices].setdefault("load_s", time.perf_counter() - start)  # at the first batch size
        paths = {"trainer (torch, bf16)": cached, **{f"llama.cpp {m}": e for m, e in engines.items()}}
        seconds = {name: [] for name in paths}
        for name, generator in paths.items():  # warm-up
            with sampling_precision(model, "bf16"):
                run_multi_turn(generator, prompt, observation, Workload(size, 2, 4, 60))
        names = list(paths)
        for repeat in range(args.repeats):  # the order rotates, so no sampler always runs first
            for name in names[repeat % len(names):] + names[:repeat % len(names)]:
                generator = paths[name]
                torch.manual_seed(repeat)
                with sampling_precision(model, "bf16"):
                    start = time.perf_counter()
                    run_multi_turn(generator, prompt, observation, workload)
                    seconds[name].append(time.perf_counter() - start)
                print(f"  batch {size} repeat {repeat + 1} {name}: {seconds[name][-1]:.1f} s", flush=True)
        for name in paths:
            median = statistics.median(seconds[name])
            rows.append((size, name, median, workload.generated_tokens / median, min(seconds[name]),
                         max(seconds[name])))
        for engine in engines.values():
            engine.close()

    plain = GenerationConfig(do_sample=True, temperature=1.0)
    scorers = {f"llama.cpp {m}": LlamaCppSampler(folder / f"{m}.gguf", rows=1, context=1024, threads=args.threads,
                                                 eos_token_ids=eos, generation_config=plain) for m in ("f16", "q8_0")}
    gaps = logprob_gaps(model, scorers, prompt, eos, args.gap_rows, 64)
    for scorer in scorers.values():
        scorer.close()

    baseline = {size: tps for size, name, _, tps, *_ in rows if name.startswith("trainer")}
    report = [
        f"### {datetime.date.today().isoformat()}: llama.cpp beside the trainer (inference_engine.py)",
        "",
        f"{machine()}; llama-cpp-python 0.3.36. SmolLM2-135M-Instruct with a LoRA adapter of rank 16 on every "
        f"projection; {len(prompt)}-token prompt, 5 turns of 40 new tokens and 60 observation tokens; "
        f"medians of {args.repeats} interleaved repeats (their order rotating), with the range.",
        "",
        "| batch | sampler | seconds | range | generated tokens/s | / trainer's |",
        "|---:|---|---:|---|---:|---:|",
        *[f"| {size} | {name} | {median:.1f} | {low:.1f}-{high:.1f} | {tps:.1f} | {tps / baseline[size]:.2f} |"
          for size, name, median, tps, low, high in rows],
        "",
        f"Weight sync an update would pay (merge the adapter, write the GGUF, load it with a context for "
        f"{args.batch_sizes[0]} rows): "
        + "; ".join(f"{m}: {s['merge_and_write_s']:.1f} s to write {s['file_mb']:.0f} MB, {s['load_s']:.1f} s to "
                    f"load" for m, s in sync.items()) + ".",
        "",
        f"Log-prob gap on {args.gap_rows} responses of up to 64 tokens, sampled from the policy in fp32 at temperature "
        "1 and scored by each sampler (the fp32 log-prob minus the sampler's):",
        "",
        "| sampler | tokens | mean abs gap | max abs gap | importance ratio outside [0.8, 1.25] |",
        "|---|---:|---:|---:|---:|",
        *[f"| {name} | {g['tokens']} | {g['mean_abs']:.4f} | {g['max_abs']:.3f} | {g['ratio_outside_0.8_1.25']:.1%} |"
          for name, g in gaps.items()],
    ]
    publish("\n".join(report), record=not args.no_record)


if __name__ == "__main__":
    main()
