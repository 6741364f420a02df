"""trl_starpo.memory: freed host memory handed back to the system between the phases of an update."""

import os
import platform
import sys

import pytest

from trl_starpo import memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_heap_pages_go_back_to_the_system():
    def resident_mib():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20

    memory._malloc_trim.cache_clear()
    blocks = [bytearray(100_000) for _ in range(3_000)]  # ~300 MB of heap blocks (below the mmap threshold)
    for block in blocks:
        block[::4096] = b"x" * len(block[::4096])  # touched, so resident
    keep = blocks[-1]
    del blocks  # freed, but the last block keeps the heap from shrinking from its top
    before = resident_mib()
    assert memory.release_free_memory() is True
    assert resident_mib() < before - 200
    assert len(keep) == 100_000


def test_without_glibc_there_is_nothing_to_ask(monkeypatch):
    memory._malloc_trim.cache_clear()
    monkeypatch.setattr(sys, "platform", "darwin")
    try:
        assert memory.release_free_memory() is False
    finally:
        memory._malloc_trim.cache_clear()


def test_the_trainer_hands_memory_back_after_each_rollout_and_each_update(tmp_path, tiny_agent_dir, monkeypatch):
    from conftest import CounterEnv
    from datasets import Dataset

    import trl_starpo.trainer
    from trl_starpo import StarPOConfig, StarPOTrainer

    calls = []
    monkeypatch.setattr(trl_starpo.trainer, "release_free_memory", lambda: calls.append("rollout"))
    monkeypatch.setattr(memory, "release_free_memory", lambda: calls.append("update"))
    args = StarPOConfig(output_dir=str(tmp_path), max_steps=2, num_generations=2, per_device_train_batch_size=2,
                        gradient_accumulation_steps=1, max_turns=2, max_tokens_per_turn=8, max_context_length=256,
                        logging_steps=1, save_strategy="no", report_to="none", gradient_checkpointing=False, seed=0)
    tasks = Dataset.from_list([{"task_id": f"t{i}", "seed": i, "start": 0, "target": 2} for i in range(4)])
    trainer = StarPOTrainer(tiny_agent_dir, environment=CounterEnv, args=args, train_dataset=tasks)
    trainer.train()
    assert calls == ["rollout", "update"] * 2
