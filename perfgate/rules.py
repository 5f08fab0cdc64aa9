"""The gate's rules: small frozen objects (metric, direction, threshold), each with a `check(base_cell,
cur_record)` that returns a Finding or None. Imports no torch.

The speedup rule is the one that has to be right: it must catch a real 5 % loss and not cry wolf. It works
on log speedups, where a drop and a gain of the same ratio weigh alike and noise is relative:

    d      = log(baseline speedup) - log(current speedup)            the drop (> 0 a loss)
    sigma  = sqrt(s_rr^2 (1 + 1/n) + s_cur^2)                          the sd of d when nothing changed
    s_rr   = the baseline's run-to-run sd of log speedup over its n runs (baseline cell speedup_spread):
             each run is its own process and compile, so a new run differs from the baseline's by this much
             (s_rr^2) plus the baseline median's own error (s_rr^2 / n)
    s_cur  = the current run's in-run sd: its 95 % interval's half-width in log terms / 1.96. Counted on
             top of s_rr (which holds the baseline runs' in-run noise already) so a run measured on a noisy
             machine cannot trip on its own noise
    regression  iff  d > z * sigma                       the drop is real (z = 2: one-sided ~2 % per round)
              and    d > max(t - z * sigma, t / 2)        and large enough (t = log(1 / (1 - threshold)))

The second line sits z sds below the threshold, so a true drop of exactly the threshold crosses it ~98 % of
the time (when sigma is right); it never goes below half the threshold, so small true drops on quiet cells
do not fail the gate (with one z for both lines, max(z sigma, t - z sigma) bottoms out at t / 2 anyway; the
floor matters for other settings). A cell's effective threshold is the larger line: the smallest drop that
trips it. Where noise pushes it past the threshold (z * sigma > t) the cell is noise-limited: the gate
cannot promise to catch a drop of the threshold there, and the report says so. A baseline cell with fewer
than 2 ok runs has no run-to-run evidence: sigma then falls back to the baseline's and the current run's
interval widths, which are narrower than run-to-run noise, and the report says that too. An improvement is
the mirror image (a gain past the same line in log terms).

The plugin re-measures the cells that trip (gate.speedup_suspects, gate.confirm), so a speedup regression
must trip twice; docs/gate-power.md (made by tests/gate_power.py) has the rates this gives. The weak spot is
s_rr: from 3 runs it has 2 degrees of freedom, so baselines should hold 5 or more runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from perfgate.record import MEMORY_SCHEMA

REGRESSION = "regression"
IMPROVEMENT = "improvement"
REFRESH = "refresh the baseline (perfgate baseline update)"

Z_INTERVAL = 1.96  # the records' intervals are 95 %: half-width / 1.96 ~ one sd


@dataclass(frozen=True)
class Finding:
    cell: str
    metric: str
    kind: str                       # REGRESSION | IMPROVEMENT
    baseline: object                # the baseline's value (number or verdict)
    current: object
    threshold: float | None         # fraction the rule used (effective, for speedup); None for exact rules
    message: str


def both_ok(base: dict, cur: dict) -> bool:
    return base.get("status") == "ok" and cur.get("status") == "ok"


def _finding(rule, base: dict, cur: dict, kind: str, threshold, message: str) -> Finding:
    return Finding(cur["cell"], rule.metric, kind, base.get(rule.metric), cur.get(rule.metric),
                   threshold, message)


def interval_sd(lo, hi) -> float:
    """One sd in log terms from a 95 % interval [lo, hi] of a ratio; 0 when the interval is unknown."""
    if not lo or not hi or lo <= 0 or hi < lo:
        return 0.0
    return math.log(hi / lo) / 2 / Z_INTERVAL


@dataclass(frozen=True)
class SpeedupNoise:
    """What the speedup rule knows about one cell's noise, as sds of log speedup (0.01 ~ 1 %)."""

    run_to_run: float | None        # the baseline's sd between runs; None with fewer than 2 ok runs
    n_runs: int                     # ok runs behind the baseline's median
    current: float                  # the current run's in-run sd
    baseline_interval: float        # the baseline runs' in-run sd (their interval), the fallback

    @property
    def known(self) -> bool:
        return self.run_to_run is not None

    @property
    def sigma(self) -> float:
        """The sd of the drop d when nothing changed."""
        if self.run_to_run is None:
            return math.hypot(self.baseline_interval, self.current)
        return math.sqrt(self.run_to_run ** 2 * (1 + 1 / max(self.n_runs, 1)) + self.current ** 2)


