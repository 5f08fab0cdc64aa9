"""Change points in a cell's history: where its speedup moved to a new level and stayed there. numpy only.

The gate compares one run with a baseline; a history also shows a slow drift, a step that a noisy cell's gate
let through, or the commit where a gain arrived. The method is binary segmentation on log speedup (a 10 %
drop and a 10 % gain weigh alike, and noise is relative):

    x_i = log(speedup_i), weight w_i = 1 / max(sigma^2, s_i^2)
    sigma  the run-to-run sd, estimated from the series itself: 1.4826 * median |x_i+1 - x_i| / sqrt(2)
           (a median of differences, so a step moves it little), and never below SIGMA_FLOOR
    s_i    point i's own in-run sd, from its 95 % interval (a point measured on a noisy machine counts less)
    y_i    x_i after a running median of 3 (despike): one point far from both neighbours is an outlier,
           not a level, so it cannot split a level in two; steps of 2 or more points pass unchanged
    split  the segment [a, b) of y at the k that maximizes the drop in weighted squared error,
               gain = W_left * W_right / (W_left + W_right) * (mean_left - mean_right)^2
           (in sd^2 units: a chi-square with 1 degree of freedom when nothing changed), and keep the split if
               gain > PENALTY(n) = 4 ln n + 18 / n       and  |mean_left - mean_right| > MIN_SHIFT
           with n the whole series' length, then split both halves again, until no split is kept. Each part
           holds at least 2 points, except a last part, so the newest run can start a new level.

The penalty is BIC-like (2 ln n per extra mean would be BIC) but twice as strict, plus 18 / n because sigma
itself comes from only n - 1 differences in a short series. Simulated (1000 seeded series each): on pure
noise of 1-3 % sd it finds a change point in at most 5 % of 8-point series and 2 % of 30-point ones; it finds
a sustained 5 % step at 1 % noise in 88 % of 8-point and 99 % of 15-point series, at 3 % noise (a step of
1.7 sd) in 53 % of 30-point series (tests/test_history.py checks rates like these). A single low point between
normal ones is an outlier, not a change point: the report marks such points with the gate's own speedup rule
against the baseline instead.

A count of a step's work (perfgate.core.clocks.COUNTS: Python calls, kernels, ...) repeats to its last digit
across processes and machines, where a timing moves by a percent; its series is segmented with its own floor
and smallest step, from its band (the count rule's line): a step of one band is the smallest worth a look, and
the noise floor a third of it, so that a sustained step of one band splits the series once it has two points
(one more kernel on 187, +0.53 %: a gain of about 10 per unit of weight, against a penalty of 10.6-14.2 for
8-30 points), while a one-off blip (Python calls' +0.42 % in one process of four) is despiked. The same
method, so a count's change points read as a clock's do.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from perfgate.core.clocks import COUNTS
from perfgate.core.stats import interval_sd

SIGMA_FLOOR = 0.01  # 1 %: the steadiest H100 cell (vit_b16) still moved 0.8 % between runs; a series that
# looks quieter than this has too few points to show its noise
MIN_SHIFT = 0.02  # 2 % in log terms: a smaller step is not worth a person's look, however clear
MIN_POINTS = 3  # fewer points say nothing about run-to-run noise
MIN_SEGMENT = 2  # one point between two others at another level is an outlier, not a new level ...
# ... except the newest point, which may be the first run at a new level


def penalty(n: int) -> float:
    """The gain a split must beat in a segment of n points (see the module docstring)."""
    return 4 * math.log(n) + 18 / n


# A count's band by its record field ("compiled_kernels" -> 0.005): its series' smallest step worth a look. A
# history mixes nights whose processes compiled their graphs with nights that loaded them, so a count that
# follows that (Python calls) takes its wider band, `apart`.
COUNT_BANDS = {field: count.widest for count in COUNTS for field in count.fields}


def noise_sd(logs: Sequence[float], floor: float = SIGMA_FLOOR) -> float:
    """Run-to-run sd of the log values from their successive differences (robust to a few steps)."""
    if len(logs) < MIN_POINTS:
        return floor
    diffs = np.abs(np.diff(np.asarray(logs, dtype=float)))
    # |x_i+1 - x_i| of N(0, sigma^2) noise is half-normal with sd sqrt(2) sigma; 1.4826 * median = one sd.
    return max(floor, float(1.4826 * np.median(diffs) / math.sqrt(2)))


@dataclass(frozen=True)
class ChangePoint:
    index: int  # the first point of the new level
    before: float  # the level before (weighted geometric mean of the segment's despiked speedups)
    after: float  # the level from `index` on, up to the next change point
    gain: float  # how far past noise the step is, in sd^2 units (compare with `penalty`)

    @property
    def shift(self) -> float:
        """The step as a fraction: -0.1 is a 10 % lower speedup."""
        return self.after / self.before - 1


@dataclass(frozen=True)
class Segmentation:
    change_points: tuple[ChangePoint, ...]
    levels: tuple[tuple[int, int, float], ...]  # (first index, last index + 1, level) per segment
    sigma: float  # the run-to-run sd of log speedup used


def _split(x: np.ndarray, w: np.ndarray, at_end: bool) -> tuple[float, int, float, float]:
    """(gain, k, left mean, right mean) of the best split of x into x[:k], x[k:]; (0, 0, 0, 0) if none.
    Both parts hold MIN_SEGMENT points, except a right part that ends the series (`at_end`)."""
    cw, cwx = np.cumsum(w)[:-1], np.cumsum(w * x)[:-1]
    total_w, total_wx = float(w.sum()), float((w * x).sum())
    left, right = cwx / cw, (total_wx - cwx) / (total_w - cw)
    gains = cw * (total_w - cw) / total_w * (left - right) ** 2
    sizes = np.arange(1, x.size)  # points left of each candidate split
    allowed = (sizes >= MIN_SEGMENT) & ((x.size - sizes >= MIN_SEGMENT) | at_end)
    if not allowed.any():
        return 0.0, 0, 0.0, 0.0
    k = int(np.argmax(np.where(allowed, gains, -1.0)))
    return float(gains[k]), k + 1, float(left[k]), float(right[k])


def _splits(
    x: np.ndarray, w: np.ndarray, start: int, stop: int, found: list[tuple[int, float]], min_shift: float
) -> None:
    """Recursive binary segmentation of x[start:stop]; appends (index, gain) of the kept splits. The penalty
    is the whole series' (a split deep in the recursion must be as clear as the first)."""
    if stop - start < 2:
        return
    gain, k, left, right = _split(x[start:stop], w[start:stop], at_end=stop == x.size)
    if gain <= penalty(int(x.size)) or abs(left - right) <= min_shift:
        return
    found.append((start + k, gain))
    _splits(x, w, start, start + k, found, min_shift)
    _splits(x, w, start + k, stop, found, min_shift)


