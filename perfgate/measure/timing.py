"""Timing steps honestly: device-side clocks, warm-up until steady, interleaved eager/compiled rounds.

The round count is decided from measured noise: rounds continue past `min_rounds` until the speedup's
interval is narrower than `target_rel_halfwidth` or `max_rounds` is reached.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Callable

import torch

from perfgate.core.stats import Interval, bootstrap_median
from perfgate.core.timing_plan import TimingPlan


def time_steps(step: Callable[[int], object], n: int, device: torch.device) -> float:
    """Mean milliseconds per step over `n` back-to-back steps, `step(i)` for i in 0..n-1 (a model with a
    stream of variable-length batches picks batch i; both sides of a round so see the same batches).

    CUDA: events around the region measure device time; the end event's synchronize keeps the next region
    from overlapping. CPU: the host clock, the work being synchronous there.
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for i in range(n):
            step(i)
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / n
    t0 = time.perf_counter()
    for i in range(n):
        step(i)
    return (time.perf_counter() - t0) * 1e3 / n


def warm_up(
    step: Callable[[int], object], device: torch.device, plan: TimingPlan, stream: int = 1, clock: Callable = time_steps
) -> tuple[float, int]:
    """Run steps until steady: CUDA-graph capture, autotuning, cuDNN heuristics and the caching allocator
    all settle in the first steps; a stream model's chunks are whole passes over its batches, so every
    shape compiles here, not in a timed round. Returns (ms per step of the last chunk, steps run).
    `clock(step, n, device)` times a chunk: a data-parallel cell's gives the slowest rank's ms, so every rank
    stops after the same steps (their collectives must match)."""
    done, previous, chunk = 0, None, max(2, stream)
    while True:
        ms = clock(step, chunk, device)
        done += chunk
        steady = previous is not None and abs(ms - previous) <= plan.warmup_settle * previous
        if (done >= plan.warmup_min_steps and steady) or done >= plan.warmup_max_steps:
            return ms, done
        previous = ms
        # Chunks of ~target_round_ms, so the steadiness test compares like with like.
        chunk = max(2, steps_per_round(ms, plan, stream))


def steps_per_round(step_ms: float, plan: TimingPlan, stream: int = 1) -> int:
    """Steps in one round: enough to last target_round_ms, and a whole number of passes over the stream."""
    steps = max(1, min(plan.max_steps_per_round, math.ceil(plan.target_round_ms / max(step_ms, 1e-3))))
    return stream * math.ceil(steps / stream)


@dataclass
class Rounds:
    eager_ms: list[float]
    compiled_ms: list[float]
    steps: int

    @property
    def ratios(self) -> list[float]:
        return [e / c for e, c in zip(self.eager_ms, self.compiled_ms)]

    def speedup(self) -> Interval:
        return bootstrap_median(self.ratios)

    def seconds(self) -> float:
        """Seconds the rounds' steps took, both sides."""
        return (sum(self.eager_ms) + sum(self.compiled_ms)) * self.steps / 1e3


def interleaved_rounds(
    eager: Callable,
    compiled: Callable,
    steps: int,
    device: torch.device,
    plan: TimingPlan,
    record_compiled: Callable[[float], None] | None = None,
    clock: Callable = time_steps,
) -> Rounds:
    """Alternate eager and compiled rounds of `steps` steps, swapping which goes first each round, so a
    drifting clock or a noisy neighbour moves both sides alike. `record_compiled` receives each compiled
    round's ms per step as it is measured (pytest-benchmark's stats)."""
    rounds = Rounds([], [], steps)
    for index in range(plan.max_rounds):
        order = ((eager, rounds.eager_ms), (compiled, rounds.compiled_ms))
        for fn, sink in order if index % 2 == 0 else reversed(order):
            sink.append(clock(fn, steps, device))
        if record_compiled is not None:
            record_compiled(rounds.compiled_ms[-1])
        if index + 1 >= plan.min_rounds and (
            rounds.speedup().rel_halfwidth <= plan.target_rel_halfwidth or rounds.seconds() >= plan.max_seconds
        ):
            break
    return rounds