@dataclass(frozen=True)
class SpeedupRule:
    metric: str = "speedup"
    direction: str = "higher"        # higher is better
    threshold: float = 0.05          # fraction of the baseline speedup; a record's gate.speedup_threshold wins
    z: float = 2.0                   # a drop must be this many sds of noise to count as real
    floor: float = 0.5               # and never smaller than this fraction of the threshold

    def nominal_threshold(self, cur: dict) -> float:
        return (cur.get("gate") or {}).get("speedup_threshold") or self.threshold

    def noise(self, base: dict, cur: dict) -> SpeedupNoise:
        runs = base.get("speedup_runs") or []
        n_runs = len(runs) or base.get("runs_ok") or 1
        spread = base.get("speedup_spread") if n_runs >= 2 else None
        # One run's interval: the baseline keeps the envelope (min lo, max hi) over runs, at least as wide.
        base_sd = interval_sd(base.get("speedup_lo"), base.get("speedup_hi"))
        return SpeedupNoise(spread, n_runs, interval_sd(cur.get("speedup_lo"), cur.get("speedup_hi")),
                            base_sd)

    def lines(self, base: dict, cur: dict) -> tuple[float, float, SpeedupNoise]:
        """(significance line z * sigma, size line max(t - z sigma, t floor)) in log units, and the noise."""
        noise = self.noise(base, cur)
        t = -math.log(1 - self.nominal_threshold(cur))
        significance = self.z * noise.sigma
        return significance, max(t - significance, self.floor * t), noise

    def effective_log_line(self, base: dict, cur: dict) -> float:
        return max(self.lines(base, cur)[:2])

    def effective_threshold(self, base: dict, cur: dict) -> float:
        """The smallest drop that trips this cell, as a fraction (0.05 = a 5 % lower speedup)."""
        return 1 - math.exp(-self.effective_log_line(base, cur))

    def noise_limited(self, base: dict, cur: dict) -> bool:
        """Noise alone puts the line past the threshold: a drop of the threshold may go uncaught."""
        return self.lines(base, cur)[0] > -math.log(1 - self.nominal_threshold(cur)) + 1e-12

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get("speedup"), cur.get("speedup")
        if not both_ok(base, cur) or not ref or not now or now <= 0:
            return None
        significance, size, noise = self.lines(base, cur)
        line = max(significance, size)
        d = math.log(ref / now)
        if abs(d) <= line:
            return None
        lo, hi = cur.get("speedup_lo") or now, cur.get("speedup_hi") or now
        unknown = "" if noise.known else ", run-to-run noise unknown"
        evidence = (f"speedup {now:.3f}x [{lo:.3f}, {hi:.3f}] vs baseline {ref:.3f}x ({now / ref - 1:+.1%}); "
                    f"{abs(d) / noise.sigma if noise.sigma else math.inf:.1f} noise sds "
                    f"(sd {noise.sigma:.1%}{unknown})")
        if d > 0:
            eff = 1 - math.exp(-line)
            return _finding(self, base, cur, REGRESSION, eff, f"{evidence}, past the {eff:.1%} drop line")
        eff = math.exp(line) - 1
        return _finding(self, base, cur, IMPROVEMENT, eff, f"{evidence}, past the {eff:.1%} gain line; {REFRESH}")


@dataclass(frozen=True)
class CountRule:
    """Exact counts (graph breaks, recompiles): any increase is a regression, any decrease an improvement
    that the baseline should learn."""

    metric: str
    direction: str = "lower"
    threshold: int = 0               # extra counts tolerated

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not both_ok(base, cur) or ref is None or now is None:
            return None
        text = f"{self.metric.replace('_', ' ')} {ref} -> {now}"
        if now > ref + self.threshold:
            return _finding(self, base, cur, REGRESSION, None, text)
        if now < ref:
            return _finding(self, base, cur, IMPROVEMENT, None, f"{text}; {REFRESH}")
        return None


