"""The gate's rules: small frozen objects (metric, direction, threshold), each with a `check(base_cell,
cur_record)` that returns a Finding or None. Imports no torch.

One ratio rule per clock (perfgate.core.clocks defines each default line), on log ratios against the
baseline's run-to-run noise: wall `speedup` 5 %, device `device_speedup` 2.5 % (a data-parallel cell's
`compute_speedup` too), host time (HostTimeRule) +15 %. One band rule per count of a step's work and side
(CountBandRule, perfgate.core.clocks.COUNTS: +-0.5 %, Python calls +-1 % or +-1.5 %, instructions +-1.5 %).
Count, relative, numerics and status rules cover the rest. How the ratio rules decide, and why: docs/gate-power.md
("How the rules decide"). A finding is data, the figures a rule judged by (perfgate.judge.finding); its words live
in perfgate.render.wording; when the gate counts one as an advisory: perfgate.judge.advisories.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, ClassVar

from perfgate.core import clocks
from perfgate.core.clocks import COMPUTE, COUNT_OF, COUNTS, DEVICE, HOST, WALL, Count, range_field
from perfgate.core.record import RECORD_SCHEMA
from perfgate.core.record_reading import compiled_peak_is_right, graphs_came_alike
from perfgate.core.stats import interval_sd
from perfgate.judge.finding import IMPROVEMENT, REGRESSION, Finding, rule_finding

# Each ratio metric's clock, as reports name it (perfgate.core.clocks defines them).
CLOCK_NAMES = clocks.NAMES


def both_ok(base: dict, cur: dict) -> bool:
    return base.get("status") == "ok" and cur.get("status") == "ok"


@dataclass(frozen=True)
class SpeedupNoise:
    """What a ratio rule knows about one cell's noise, as sds of the log ratio (0.01 ~ 1 %)."""

    run_to_run: float | None  # the baseline's sd between runs; None with fewer than 2 ok runs
    n_runs: int  # ok runs behind the baseline's median
    current: float  # the current run's in-run sd
    baseline_interval: float  # the baseline runs' in-run sd (their interval), the fallback

    @property
    def known(self) -> bool:
        return self.run_to_run is not None

    @property
    def sigma(self) -> float:
        """The sd of the drop d when nothing changed."""
        if self.run_to_run is None:
            return math.hypot(self.baseline_interval, self.current)
        return math.sqrt(self.run_to_run**2 * (1 + 1 / max(self.n_runs, 1)) + self.current**2)