def despike(x: np.ndarray) -> np.ndarray:
    """Tukey's running median of 3 inside the series: a single point far from both neighbours takes their
    level (an outlier), while a step of 2 or more points is kept whole. The ends stay as measured, so the
    newest run can still start a new level."""
    y = x.copy()
    if x.size >= 3:
        y[1:-1] = np.median(np.stack([x[:-2], x[1:-1], x[2:]]), axis=0)
    return y


def _level(x: np.ndarray, w: np.ndarray, start: int, stop: int) -> float:
    return float(math.exp(np.average(x[start:stop], weights=w[start:stop])))


def segment(
    values: Sequence[float],
    sds: Sequence[float] | None = None,
    floor: float = SIGMA_FLOOR,
    min_shift: float = MIN_SHIFT,
) -> Segmentation:
    """Change points of a series of positive values (speedups, or counts with their own `floor` and
    `min_shift`), oldest first. `sds`: each point's own sd of log value (0 or None where unknown). Fewer than
    MIN_POINTS values: one level, no change point."""
    x = np.log(np.asarray(values, dtype=float))
    if x.size == 0:
        return Segmentation((), (), floor)
    sigma = noise_sd(x, floor)
    own = np.asarray([s or 0.0 for s in sds] if sds is not None else np.zeros(x.size), dtype=float)
    w = 1.0 / np.maximum(sigma, own) ** 2
    found: list[tuple[int, float]] = []
    if x.size >= MIN_POINTS:
        _splits(despike(x), w, 0, int(x.size), found, min_shift)
    found.sort()
    bounds = [0, *(index for index, _ in found), int(x.size)]
    y = despike(x)  # a level is where the runs sit, so an outlier does not drag it
    levels = tuple((a, b, _level(y, w, a, b)) for a, b in zip(bounds, bounds[1:]))
    points = tuple(ChangePoint(index, levels[i][2], levels[i + 1][2], gain) for i, (index, gain) in enumerate(found))
    return Segmentation(points, levels, sigma)


def series_changes(points: Sequence[dict], metric: str = "speedup") -> tuple[list[int], Segmentation]:
    """Change points of a history series (records oldest first, as history.series returns them): the indices
    of its ok points with a value, and their segmentation, each point weighted by its own interval (a clock's
    ratio) or on its band's scale (a count: COUNT_BANDS). The one path from a history to change points:
    `perfgate history show` and the HTML report both call it."""
    ok = [i for i, p in enumerate(points) if p.get("status") == "ok" and p.get(metric)]
    values = [points[i][metric] for i in ok]
    band = COUNT_BANDS.get(metric)
    if band is not None:
        return ok, segment(values, floor=band / 3, min_shift=band)
    return ok, segment(values, [interval_sd(points[i].get(f"{metric}_lo"), points[i].get(f"{metric}_hi")) for i in ok])
