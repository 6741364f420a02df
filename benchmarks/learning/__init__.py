r"""Success Rate Comparison at CPU scale: does RL lift an SFT-warm-started agent on held-out tasks?

The specification's table (`shared/reference/starpo-spec.txt`, "Success Rate Comparison") compares PPO, DPO, StarPO and
StarPO-S on ALFWorld, WebShop, HotPotQA and MiniGrid. This script makes that comparison with the embedded
SmolLM2-135M-Instruct on a CPU (or a GPU where there is one; each record names its machine), each (method,
environment, seed) run its own resumable process (several side by side with ``--jobs``), and regenerates the table of
docs/results.md from the run records it commits.

Protocol (``COLUMNS`` and ``Scale`` below hold every number)
    Rows: ``random`` (uniform over the environment's ``admissible_actions()``, the chance level of the held-out
    tasks), ``untrained`` (the embedded model as it ships), ``sft`` (the warm start), and from that warm start ``ppo``,
    ``dpo``, ``starpo``, ``starpo-s``, ``starpo-s-ragen`` and ``gigpo`` (the presets of trl_starpo/presets.py; ``dpo``
    is trl_starpo.dpo's online trajectory DPO, pairing a task's best episode against its worst, or with
    ``--dpo-pairs expert`` the expert's episode against each of the policy's, as ETO does).
    Warm start: one per environment, shared by every method and seed: the environment's expert plays
    ``sft_episodes`` training tasks through the rollout collector and the model is fine-tuned on them with LoRA
    (``trl_starpo.recipes.run_sft``, as ``recipes/alfworld_sft.py``), the adapter merged; or, where a column names
    one (``Column.warm_start_adapter``: ALFWorld's, the start of ``make train``, HotPotQA's and MiniGrid's), the
    adapter the environment's SFT recipe built and the project ships, merged, so that every seed starts from the same
    weights.
    The ALFWorld and MiniGrid experts explain their actions (``expert_thinking``), so those turns are
    ``<think>…</think><answer>…</answer>``; the WebShop and HotPotQA experts do not, so those columns answer directly
    (``enable_thinking`` off, and with it StarPO-S's thinking critic).
    Training: every RL method gets the same budget of environment turns (``COLUMNS[...].budget``; one turn is one
    model response and the environment's reply) on the training split, LoRA on the warm start, the same learning
    rate (``--learning-rate``; 3e-4 unless the flag says otherwise), batch (``tasks_per_update`` tasks x
    ``num_generations`` episodes per update; 2 x 4 unless ``--tasks-per-update`` and ``--num-generations`` say
    otherwise) and rollout settings; the preset sets the rest. Each rollout batch serves ``num_iterations`` optimizer
    steps (``--num-iterations``; 1, on-policy, unless the flag says otherwise).
    A run stops at the first update that reaches the budget, after all of that batch's optimizer steps.
    Learning-rate schedules are constant after the preset's warmup, a warmup fraction being of the fewest updates the
    budget allows (all episodes at ``max_turns``). DPO plays rounds of ``dpo_tasks_per_round`` tasks x
    ``num_generations`` episodes under the same turn budget (``--dpo-pairs expert``: as many tasks, once each).
    Success: on held-out tasks (ALFWorld's ``valid_unseen``, the ``test`` split elsewhere), the first
    ``eval_episodes`` (at least 32) tasks, one episode each, sampled at temperature 1.0 with the seed of the run (ALFWorld's decoded greedily,
    ``Column.eval_temperature``, chosen on ``valid_seen``);
    every seed plays the same tasks, so a row's 95% interval is a bootstrap over tasks
    (``trl_starpo.statistics.task_bootstrap_interval``) and a lift a paired bootstrap of the difference over tasks
    (``paired_task_bootstrap``); records made before they kept per-task outcomes get per-episode Wilson intervals,
    marked in the table. With ``--held-out-split validation`` a run is evaluated on the validation split instead; a
    finished run evaluated again on another split or on more tasks keeps its checkpoints and trains nothing
    (``protocol.training_key``). Every row plays in the precision its column trains in (bf16 autocast where
    ``Scale.bf16``, else fp32); before 2026-12-04 only a preset's model evaluated in the process that trained it
    did, the SFT, untrained and DPO rows playing in fp32, and the table warns where a column's records mix the two;
    DPO's rounds, which had played its merged models in fp32, play in the column's precision too
    (``collection_precision``). Records keep each episode's outcome by task (since 2026-12-04), so that an RL method
    and the SFT start, which play the same tasks, are also compared episode by episode: with the task as the unit
    (every seed plays the same tasks), the exact sign test on the tasks whose successes over the seeds rose and
    fell. Learning curves: success and return of the training rollouts against the turns spent.

Runs and records
    Each (method, environment, seed) run works in
    ``<workdir>/runs/<environment>/<method>-seed<seed>-<key>[-<rule>]/``, one folder per training setting
    (``<key>``: ``protocol.training_key``; evaluations that differ only in the held-out split, its size or
    temperature share it; TRL checkpoints every ``save_every`` updates, or DPO's rounds), and resumes from there
    when restarted with the same settings; a finished run writes its record, a small JSON file, to
    ``benchmarks/learning_runs/<environment>/<method>-seed<seed>.json`` (held-out success, the curve, the settings'
    key, the commit). ``--table`` rebuilds docs/results.md's table and ``docs/learning_<environment>.png`` from the
    committed records alone; ``--table --records <folder>`` prints another folder's table (an ablation, with another
    budget or rule, keeps its records apart under ``benchmarks/learning_runs/ablations/``, indexed in that folder's
    README) and writes its curves into that folder.

Code (this package, one job a module)
    ``protocol`` the columns, the scale and the setting key; ``evaluation`` the held-out tasks and a model's success on
    them; ``training`` the warm start, a preset's budgeted RL run and online DPO; ``runs`` one run and its record;
    ``statistics`` pooled intervals and the paired task-level test; ``table`` and ``plots`` docs/results.md's section
    and curves from the records (no torch); ``scheduler`` runs side by side; ``cli`` the command line below.

Usage
    python benchmarks/learning.py --env minigrid --method gigpo --seed 0       # one run (resumes when restarted)
    python benchmarks/learning.py --env minigrid --method all --seed 0 1 2     # every row, one process per run
    python benchmarks/learning.py --env all --method all --seed 0
    python benchmarks/learning.py --env webshop --method sft starpo-s --seed 0 1 2 --jobs 6   # side by side (a GPU)
    python benchmarks/learning.py --table                                      # the table, from the records
    python benchmarks/learning.py --table --records benchmarks/learning_runs/ablations/archive   # an ablation's table
    python benchmarks/learning.py --compare benchmarks/learning_runs \
        benchmarks/learning_runs/ablations/alfworld-benchmark-warm-start --env alfworld --method sft   # by task
    python benchmarks/learning.py --smoke                                      # every row end to end, tiny budgets

    On a machine shared with other jobs, pass ``--threads 1`` (or set OMP_NUM_THREADS=1): oversubscribed torch threads
    spin instead of working (an evaluation of two MiniGrid episodes was unfinished after 24 minutes with the default
    threads at a load of 13 on 2 cores, and took one minute with one thread).
"""

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