@dataclass(frozen=True)
class RelativeRule:
    """A lower-is-better quantity (memory MiB, compile seconds) that regresses when it grows by more than
    `threshold` (a fraction) AND by more than `min_delta` (its own unit), so tiny values do not cry wolf."""

    metric: str
    threshold: float
    min_delta: float = 0.0
    direction: str = "lower"
    requires_same: str | None = None  # compare only when this field agrees (e.g. compile_cache fresh/kept)
    requires_value: str | None = None  # ... and has this value in both (e.g. "fresh": cold compiles only)
    min_schema: int = 1  # a current record older than this measured the metric another way: not compared

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not both_ok(base, cur) or not ref or now is None or (cur.get("schema") or 1) < self.min_schema:
            return None
        if self.requires_same and base.get(self.requires_same) != cur.get(self.requires_same):
            return None
        if self.requires_value and cur.get(self.requires_same) != self.requires_value:
            return None
        change = now / ref - 1
        if abs(now - ref) <= self.min_delta or abs(change) <= self.threshold:
            return None
        text = f"{self.metric} {ref:.4g} -> {now:.4g} ({change:+.1%}, threshold {self.threshold:.0%})"
        kind = REGRESSION if change > 0 else IMPROVEMENT
        return _finding(self, base, cur, kind, self.threshold, text if change > 0 else f"{text}; {REFRESH}")


@dataclass(frozen=True)
class NumericsRule:
    """Compiled results that stop matching eager. A baseline with numerics "skipped" (not checked there)
    counts as not failing: a failure now is news either way."""

    metric: str = "numerics"
    direction: str = "pass"
    threshold: None = None

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get("numerics"), cur.get("numerics")
        if not both_ok(base, cur):
            return None
        if now == "fail" and ref != "fail":
            worst = (cur.get("numerics_detail") or {}).get("worst")
            detail = f" (worst: {worst})" if worst else ""
            return _finding(self, base, cur, REGRESSION, None, f"numerics {ref} -> fail{detail}")
        if ref == "fail" and now == "pass":
            return _finding(self, base, cur, IMPROVEMENT, None, f"numerics fail -> pass; {REFRESH}")
        return None


@dataclass(frozen=True)
class StatusRule:
    """A cell that ran in the baseline and fails or is skipped now, or the reverse."""

    metric: str = "status"
    direction: str = "ok"
    threshold: None = None

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get("status"), cur.get("status")
        if ref == "ok" and now != "ok":
            return _finding(self, base, cur, REGRESSION, None,
                            f"ok in the baseline, {now} now: {cur.get('reason') or 'no reason given'}")
        if ref != "ok" and now == "ok":
            return _finding(self, base, cur, IMPROVEMENT, None, f"{ref} in the baseline, ok now; {REFRESH}")
        return None


def default_rules(speedup: float = 0.05, memory: float = 0.20, compile_time: float = 0.50) -> tuple:
    """The gate's rules; thresholds are fractions (0.05 = 5 %)."""
    return (
        StatusRule(),
        SpeedupRule(threshold=speedup),
        CountRule("graph_breaks"),
        CountRule("recompiles"),
        # 32 MiB: below that a change is allocator rounding, not the model.
        RelativeRule("peak_mem_compiled_mb", memory, min_delta=32.0, min_schema=MEMORY_SCHEMA),
        RelativeRule("peak_mem_eager_mb", memory, min_delta=32.0),
        # 2 s: a tiny model's compile moves that much with machine load; cold and cached compiles differ.
        # A kept cache (--perf-cache-dir) makes compile time depend on what earlier runs left in it: seen on an
        # H100, gpt2 train 41.8 s cold vs 8.6 s from a kept cache. Gate cold compiles only.
        RelativeRule("compile_s", compile_time, min_delta=2.0, requires_same="compile_cache",
                     requires_value="fresh"),
        NumericsRule(),
    )


DEFAULT_RULES = default_rules()
