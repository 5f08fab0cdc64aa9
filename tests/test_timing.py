"""When the interleaved rounds stop: a narrow interval, the round cap, or the rounds' seconds (max_seconds)."""

import itertools

import pytest
import torch

from perfgate.core.timing_plan import GPU_PLAN
from perfgate.measure.timing import interleaved_rounds

CPU = torch.device("cpu")


def noisy_clock(step_ms: dict[str, float], spread: float):
    """A fake clock: each side's ms per step, moved by a repeating +-spread pattern so the interval stays wide."""
    wobble = itertools.cycle([1 - spread, 1 + spread, 1, 1 + spread / 2, 1 - spread / 2])
    return lambda fn, steps, device: step_ms[fn] * next(wobble)


@pytest.mark.parametrize(
    "eager_ms, compiled_ms, steps, rounds_run",
    [
        pytest.param(130.0, 87.0, 8, GPU_PLAN.min_rounds, id="slow-rounds-stop-at-min-rounds"),
        pytest.param(3.0, 2.0, 8, GPU_PLAN.max_rounds, id="fast-rounds-run-to-the-cap"),
    ],
)
def test_a_noisy_cell_stops_at_its_seconds_only_once_past_min_rounds(eager_ms, compiled_ms, steps, rounds_run):
    clock = noisy_clock({"eager": eager_ms, "compiled": compiled_ms}, spread=0.08)
    rounds = interleaved_rounds("eager", "compiled", steps, CPU, GPU_PLAN, clock=clock)
    assert len(rounds.ratios) == rounds_run
    assert rounds.seconds() == pytest.approx((sum(rounds.eager_ms) + sum(rounds.compiled_ms)) * steps / 1e3)


def test_a_steady_cell_stops_at_min_rounds_for_its_narrow_interval():
    clock = noisy_clock({"eager": 3.0, "compiled": 2.0}, spread=0.0)
    rounds = interleaved_rounds("eager", "compiled", 8, CPU, GPU_PLAN, clock=clock)
    assert len(rounds.ratios) == GPU_PLAN.min_rounds
