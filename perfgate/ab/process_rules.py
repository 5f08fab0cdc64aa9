"""The rules an A/B run by processes judges with, and how sure each timed comparison must be: the gate's rules
plus the absolute step times (StepTimeRule, ab_rules), the false-alarm rate ALPHA and the printed interval's
CONFIDENCE. Imports no torch; perfgate.ab.process_verdict applies them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

from perfgate.judge.rules import SpeedupRule, default_rules

# One-sided false-alarm rate of one timed comparison when nothing changed. An A/B run has no confirm round,
# and a PR tier makes ~50 timed comparisons (10 cells x 5), so the per-comparison rate must be small for
# the run's: tests/test_ab_verdict.py simulates both (docs/ab.md has the rates).
ALPHA = 0.001
CONFIDENCE = 0.95  # the interval the report prints for each change


@dataclass(frozen=True)
class StepTimeRule(SpeedupRule):
    """An absolute step time, ms per step (`eager_ms` or `compiled_ms`), that must not grow by more than
    `threshold` (0.05 = +5 %): SpeedupRule's test on log ms, lower is better. The gate leaves absolute
    times out (a baseline comes from other machines, whose times follow the machine); an A/B run's two
    environments share one machine, and an upgrade that slows eager and compiled alike (the speedup
    unchanged) shows only here."""

    form: ClassVar[str] = "step"  # its findings' terms (perfgate.render.wording): growth of ms per step

    metric: str = "compiled_ms"
    direction: str = "lower"
    threshold: float = 0.05  # growth of ms per step

    @property
    def clock(self) -> str:
        return self.metric.removesuffix("_ms")

    @property
    def label(self) -> str:
        return f"{self.clock} ms per step"

    def log_threshold(self, cur: dict) -> float:
        return math.log(1 + self.threshold)

    def fraction(self, log_line: float, loss: bool = True) -> float:
        """The line as a fraction of ms per step. Capped where exp would overflow (a line past e**700 comes
        only from absurd round times, and reads as ~1e304 rather than crashing the verdict)."""
        log_line = min(log_line, 700.0) if loss else max(log_line, -700.0)
        return math.expm1(log_line) if loss else -math.expm1(-log_line)

    def change(self, ref: float, now: float) -> float:
        """Change of ms per step; positive is a loss (+0.05: 5 % slower)."""
        return now / ref - 1

    def log_drop(self, ref: float, now: float) -> float:
        return math.log(now / ref)


def ab_rules(*, step_time: float = 0.05, **thresholds) -> tuple:
    """The gate's rules (default_rules, same keywords) and the two absolute step-time rules."""
    return (
        *default_rules(**thresholds),
        StepTimeRule("eager_ms", threshold=step_time),
        StepTimeRule("compiled_ms", threshold=step_time),
    )
