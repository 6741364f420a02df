"""Environments written for other frameworks, as StarPO text environments.

- ``GymnasiumAdapter``: any ``gymnasium.Env``, given how to write its observations as text and read actions back.
- ``OpenEnvAdapter``: an OpenEnv environment server, through its WebSocket client (``pip install openenv-core``).
- ``TRLEnvironmentAdapter``: a class written for TRL's ``GRPOTrainer(environment_factory=...)``: its public methods
  are the tools, ``reset`` starts an episode and ``get_reward`` / reward functions score it.

Each adapter is one ``Environment``; ``StarPOTrainer`` takes a zero-argument factory of them (or an installed
package whose ``load_environment`` returns one). See docs/byo_environment.md.
"""

from .gymnasium_env import GymnasiumAdapter
from .openenv_env import OpenEnvAdapter
from .trl_env import TRLEnvironmentAdapter, from_environment_factory

__all__ = ["GymnasiumAdapter", "OpenEnvAdapter", "TRLEnvironmentAdapter", "from_environment_factory"]
