"""trl_starpo: StarPO and StarPO-S, multi-turn trajectory-level RL for LLM agents, on top of TRL."""

import os
from importlib import import_module
from typing import TYPE_CHECKING

from .envs import Environment, list_environments, load_environment, load_tasks

# On a GPU, transformers swaps layers (rotary embeddings, ...) for kernels it fetches from the Hub: code from the Hub
# run without trust_remote_code, a download at run time, and an error offline (seen on an H200). USE_HUB_KERNELS=YES
# allows them.
os.environ.setdefault("USE_HUB_KERNELS", "NO")

__version__ = "0.1.0"

# Heavy modules (torch, transformers, trl) load on first use, so `trl-starpo envs` and the environment packages
# stay fast to import.
_LAZY = {
    "StarPOConfig": "trl_starpo.config",
    "StarPOTrainer": "trl_starpo.trainer",
    "Trajectory": "trl_starpo.trajectory",
    "Segment": "trl_starpo.trajectory",
    "RolloutCollector": "trl_starpo.rollout.collector",
    "load_default_model": "trl_starpo.models",
    "resolve_model_path": "trl_starpo.models",
    "PRESETS": "trl_starpo.presets",
    "TrajectoryStore": "trl_starpo.store",
    "OfflineStarPOTrainer": "trl_starpo.offline",
    "evaluate": "trl_starpo.evaluation",
    "make_policy": "trl_starpo.evaluation",
    "EchoTrapCallback": "trl_starpo.monitor",
    "add_echo_trap_monitor": "trl_starpo.monitor",
    "TrajectoryDPOConfig": "trl_starpo.dpo",
    "TrajectoryDPOTrainer": "trl_starpo.dpo",
    "preference_pairs": "trl_starpo.dpo",
}

__all__ = ["Environment", "list_environments", "load_environment", "load_tasks", *_LAZY]

if TYPE_CHECKING:
    from .config import StarPOConfig
    from .dpo import TrajectoryDPOConfig, TrajectoryDPOTrainer, preference_pairs
    from .evaluation import evaluate, make_policy
    from .models import load_default_model, resolve_model_path
    from .monitor import EchoTrapCallback, add_echo_trap_monitor
    from .offline import OfflineStarPOTrainer
    from .presets import PRESETS
    from .store import TrajectoryStore
    from .rollout.collector import RolloutCollector
    from .trainer import StarPOTrainer
    from .trajectory import Segment, Trajectory


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'trl_starpo' has no attribute {name!r}")
