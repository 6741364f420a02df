"""Warm start for StarPO on ALFWorld: supervised fine-tuning on the planner expert's episodes (TRL's SFTTrainer).

    accelerate launch recipes/alfworld_sft.py --config recipes/configs/alfworld_sft.yaml
    accelerate launch recipes/alfworld.py --config recipes/configs/alfworld.yaml --model_name_or_path outputs/alfworld-sft

The expert plays the train games through the rollout collector with the same prompt and format as StarPO: its
commands are the planner's, its thinking names only what the agent has observed (``Task: ... I need a bread; I
have not seen one to take. Try garbagecan 1.``). The pipeline is
`trl_starpo.recipes.run_sft`; every ExpertSFTConfig / ModelConfig field is a flag or a YAML key.
"""

import sys
from pathlib import Path

# Python puts this script's folder first on the import path, where alfworld.py and minigrid.py would shadow the
# packages of those names.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from trl_starpo.recipes import run_sft  # noqa: E402

if __name__ == "__main__":
    run_sft(environment="alfworld")
