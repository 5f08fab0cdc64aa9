"""Statistics over rounds and runs. numpy only: shared by the measuring side and the data side."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

Z_INTERVAL = 1.96  # the records' intervals are 95 %: half-width / 1.96 ~ one sd


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


def interval_sd(lo, hi) -> float:
    """One sd in log terms from a 95 % interval [lo, hi] of a ratio; 0 when the interval is unknown."""
    if not lo or not hi or lo <= 0 or hi < lo:
        return 0.0
    return math.log(hi / lo) / 2 / Z_INTERVAL


def geomean(values: Sequence[float]) -> float | None:
    positive = [v for v in values if v and v > 0]
    if not positive:
        return None
    return float(math.exp(sum(math.log(v) for v in positive) / len(positive)))


# Small-sample consistency factors of the MAD (Croux & Rousseeuw 1992): with n values the scaled MAD
# underestimates a normal sd on average; these make it unbiased. Beyond 9 values n / (n - 0.8).
MAD_TO_SD = 1.4826  # 1 / Phi^-1(3/4): the MAD of a normal sample is 0.6745 sd
MAD_SMALL_N = {2: 1.196, 3: 1.495, 4: 1.363, 5: 1.206, 6: 1.200, 7: 1.140, 8: 1.129, 9: 1.107}


def mad_consistency(n: int) -> float:
    return MAD_SMALL_N.get(n) or n / (n - 0.8)


def rel_spread(values: Sequence[float]) -> float | None:
    """Run-to-run spread of positive values as a robust sd of log(value): ~ relative sd (0.03 = 3 %).

    Logs make a 10 % drop and a 10 % gain count alike and keep a speedup's spread scale-free. The estimate
    is the median absolute deviation of the logs from their median, scaled to a normal sd (1.4826) and
    corrected for small samples (mad_consistency), not the sample sd: one outlier run must not blind a cell.
    Seen on an H100 baseline: vit_b16 infer runs at 1.23, 1.23, 1.24, 1.50, 1.23 gave a sample sd of 8.5 %
    and a gate line of 22.8 %; their MAD is 0 (a baseline then keeps the runs' own in-run sd as the floor:
    perfgate.baseline.run_to_run_sd). The price is efficiency (~37 % of the sd's): from few runs the MAD
    scatters more (with 3 values it is the smaller of the two outer deviations, scaled up), so baselines
    should hold 5 or more runs; docs/gate-power.md has the rates both ways. None with fewer than 2 values:
    no run-to-run evidence.
    """
    positive = [v for v in values if v and v > 0]
    if len(positive) < 2:
        return None
    logs = np.log(positive)
    mad = float(np.median(np.abs(logs - np.median(logs))))
    return MAD_TO_SD * mad_consistency(len(positive)) * mad
