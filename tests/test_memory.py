"""trl_starpo.memory: freed host memory handed back to the system between the phases of an update."""

import platform
import sys

import pytest

from trl_starpo import memory


@pytest.mark.skipif(not sys.platform.startswith("linux") or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_freed_heap_pages_go_back_to_the_system():
    def resident_mib():
        with open("/proc/self/statm") as statm:
            return int(statm.read().split()[1]) * 4096 / 2**20

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
