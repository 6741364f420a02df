"""Train two StarPO steps on the counter environment, reporting to the backend named on the command line.

    python tests/report_to_run.py MODEL_DIR OUTPUT_DIR BACKEND
"""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from conftest import CounterEnv  # noqa: E402
from test_trainer import counter_tasks, make_args  # noqa: E402

from trl_starpo import StarPOTrainer  # noqa: E402

model_dir, output_dir, backend = sys.argv[1:4]
args = make_args(output_dir, max_steps=2, max_turns=2, report_to=backend, run_name="starpo-report-test",
                 project="trl-starpo-tests")
trainer = StarPOTrainer(model_dir, environment=CounterEnv, args=args, train_dataset=counter_tasks())
trainer.train()
print("trained", trainer.state.global_step)
