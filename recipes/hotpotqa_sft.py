"""Warm start for StarPO on HotPotQA: supervised fine-tuning on the scripted ReAct expert's episodes (TRL's
SFTTrainer).

    accelerate launch recipes/hotpotqa_sft.py --config recipes/configs/hotpotqa_sft.yaml

The expert plays train questions through the rollout collector with the same prompt and format as the StarPO run
that follows (answer-only turns: it searches the question's entity, follows the page its paragraph names and
finishes with the answer). The pipeline is `trl_starpo.recipes.run_sft`; every ExpertSFTConfig / ModelConfig field is
a flag or a YAML key.
"""

import sys
from pathlib import Path

# Python puts this script's folder first on the import path, where alfworld.py and minigrid.py would shadow the
# packages of those names.
sys.path = [entry for entry in sys.path if Path(entry or ".").resolve() != Path(__file__).resolve().parent]

from trl_starpo.recipes import run_sft  # noqa: E402

if __name__ == "__main__":
    run_sft(environment="hotpotqa")
