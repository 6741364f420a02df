"""StarPO on ALFWorld (ALFWorld's own engine; offline, generated games in ALFWorld's format over ALFRED's scenes).

    accelerate launch recipes/alfworld.py --config recipes/configs/alfworld.yaml
    accelerate launch --multi_gpu --num_processes 2 recipes/alfworld.py --config recipes/configs/alfworld.yaml
    accelerate launch recipes/alfworld.py --config recipes/configs/alfworld.yaml --tasks official  # $ALFWORLD_DATA

The pipeline is `trl_starpo.recipes.run`; every StarPOConfig / ModelConfig field is a flag or a YAML key.
"""

from trl_starpo.recipes import run

if __name__ == "__main__":
    run(environment="alfworld")
