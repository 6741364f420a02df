"""Where a benchmark's figure came from: the commit, and where the working tree differs from it, what differs.

A record made from a dirty tree names every changed path (untracked files included, ignored ones not) and a SHA-256
of the difference (``git diff HEAD`` plus each untracked file's path and bytes), so that two records made from the same
uncommitted state can be told apart from two that only share a commit.
"""

from __future__ import annotations

import hashlib
import os
import platform
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str, root: Path) -> bytes:
    return subprocess.run(["git", *args], cwd=root, capture_output=True, check=False).stdout


def provenance(root: Path = ROOT) -> dict:
    """``{"commit": ..., "dirty": [changed paths]}``, with ``"diff_sha256"`` when the tree differs from HEAD."""
    commit = _git("rev-parse", "HEAD", root=root).decode().strip() or "unknown"
    changed = [line[3:] for line in _git("status", "--porcelain", root=root).decode().splitlines()]
    if not changed:
        return {"commit": commit, "dirty": []}
    digest = hashlib.sha256(_git("diff", "HEAD", "--binary", root=root))
    untracked = _git("ls-files", "--others", "--exclude-standard", "-z", root=root).split(b"\0")
    for name in sorted(path for path in untracked if path):
        path = root / name.decode()
        if path.is_file():
            digest.update(b"\0" + name + b"\0" + path.read_bytes())
    return {"commit": commit, "dirty": changed, "diff_sha256": digest.hexdigest()}


def describe(record: dict) -> str:
    """One line for a figure's caption: the short commit, and how the tree differed."""
    commit = str(record.get("commit", "unknown"))[:10]
    dirty = record.get("dirty")
    if not dirty:
        return f"commit {commit}"
    if isinstance(dirty, list):
        return f"commit {commit} with {len(dirty)} changed paths (diff {record.get('diff_sha256', '?')[:12]})"
    return f"commit {commit} with local changes"


def cpus() -> str:
    """The machine's CPUs for a record: how many, the architecture, the model and whether it has AMX's bf16 tiles
    (``2 CPUs (x86_64, AMD EPYC)``, ``2 CPUs (x86_64, Intel(R) Xeon(R) Processor, AMX bf16)``).

    The model matters as much as the count: without AMX's bf16 tiles a forward pass takes about twice as long, and a
    model name such as "Intel(R) Xeon(R) Processor" does not say whether it has them."""
    model, flags = None, []
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():  # the first CPU's lines
            if line.startswith("model name") and model is None:
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line.split(":", 1)[1].split()
    except OSError:
        pass
    model = model or platform.processor() or platform.machine()
    return f"{os.cpu_count()} CPUs ({platform.machine()}, {model}{', AMX bf16' if 'amx_bf16' in flags else ''})"
