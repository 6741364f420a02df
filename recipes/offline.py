"""Offline StarPO: train on logged trajectories with no environment.

    python recipes/offline.py --trajectories outputs/sokoban-starpo/trajectories \
        --model_name_or_path HuggingFaceTB/SmolLM2-135M-Instruct --output_dir outputs/sokoban-offline \
        --num_generations 4 --per_device_train_batch_size 8 --max_steps 20 --learning_rate 1e-5
    accelerate launch recipes/offline.py --trajectories user/sokoban-agent-trajectories ...

Advantages come from the stored returns (group-relative within each logged group, which must hold
num_generations trajectories); the clipped objective weighs each token against its logged sampling log-prob.
The model must use the tokenizer the trajectories were logged with. The pipeline is
`trl_starpo.recipes.run_offline`; every StarPOConfig / ModelConfig field is a flag or a YAML key.
"""

import sys
from pathlib import Path

# Python puts this script's folder first on the import path, where alfworld.py and minigrid.py would shadow the
# packages of those names.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from trl_starpo.recipes import run_offline  # noqa: E402

if __name__ == "__main__":
    run_offline()