@dataclass(frozen=True)
class SpeedupRule:
    """A higher-is-better eager/compiled ratio of one clock: `metric` is speedup (wall), device_speedup or
    host_speedup, read with its `_lo`, `_hi`, `_runs` and `_spread` fields from the baseline cell."""

    form: ClassVar[str] = "ratio"  # its findings' terms (perfgate.render.wording): a speedup's drop or gain

    metric: str = WALL.ratio
    direction: str = "higher"  # higher is better
    threshold: float = WALL.threshold  # fraction of the baseline ratio; the wall rule: gate.speedup_threshold wins
    z: float = 2.0  # a drop must be this many sds of noise to count as real
    floor: float = 0.5  # and never smaller than this fraction of the threshold
    phases: tuple[str, ...] | None = None  # the phases whose cells have this clock (None: every phase)

    def applies(self, record: dict) -> bool:
        return self.phases is None or record.get("phase") in self.phases

    @property
    def clock(self) -> str:
        return CLOCK_NAMES.get(self.metric, self.metric)

    @property
    def label(self) -> str:
        return f"{self.clock} speedup"

    @property
    def follows_host_cpu(self) -> bool:
        """The wall clock counts host stalls: a host-bound cell's wall ratio moves with the host CPU."""
        return self.metric == "speedup"

    def nominal_threshold(self, cur: dict) -> float:
        override = (cur.get("gate") or {}).get("speedup_threshold") if self.metric == "speedup" else None
        return override or self.threshold

    def log_threshold(self, cur: dict) -> float:
        """The threshold as a log drop of the ratio."""
        return -math.log(1 - self.nominal_threshold(cur))

    def fraction(self, log_line: float, loss: bool = True) -> float:
        """A log line as the rule's fraction: a drop of the ratio (loss) or a gain of it."""
        return 1 - math.exp(-log_line) if loss else math.exp(log_line) - 1

    def change(self, ref: float, now: float) -> float:
        """The change in the rule's terms; negative is a loss (-0.05: the ratio is 5 % lower)."""
        return now / ref - 1

    def noise(self, base: dict, cur: dict) -> SpeedupNoise:
        m = self.metric
        runs = base.get(f"{m}_runs") or []
        n_runs = len(runs) or base.get("runs_ok") or 1
        spread = base.get(f"{m}_spread") if n_runs >= 2 else None
        # One run's interval: the baseline keeps the envelope (min lo, max hi) over runs, at least as wide.
        base_sd = interval_sd(base.get(f"{m}_lo"), base.get(f"{m}_hi"))
        return SpeedupNoise(spread, n_runs, interval_sd(cur.get(f"{m}_lo"), cur.get(f"{m}_hi")), base_sd)

    def lines(self, base: dict, cur: dict) -> tuple[float, float, SpeedupNoise]:
        """(significance line z * sigma, size line max(t - z sigma, t floor)) in log units, and the noise."""
        noise = self.noise(base, cur)
        return (*self.lines_for(noise.sigma, cur), noise)

    def lines_for(self, sigma: float, cur: dict, z: float | None = None) -> tuple[float, float]:
        """The two lines for a log drop whose sd is `sigma` when nothing changed; `z` defaults to the rule's
        (an A/B run, perfgate.ab.process_verdict, passes a Student t quantile: its sigma is estimated from few runs)."""
        t = self.log_threshold(cur)
        significance = (self.z if z is None else z) * sigma
        return significance, max(t - significance, self.floor * t)

    def log_drop(self, ref: float, now: float) -> float:
        """How much worse `now` is than `ref` in log terms (> 0 a loss): for a ratio, how far it fell."""
        return math.log(ref / now)

    def effective_log_line(self, base: dict, cur: dict) -> float:
        return max(self.lines(base, cur)[:2])

    def effective_threshold(self, base: dict, cur: dict) -> float:
        """The smallest loss that trips this cell, as a fraction (0.05 = a 5 % lower speedup)."""
        return self.fraction(self.effective_log_line(base, cur))

    def noise_limited(self, base: dict, cur: dict) -> bool:
        """Noise alone puts the line past the threshold: a loss of the threshold may go uncaught."""
        return self.lines(base, cur)[0] > self.log_threshold(cur) + 1e-12

    def compared(self, base: dict, cur: dict) -> bool:
        """Both ok and both carry this clock: the rule judges the numbers."""
        return both_ok(base, cur) and bool(base.get(self.metric)) and bool(cur.get(self.metric))

    def figures(self, base: dict, cur: dict) -> dict:
        """What a finding of this rule carries besides its change and noise (HostTimeRule adds host ms)."""
        return {}

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not both_ok(base, cur) or not ref or not self.applies(cur):
            return None  # nothing to compare, or the baseline has no such clock (old, or CPU): not compared
        if not now or now <= 0:
            return rule_finding(
                self,
                base,
                cur,
                REGRESSION,
                None,
                "missing",
                clock=self.clock,
                label=self.label,
                note=cur.get("clocks_note") or "",
                # A record older than this perfgate lacks what its schema lacked: its words name the schema.
                schema=(cur.get("schema") or 1) if (cur.get("schema") or 1) < RECORD_SCHEMA else None,
            )
        significance, size, noise = self.lines(base, cur)
        line = max(significance, size)
        d = self.log_drop(ref, now)
        if abs(d) <= line:
            return None
        return rule_finding(
            self,
            base,
            cur,
            REGRESSION if d > 0 else IMPROVEMENT,
            self.fraction(line, loss=d > 0),
            self.form,
            clock=self.clock,
            label=self.label,
            change=self.change(ref, now),
            lo=cur.get(f"{self.metric}_lo") or now,
            hi=cur.get(f"{self.metric}_hi") or now,
            sds=abs(d) / noise.sigma if noise.sigma else math.inf,
            sd=noise.sigma,
            noise_known=noise.known,
            **self.figures(base, cur),
        )


