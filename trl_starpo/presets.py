"""Named presets: sets of ``StarPOConfig`` values. A field the user sets explicitly wins over its preset.

Where each value comes from is tabled in docs/algorithms.md.
"""

from __future__ import annotations

PRESETS: dict[str, dict[str, object]] = {
    # Vanilla StarPO: the plain group-relative estimator, a small KL to the reference, symmetric clipping.
    "starpo": {
        "trajectory_filter": "none",
        "advantage_estimator": "group",
        "thinking_critic": False,
        "beta": 0.001,
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "entropy_coef": 0.0,
        "max_grad_norm": 1.0,
        "warmup_steps": 0.0,
        "kl_early_stop": 0.0,
    },
    # StarPO-S as this project's specification states it, with one repair (docs/algorithms.md): the outlier filter
    # bounds rare returns instead of dropping them. The thinking scale is the specification's advantage * sigmoid(q).
    "starpo-s": {
        "trajectory_filter": "outlier_clip",
        "advantage_estimator": "group",
        "thinking_critic": True,
        "thinking_scale_rule": "multiplicative",
        "beta": 0.1,
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "entropy_coef": 0.0,
        "max_grad_norm": 0.5,
        "warmup_steps": 0.1,
        "kl_early_stop": 0.05,
    },
    # StarPO-S as RAGEN's published code runs it.
    "starpo-s-ragen": {
        "trajectory_filter": "variance",
        "advantage_estimator": "gae",
        "thinking_critic": False,
        "beta": 0.0,
        "epsilon": 0.2,
        "epsilon_high": 0.28,
        "entropy_coef": 0.001,
        "max_grad_norm": 1.0,
        "warmup_steps": 0.0,
        "kl_early_stop": 0.0,
    },
    # GiGPO as verl-agent runs it (its defaults; gigpo_step_weight 1.0, gigpo_gamma 0.95 and gigpo_step_std off are
    # the fields' own defaults): episode- and step-level advantages centred on their group means without std scaling.
    "gigpo": {
        "trajectory_filter": "none",
        "advantage_estimator": "gigpo",
        "thinking_critic": False,
        "scale_rewards": "none",
        "beta": 0.01,
        "epsilon": 0.2,
        "epsilon_high": 0.2,
        "entropy_coef": 0.001,
        "max_grad_norm": 1.0,
        "warmup_steps": 0.0,
        "kl_early_stop": 0.0,
    },
}

# PPO as the specification's baseline table runs it: `starpo` with a value critic and token-level GAE (gae_gamma =
# gae_lambda = 1, advantages whitened over the batch) in place of the group-relative estimator.
PRESETS["ppo"] = {**PRESETS["starpo"], "advantage_estimator": "gae"}
