"""What this machine can do at best, measured in the same run as the figures compared with it."""

from __future__ import annotations

import time

import torch


def matmul_peak(dtype: torch.dtype, size: int = 2048, repeats: int = 8) -> float:
    """GFLOP/s of a large square GEMM in ``dtype``: the best of three timings of ``repeats`` products."""
    a, b = torch.randn(size, size, dtype=dtype), torch.randn(size, size, dtype=dtype)
    a @ b
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(repeats):
            a @ b
        best = min(best, (time.perf_counter() - start) / repeats)
    return 2 * size**3 / best / 1e9


def memory_bandwidth(megabytes: int = 512, repeats: int = 4) -> float:
    """GB/s of a large tensor copy (bytes read plus bytes written): the best of ``repeats`` copies."""
    source = torch.ones(megabytes * 2**20 // 4)
    target = torch.empty_like(source)
    target.copy_(source)
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        target.copy_(source)
        best = min(best, time.perf_counter() - start)
    return 2 * source.numel() * 4 / best / 1e9