@dataclass(frozen=True)
class HostTimeRule(SpeedupRule):
    """The host clock: compiled host ms to issue a step relative to eager's (1 / host_speedup) must not grow
    by more than `threshold` (0.15 = +15 %, host_speedup 13.0 % lower). The same test as SpeedupRule on
    log host_speedup; only the threshold and the words are in host time, which is what a reader acts on."""

    form: ClassVar[str] = "host"  # compiled host time relative to eager's: its growth or fall

    metric: str = HOST.ratio
    direction: str = "higher"  # of host_speedup: compiled host time relative to eager's is lower-better
    threshold: float = HOST.threshold  # growth of compiled host ms relative to eager's

    def log_threshold(self, cur: dict) -> float:
        return math.log(1 + self.threshold)

    def fraction(self, log_line: float, loss: bool = True) -> float:
        """Compiled host time relative to eager's: its growth (loss) or its fall."""
        return math.exp(log_line) - 1 if loss else 1 - math.exp(-log_line)

    def change(self, ref: float, now: float) -> float:
        """Change of compiled host time relative to eager's; positive is a loss (+0.15: 15 % more)."""
        return ref / now - 1

    def figures(self, base: dict, cur: dict) -> dict:
        """Host ms to issue one step, (eager, compiled), now and in the baseline: what a reader acts on."""
        return {"host_ms": tuple((r.get("eager_host_ms"), r.get("compiled_host_ms")) for r in (cur, base))}


@dataclass(frozen=True)
class CountRule:
    """Exact counts (graph breaks, recompiles): any increase is a regression, any decrease an improvement
    that the baseline should learn."""

    metric: str
    direction: str = "lower"
    threshold: int = 0  # extra counts tolerated

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not both_ok(base, cur) or ref is None or now is None:
            return None
        if now > ref + self.threshold:
            return rule_finding(self, base, cur, REGRESSION, None, "count")
        if now < ref:
            return rule_finding(self, base, cur, IMPROVEMENT, None, "count")
        return None


@dataclass(frozen=True)
class CountBandRule:
    """A count of a step's work (perfgate.core.clocks.Count) on one side against the baseline's, within a band
    (`threshold`, a fraction either way): grown past it a regression, shrunk past it an improvement the
    baseline should learn. Counts repeat where the code did not change (they do not follow the host), so the
    band is tight and nothing is re-measured. A count that follows how the graphs came (Python calls) is
    judged by the wider `apart` where the two processes got them by different ways (graphs_came_alike). A
    baseline without the count (made before record schema 13) does not judge it, and the cell passes: the
    gate says so in a note (`unjudged`)."""

    metric: str  # a count field, `<side>_<count>`: "compiled_kernels" (perfgate.core.clocks.COUNT_OF)
    threshold: float = 0.015
    direction: str = "lower"
    apart: float | None = None  # the band where the graphs came by different ways (perfgate.core.clocks.Count)

    def band(self, base: dict, cur: dict) -> float:
        """The band these two records are judged by."""
        if self.apart is None or graphs_came_alike(base, cur):
            return self.threshold
        return max(self.threshold, self.apart)

    @property
    def count(self) -> Count:
        return COUNT_OF[self.metric][0]

    def unjudged(self, base: dict, cur: dict) -> bool:
        """Counted now, and the baseline has no count to judge it by."""
        return both_ok(base, cur) and cur.get(self.metric) is not None and base.get(self.metric) is None

    @staticmethod
    def other_steps(base: dict, cur: dict) -> bool:
        """Both counted, over different numbers of steps (a stream model's counts depend on which batches)."""
        steps = base.get("counts_steps"), cur.get("counts_steps")
        return None not in steps and steps[0] != steps[1]

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not both_ok(base, cur) or ref is None or now is None or now == ref or self.other_steps(base, cur):
            return None
        # A baseline whose runs disagreed keeps the range they spanned (clocks.range_field): judged from its
        # nearer end, so a count that follows the machine is no regression on a machine seen among them.
        least, most = base.get(range_field(self.metric)) or (ref, ref)
        nearer = most if now > ref else least
        change = now / nearer - 1 if nearer else math.inf  # from none to some: past any band
        band = self.band(base, cur)
        if abs(change) <= band or least <= now <= most:
            return None
        kind = REGRESSION if now > ref else IMPROVEMENT
        spanned = (least, most) if least != most else ()
        return rule_finding(self, base, cur, kind, band, "band", label=self.count.label, change=change, spanned=spanned)


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
    # False for a current record that measured the metric another way (an older schema): not compared.
    measured_right: Callable[[dict], bool] | None = None

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not both_ok(base, cur) or not ref or now is None:
            return None
        if self.measured_right is not None and not self.measured_right(cur):
            return None
        if self.requires_same and base.get(self.requires_same) != cur.get(self.requires_same):
            return None
        if self.requires_value and cur.get(self.requires_same) != self.requires_value:
            return None
        change = now / ref - 1
        if abs(now - ref) <= self.min_delta or abs(change) <= self.threshold:
            return None
        kind = REGRESSION if change > 0 else IMPROVEMENT
        return rule_finding(self, base, cur, kind, self.threshold, "relative", change=change)


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
            return rule_finding(self, base, cur, REGRESSION, None, "numerics", note=worst or "")
        if ref == "fail" and now == "pass":
            return rule_finding(self, base, cur, IMPROVEMENT, None, "numerics")
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
            return rule_finding(self, base, cur, REGRESSION, None, "status", note=cur.get("reason") or "")
        if ref != "ok" and now == "ok":
            return rule_finding(self, base, cur, IMPROVEMENT, None, "status")
        return None


