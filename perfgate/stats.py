"""Statistics over rounds and runs. numpy only: shared by the measuring side and the data side."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np


@dataclass(frozen=True)
class Interval:
    median: float
    lo: float
    hi: float

    @property
    def rel_halfwidth(self) -> float:
        """Half the interval's width over its median: 0.01 means +-1 %."""
        return (self.hi - self.lo) / 2 / self.median if self.median else math.inf


def bootstrap_median(values: Sequence[float], confidence: float = 0.95, resamples: int = 4000,
                     seed: int = 0) -> Interval:
    """Median of `values` with a percentile-bootstrap interval over them.

    Each value is one round's eager/compiled ratio, so resampling rounds keeps each pair together and the
    interval reflects how rounds disagree. Seeded: the same rounds always give the same interval.
    """
    data = np.asarray(values, dtype=float)
    if data.size == 0:
        raise ValueError("bootstrap_median needs at least one value")
    median = float(np.median(data))
    if data.size == 1:
        return Interval(median, median, median)
    rng = np.random.default_rng(seed)
    picks = rng.integers(0, data.size, size=(resamples, data.size))
    medians = np.median(data[picks], axis=1)
    tail = (1 - confidence) / 2 * 100
    lo, hi = np.percentile(medians, [tail, 100 - tail])
    return Interval(median, float(lo), float(hi))


def geomean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v and v > 0]
    if not positive:
        return None
    return float(math.exp(sum(math.log(v) for v in positive) / len(positive)))


def rel_spread(values: Sequence[float]) -> float | None:
    """Run-to-run spread as the sample standard deviation of log(value): ~ relative sd (0.03 = 3 %).

    Logs make a 10 % drop and a 10 % gain count alike and keep a speedup's spread scale-free.
    """
    positive = [v for v in values if v and v > 0]
    if len(positive) < 2:
        return None
    return float(np.std(np.log(positive), ddof=1))
