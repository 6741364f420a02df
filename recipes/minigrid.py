r"""StarPO on MiniGrid / BabyAI (minigrid engine, BabyAI-Text observations, ten small levels).

    accelerate launch recipes/minigrid.py --config recipes/configs/minigrid.yaml
    accelerate launch --config_file recipes/accelerate_configs/multi_gpu.yaml --num_processes 2 \
        recipes/minigrid.py --config recipes/configs/minigrid.yaml
    accelerate launch recipes/minigrid.py --config recipes/configs/minigrid.yaml \
        --model_name_or_path Qwen/Qwen2.5-0.5B-Instruct --warm_start ''

It starts from the shipped warm start, recipes/warm_starts/minigrid (built by recipes/minigrid_sft.py), and thinks
in 96-token turns as that warm start does; another model starts from scratch (`--warm_start ''`). The pipeline is
`trl_starpo.recipes.run`; every StarPOConfig / ModelConfig field is a flag or a YAML key.
"""

import sys
from pathlib import Path

# Python puts this script's folder first on the import path, where alfworld.py and minigrid.py would shadow the
# packages of those names.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from trl_starpo.recipes import run  # noqa: E402

if __name__ == "__main__":
    run(environment="minigrid")
