"""Warm start for StarPO on MiniGrid: supervised fine-tuning on the scripted planner's episodes, with the thinking
it writes from what the agent sees (TRL's SFTTrainer).

    accelerate launch recipes/minigrid_sft.py --config recipes/configs/minigrid_sft.yaml

The expert plays train layouts through the rollout collector with the same prompt and format as the StarPO run that
follows: each turn it thinks, naming only what the agent can see (the next thing its plan acts on, where it lies
when in view, the moves to it), and answers up to 3 actions. This built recipes/warm_starts/minigrid, where
recipes/configs/minigrid.yaml starts; `--warm_start outputs/minigrid-sft/adapter` starts it from your build. The
pipeline is `trl_starpo.recipes.run_sft`; every ExpertSFTConfig / ModelConfig field is a flag or a YAML key.
"""

import sys
from pathlib import Path

# Python puts this script's folder first on the import path, where alfworld.py and minigrid.py would shadow the
# packages of those names.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from trl_starpo.recipes import run_sft  # noqa: E402

if __name__ == "__main__":
    run_sft(environment="minigrid")