def default_rules(
    *,
    speedup: float = WALL.threshold,
    device: float = DEVICE.threshold,
    host: float = HOST.threshold,
    memory: float = 0.20,
    compile_time: float = 0.50,
    counts: float | None = None,
) -> tuple:
    """The gate's rules; thresholds are fractions (0.05 = 5 %). `speedup` and `device`: a drop of the wall
    and device speedups; `host`: a growth of compiled host time per step relative to eager's; `counts`: the
    band of every count of a step's work (None: each count's own, perfgate.core.clocks.COUNTS)."""
    return (
        StatusRule(),
        SpeedupRule(WALL.ratio, threshold=speedup),
        # GPU busy ms move ~0.2 % between runs (H100), so the line sits near the threshold. 2.5 %, not 3 %: a
        # compiled step 3 % slower lowers the speedup by 2.9 % (1 - 1/1.03), which a 3 % line minus 2 sds
        # catches about half the time (H100: planted 3 %, read 2.8-3.0 %, vit_b16's 2.8 % passed).
        SpeedupRule(DEVICE.ratio, threshold=device),
        # A data-parallel cell's device clock: its GPU work but NCCL's (perfgate.measure.ddp_clocks). On one
        # rank it repeated to 0.1-0.4 % across H100 machines whose wall steps differed by up to 26 %, and read
        # a planted 3 % GPU loss as 2.9-3.0 % (docs/ddp.md).
        SpeedupRule(COMPUTE.ratio, threshold=device, phases=COMPUTE.phases),
        # Host ms to issue a step move ~3 % per round with the machine's load: +15 % is a real cost.
        HostTimeRule(threshold=host),
        CountRule("graph_breaks"),
        CountRule("recompiles"),
        # A data-parallel cell's breaks in DDP's forward wrapper: each is a graph more to issue every step.
        CountRule("ddp_wrapper_breaks"),
        # The counts of a step's work, each side: a step that does more Python, dispatches more ops or launches
        # more kernels than the baseline's regressed, whatever the host it ran on (docs/gate.md).
        *(
            CountBandRule(field, count.threshold, apart=count.apart) if counts is None else CountBandRule(field, counts)
            for count in COUNTS
            for field in count.fields
        ),
        # 32 MiB: below that a change is allocator rounding, not the model.
        RelativeRule("peak_mem_compiled_mb", memory, min_delta=32.0, measured_right=compiled_peak_is_right),
        RelativeRule("peak_mem_eager_mb", memory, min_delta=32.0),
        # 2 s: a tiny model's compile moves that much with machine load; cold and cached compiles differ.
        # A kept cache (--perf-cache-dir) makes compile time depend on what earlier runs left in it: seen on an
        # H100, gpt2 train 41.8 s cold vs 8.6 s from a kept cache. Gate cold compiles only.
        RelativeRule("compile_s", compile_time, min_delta=2.0, requires_same="compile_cache", requires_value="fresh"),
        NumericsRule(),
    )


DEFAULT_RULES = default_rules()
