"""One StarPO training step whose full-vocabulary scoring would need gigabytes; prints the process's peak RSS.

A tiny Llama with a 65,536-token vocabulary plays 16 scripted episodes of 6 turns whose observations are long
(about 1,500 tokens a trajectory, one in ten of them the model's own), trained in micro-batches of 8. Projecting
every completion position through the LM head builds (4,096 x 32,768) fp32 tiles and their temporaries; projecting
the trained positions only needs a few MiB. Run by tests/test_memory.py in a fresh interpreter.
"""

import json
import resource
import sys
import tempfile

import torch
from conftest import ScriptedGenerator, build_tiny_tokenizer
from datasets import Dataset
from transformers import LlamaConfig, LlamaForCausalLM

from trl_starpo import StarPOConfig, StarPOTrainer
from trl_starpo.trajectory import MODEL_SEGMENTS

TURNS, VOCAB = 6, 65536


class LongObservationEnv:
    system_prompt = "Say inc until the episode ends."
    action_description = "inc"

    def reset(self, *, seed=None, options=None):
        self.turn = 0
        return self._observation(), {}

    def _observation(self):
        return f"Turn {self.turn}. " + "The counter is at 3. Say inc or dec. " * 24

    def step(self, action):
        self.turn += 1
        done = self.turn >= TURNS
        return self._observation(), float(done), done, False, {"action_valid": True}

    def close(self):
        pass


def main(model_dir: str) -> None:
    torch.manual_seed(0)
    tokenizer = build_tiny_tokenizer()
    config = LlamaConfig(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=4096,
                         pad_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id)
    LlamaForCausalLM(config).save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    args = StarPOConfig(output_dir=model_dir + "/out", num_generations=4, per_device_train_batch_size=8,
                        gradient_accumulation_steps=2, max_steps=1, max_turns=TURNS, max_tokens_per_turn=16,
                        max_context_length=4096, report_to="none", save_strategy="no", gradient_checkpointing=False,
                        disable_tqdm=True, seed=0)
    tasks = Dataset.from_list([{"task_id": f"t{i}", "seed": i} for i in range(4)])
    trainer = StarPOTrainer(model_dir, environment=LongObservationEnv, args=args, train_dataset=tasks)

    def collect(rows, groups):
        responses = {i: ["go</think><answer>inc</answer>"] * TURNS for i in range(len(rows))}
        generator = ScriptedGenerator(trainer._tokenizer, responses)
        return trainer.collector.collect([LongObservationEnv() for _ in rows], rows, generator, groups)

    trainer.collect_trajectories = collect
    trainer.train()
    batch = trainer.last_trajectories
    print(json.dumps({
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "tokens": sum(len(t.token_ids) for t in batch),
        "trained_tokens": sum(sum(1 for s in t.completion_segments if s in MODEL_SEGMENTS) for t in batch),
    }))


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(sys.argv[1] if len(sys.argv) > 1 else folder)
