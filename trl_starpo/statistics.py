"""Statistics of success rates that evaluation, cards, plots and tables share; imports nothing of the package."""

from __future__ import annotations

import math


def success_interval(success_rate: float, episodes: int, confidence: float = 0.95) -> tuple[float, float]:
    """The Wilson score interval of a success rate measured over ``episodes`` episodes; NaNs without episodes.

    Unlike the normal approximation (``p ± 1.96 sqrt(p(1-p)/n)``), it does not shrink to a point at 0 or 1
    successes out of a few episodes: 0/4 gives [0, 0.49].
    """
    from scipy.stats import binomtest

    if not episodes or math.isnan(success_rate):
        return float("nan"), float("nan")
    successes = round(success_rate * episodes)
    interval = binomtest(successes, episodes).proportion_ci(confidence_level=confidence, method="wilson")
    return float(interval.low), float(interval.high)
