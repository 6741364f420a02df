"""Handing the host memory that PyTorch has freed back to the system, between the phases of an update.

PyTorch returns a freed CPU tensor to the C allocator. glibc serves allocations below its mmap threshold from its heap,
and the threshold rises with the largest block freed so far (up to 32 MB), so a training run's activations, logits and
KV caches end up in the heap; once freed, their pages stay resident, and the heap keeps the high-water mark of every
phase it has served. ``malloc_trim`` gives those free pages back. A lower mmap threshold would too, at the cost of
mapping and faulting in every large tensor again (a decode step's logits among them).
"""

from __future__ import annotations

import ctypes
import sys
from functools import lru_cache

from transformers import TrainerCallback


@lru_cache(maxsize=1)
def _malloc_trim():
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc
        return None
    trim = getattr(libc, "malloc_trim", None)
    if trim is not None:
        trim.argtypes, trim.restype = [ctypes.c_size_t], ctypes.c_int
    return trim


def release_free_memory() -> bool:
    """Give the pages the C allocator holds free back to the system (glibc's ``malloc_trim``); returns whether
    there was such an allocator to ask (False on macOS, Windows and C libraries without it; with jemalloc or tcmalloc
    preloaded it trims glibc's own, unused heap)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class ReleaseFreeMemory(TrainerCallback):
    """Hands freed host memory back after every optimizer step, once its micro-steps' activations are gone."""

    def on_step_end(self, args, state, control, **kwargs):
        release_free_memory()
