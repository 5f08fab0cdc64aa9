"""How long a cell is measured: its warm-up and timed rounds (perfgate.measure.timing runs them). Plain data, in
core so that a job (perfgate.core.job) and the processes that launch one import no torch.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass


@dataclass(frozen=True)
class TimingPlan:
    """How long to measure. Defaults suit a GPU; the CPU tier passes a smaller plan.

    target_round_ms: a round long enough to swamp launch jitter and timer resolution (tens of ms).
    target_rel_halfwidth: stop adding rounds once the speedup interval is this narrow (0.01 = +-1 %).
    max_seconds: or once the rounds have run this long (both sides, s), past min_rounds. Only a slow,
      noisy cell reaches it: the captioner's train step, whose 8-length stream makes a round ~1.7 s and whose
      interval never narrows to +-1 %, ran all 40 rounds, 71 s of a 172 s cell (H100, 2026-11-25); at 15
      rounds its wall interval read [1.385, 1.535] around 1.472x (another H100), and the device clock, whose
      rounds agree within 0.1 %, is the rule that catches a GPU loss there (docs/time-to-verdict.md).
    """

    warmup_min_steps: int = 20
    warmup_max_steps: int = 200
    warmup_settle: float = 0.03  # two warm-up chunks within 3 % of each other count as steady
    target_round_ms: float = 50.0
    max_steps_per_round: int = 200
    min_rounds: int = 15
    max_rounds: int = 40
    target_rel_halfwidth: float = 0.01
    max_seconds: float = 20.0

    def replace(self, **changes) -> "TimingPlan":
        plan = dataclasses.replace(self, **changes)
        return dataclasses.replace(plan, max_rounds=max(plan.max_rounds, plan.min_rounds))


GPU_PLAN = TimingPlan()
# Tiny models on 2 CI cores: short rounds and few of them; the CPU tier proves the engine, not speed.
CPU_PLAN = TimingPlan(
    warmup_min_steps=3, warmup_max_steps=30, target_round_ms=20.0, min_rounds=5, max_rounds=9, target_rel_halfwidth=0.05
)
