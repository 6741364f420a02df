"""Success rates of the planner expert and of a random agent on the shipped validation splits (for the README).

    python environments/alfworld/scripts/baselines.py --episodes 60 --random-steps 30
    python environments/alfworld/scripts/baselines.py --policies random --random-steps 50

Both play through ``trl_starpo.evaluation`` (``ExpertPolicy``: ``env.expert_action()``; ``RandomPolicy``: a uniform
draw from ``env.admissible_actions()``), one command a turn.
"""

import argparse
import json

from trl_starpo.evaluation import ExpertPolicy, RandomPolicy, evaluate
from trl_starpo.rollout.settings import RolloutSettings
from starpo_alfworld import load_tasks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--episodes", type=int, default=60)
    parser.add_argument("--expert-steps", type=int, default=50)
    parser.add_argument("--random-steps", type=int, default=30)
    parser.add_argument("--splits", nargs="+", default=["valid_seen", "valid_unseen"])
    parser.add_argument("--policies", nargs="+", choices=["expert", "random"], default=["expert", "random"])
    args = parser.parse_args()
    for split in args.splits:
        tasks = load_tasks(split)
        runs = ((ExpertPolicy, args.expert_steps), (RandomPolicy, args.random_steps))
        for policy, steps in [run for run in runs if run[0].name in args.policies]:
            settings = RolloutSettings(max_turns=steps, max_actions_per_turn=1, max_actions_per_trajectory=steps)
            result = evaluate(policy(settings, seed=0), "alfworld", tasks, args.episodes, split=split,
                              environment_kwargs={"max_steps": steps}, batch_size=1)
            row = {"split": split, "policy": policy.name, "max_steps": steps, "episodes": result.episodes,
                   "success": result.stats["success"], "success_low": result.stats["success_low"],
                   "success_high": result.stats["success_high"]}
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
