"""Trajectory DPO (ETO): rounds of collect, pair and train with TRL's DPO loss, from the SFT warm start.

    accelerate launch --num_processes 1 recipes/dpo.py --config recipes/configs/dpo.yaml
    accelerate launch --num_processes 1 recipes/dpo.py --config recipes/configs/dpo.yaml \
        --trajectories outputs/alfworld-starpo/trajectories      # offline: one training on logged trajectories

Each round plays tasks_per_round training tasks num_generations times with the current policy, pairs the best and
the worst episode of each task (when their returns differ; with --pairs expert, ETO's, each episode against the
expert's episode of its task), and trains on the pairs with DPO against the round's starting policy; only the
model's own tokens enter the log-ratios. The pipeline is `trl_starpo.recipes.run_dpo`;
every TrajectoryDPOConfig / ModelConfig field is a flag or a YAML key.
"""

import sys
from pathlib import Path

# Python puts this script's folder first on the import path, where alfworld.py and minigrid.py would shadow the
# packages of those names.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from trl_starpo.recipes import run_dpo  # noqa: E402

if __name__ == "__main__":
    run_dpo()
