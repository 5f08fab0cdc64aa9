"""The gate: compare one run's records with a stored baseline through a set of small rule objects.

Imports no torch. Each rule is a frozen dataclass (metric, direction, threshold) with a `check(base_cell,
cur_record)` that returns a Finding or None; `compare` only iterates over them. A regression fails the gate
(exit code 1); improvements, missing and new cells are reported and never fail it. A baseline that cannot be
used raises BaselineError before anything is compared (exit code 2).

The speedup rule is the one that has to be right: it must catch a real 5 % loss and not cry wolf. It
calls a drop real only when the current run's whole 95 % interval lies below the baseline by more than the
effective threshold, which widens to twice the baseline's run-to-run spread where compiles differ from run
to run (a cell whose compiled step moves 6 % between processes is not gated at 5 %). The plugin re-measures
the cells it trips once more (`speedup_suspects`, `confirm`), so a speedup regression must trip twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from perfgate.baseline import BaselineError, key_of
from perfgate.stats import geomean

REGRESSION = "regression"
IMPROVEMENT = "improvement"
REFRESH = "refresh the baseline (perfgate baseline update)"


@dataclass(frozen=True)
class Finding:
    cell: str
    metric: str
    kind: str                       # REGRESSION | IMPROVEMENT
    baseline: object                # the baseline's value (number or verdict)
    current: object
    threshold: float | None         # fraction the rule used (effective, for speedup); None for exact rules
    message: str


def _both_ok(base: dict, cur: dict) -> bool:
    return base.get("status") == "ok" and cur.get("status") == "ok"


def _finding(rule, base: dict, cur: dict, kind: str, threshold, message: str) -> Finding:
    return Finding(cur["cell"], rule.metric, kind, base.get(rule.metric), cur.get(rule.metric),
                   threshold, message)


@dataclass(frozen=True)
class SpeedupRule:
    metric: str = "speedup"
    direction: str = "higher"        # higher is better
    threshold: float = 0.05          # fraction of the baseline speedup; a record's gate.speedup_threshold wins
    noise_multiple: float = 2.0      # the threshold never goes below this many run-to-run spreads (log sd)

    def nominal_threshold(self, cur: dict) -> float:
        return (cur.get("gate") or {}).get("speedup_threshold") or self.threshold

    def effective_threshold(self, base: dict, cur: dict) -> float:
        threshold = self.nominal_threshold(cur)
        spread = base.get("speedup_spread")  # None with a one-run baseline: no run-to-run evidence
        return max(threshold, self.noise_multiple * spread) if spread else threshold

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get("speedup"), cur.get("speedup")
        if not _both_ok(base, cur) or not ref or now is None:
            return None
        eff = self.effective_threshold(base, cur)
        lo, hi = cur.get("speedup_lo") or now, cur.get("speedup_hi") or now
        text = f"speedup {now:.3f}x [{lo:.3f}, {hi:.3f}] vs baseline {ref:.3f}x ({now / ref - 1:+.1%})"
        if hi < ref * (1 - eff):
            return _finding(self, base, cur, REGRESSION, eff,
                            f"{text}: the whole 95 % interval is more than {eff:.1%} below the baseline")
        if lo > ref * (1 + eff):
            return _finding(self, base, cur, IMPROVEMENT, eff,
                            f"{text}: the whole 95 % interval is more than {eff:.1%} above; {REFRESH}")
        return None


@dataclass(frozen=True)
class CountRule:
    """Exact counts (graph breaks, recompiles): any increase is a regression, any decrease an improvement
    that the baseline should learn."""

    metric: str
    direction: str = "lower"
    threshold: int = 0               # extra counts tolerated

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not _both_ok(base, cur) or ref is None or now is None:
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

    def check(self, base: dict, cur: dict) -> Finding | None:
        ref, now = base.get(self.metric), cur.get(self.metric)
        if not _both_ok(base, cur) or not ref or now is None:
            return None
        if self.requires_same and base.get(self.requires_same) != cur.get(self.requires_same):
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
        if not _both_ok(base, cur):
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
        RelativeRule("peak_mem_compiled_mb", memory, min_delta=32.0),
        RelativeRule("peak_mem_eager_mb", memory, min_delta=32.0),
        # 2 s: a tiny model's compile moves that much with machine load; cold and cached compiles differ.
        RelativeRule("compile_s", compile_time, min_delta=2.0, requires_same="compile_cache"),
        NumericsRule(),
    )


DEFAULT_RULES = default_rules()


@dataclass(frozen=True)
class CellRow:
    """One line of the report's table: the current record's numbers beside the baseline's."""

    cell: str
    verdict: str                    # regression | improvement | ok | failed | new | missing
    status: str | None
    reason: str
    eager_ms: float | None
    compiled_ms: float | None
    speedup: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    baseline_speedup: float | None
    change: float | None            # speedup / baseline speedup - 1
    threshold: float | None         # the speedup rule's effective threshold for this cell
    noise_limited: bool             # the threshold was widened by the baseline's run-to-run spread
    compile_s: float | None
    graph_breaks: int | None
    recompiles: int | None
    peak_mem_compiled_mb: float | None
    numerics: str | None


@dataclass
class GateReport:
    fingerprint: str
    tier: str
    rows: list[CellRow]
    regressions: list[Finding]
    improvements: list[Finding]
    missing: list[str]              # in the baseline, not in this run (a narrowed run is allowed)
    new: list[str]                  # in this run, not in the baseline
    failed: list[str]               # failed or skipped in this run
    geomean_speedup: float | None   # over cells ok in both the run and the baseline
    geomean_baseline: float | None
    baseline_runs: int | None
    notes: list[str] = field(default_factory=list)
    records: list[dict] = field(default_factory=list, repr=False)
    baseline: dict = field(default_factory=dict, repr=False)
    rules: tuple = field(default=DEFAULT_RULES, repr=False)

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return 0 if self.passed else 1


def _check_environment(records: Sequence[dict], baseline: dict) -> None:
    expected = (baseline.get("fingerprint"), baseline.get("tier"))
    foreign = sorted({key_of(r) for r in records} - {expected})
    if foreign:
        raise BaselineError(f"records for {', '.join(f'{fp} ({tier})' for fp, tier in foreign)} cannot be "
                            f"compared with the baseline for {expected[0]} ({expected[1]})")


def _row(cell_id: str, verdict: str, base: dict | None, cur: dict | None, rule) -> CellRow:
    threshold = rule.effective_threshold(base, cur) if rule and base and cur and _both_ok(base, cur) else None
    noise_limited = bool(threshold and threshold > rule.nominal_threshold(cur) + 1e-12)
    cur, base = cur or {}, base or {}
    ref, now = base.get("speedup"), cur.get("speedup")
    change = now / ref - 1 if ref and now is not None and cur.get("status") == "ok" else None
    return CellRow(
        cell=cell_id, verdict=verdict, status=cur.get("status"), reason=cur.get("reason") or "",
        eager_ms=cur.get("eager_ms"), compiled_ms=cur.get("compiled_ms"), speedup=now,
        speedup_lo=cur.get("speedup_lo"), speedup_hi=cur.get("speedup_hi"), baseline_speedup=ref,
        change=change, threshold=threshold, noise_limited=noise_limited, compile_s=cur.get("compile_s"),
        graph_breaks=cur.get("graph_breaks"), recompiles=cur.get("recompiles"),
        peak_mem_compiled_mb=cur.get("peak_mem_compiled_mb"), numerics=cur.get("numerics"),
    )


def _verdict(findings: Sequence[Finding], base: dict | None, cur: dict | None) -> str:
    if cur is None:
        return "missing"
    if base is None:
        return "new"
    kinds = {f.kind for f in findings}
    if REGRESSION in kinds:
        return REGRESSION
    if IMPROVEMENT in kinds:
        return IMPROVEMENT
    return "ok" if cur.get("status") == "ok" else "failed"


def _evaluate(current: dict[str, dict], baseline: dict, rules: Sequence) -> dict[str, list[Finding]]:
    """Findings per cell present in both the run and the baseline."""
    cells = baseline["cells"]
    return {cid: [f for rule in rules if (f := rule.check(cells[cid], cur)) is not None]
            for cid, cur in current.items() if cid in cells}


def _notes(baseline: dict, rows: Sequence[CellRow]) -> list[str]:
    notes = []
    if (baseline.get("runs") or 0) < 2:
        notes.append("the baseline has a single run: no run-to-run spread is known, so the speedup gate "
                     "uses its fixed threshold; rebuild it from 3 or more runs")
    widened = [f"{r.cell} ({r.threshold:.1%})" for r in rows if r.noise_limited]
    if widened:
        notes.append(f"{len(widened)} cell(s) gated at a wider speedup threshold than asked, because their "
                     f"speedup moves that much between runs: {', '.join(widened)}")
    return notes


def _assemble(records: list[dict], baseline: dict, rules: Sequence,
              findings: dict[str, list[Finding]]) -> GateReport:
    current = {r["cell"]: r for r in records}
    cells = baseline["cells"]
    speedup_rule = next((r for r in rules if isinstance(r, SpeedupRule)), None)
    rows = []
    for cid in sorted(set(current) | set(cells)):
        base, cur = cells.get(cid), current.get(cid)
        rows.append(_row(cid, _verdict(findings.get(cid, []), base, cur), base, cur, speedup_rule))
    both_ok = [cid for cid in sorted(findings) if cells[cid].get("status") == "ok"
               and current[cid].get("status") == "ok" and cells[cid].get("speedup")
               and current[cid].get("speedup")]
    every = [f for cid in sorted(findings) for f in findings[cid]]
    return GateReport(
        fingerprint=baseline.get("fingerprint"), tier=baseline.get("tier"), rows=rows,
        regressions=[f for f in every if f.kind == REGRESSION],
        improvements=[f for f in every if f.kind == IMPROVEMENT],
        missing=sorted(set(cells) - set(current)), new=sorted(set(current) - set(cells)),
        failed=sorted(cid for cid, r in current.items() if r.get("status") != "ok"),
        geomean_speedup=geomean([current[c]["speedup"] for c in both_ok]),
        geomean_baseline=geomean([cells[c]["speedup"] for c in both_ok]),
        baseline_runs=baseline.get("runs"), notes=_notes(baseline, rows),
        records=records, baseline=baseline, rules=tuple(rules),
    )


def compare(records: Iterable[dict], baseline: dict, rules: Sequence = DEFAULT_RULES) -> GateReport:
    """Compare one run's records (one fingerprint and tier) with a loaded baseline."""
    records = list({r["cell"]: r for r in records}.values())  # a later record of a cell wins
    _check_environment(records, baseline)
    current = {r["cell"]: r for r in records}
    return _assemble(records, baseline, rules, _evaluate(current, baseline, rules))


def speedup_suspects(report: GateReport) -> list[str]:
    """Cells whose speedup rule tripped as a regression: re-measure these once before believing them."""
    return sorted({f.cell for f in report.regressions if f.metric == "speedup"})


def confirm(report: GateReport, remeasured_records: Iterable[dict]) -> GateReport:
    """Compare again with re-measured records in place of the originals. A speedup regression stands only
    if it tripped in the first round AND again now; other rules judge the re-measured record as it is."""
    suspects = set(speedup_suspects(report))
    remeasured = {r["cell"]: r for r in remeasured_records}
    records = [remeasured.get(r["cell"], r) for r in report.records]
    known = {r["cell"] for r in report.records}
    records += [r for cid, r in remeasured.items() if cid not in known]
    _check_environment(records, report.baseline)
    findings = _evaluate({r["cell"]: r for r in records}, report.baseline, report.rules)

    def first_time(cid: str, f: Finding) -> bool:  # a speedup trip with no trip in the first round
        return f.metric == "speedup" and f.kind == REGRESSION and cid not in suspects

    once = sorted({cid for cid, fs in findings.items() for f in fs if first_time(cid, f)})
    findings = {cid: [f for f in fs if not first_time(cid, f)] for cid, fs in findings.items()}
    new = _assemble(records, report.baseline, report.rules, findings)
    tripped_again = set(speedup_suspects(new)) & set(remeasured)
    cleared = sorted((suspects & set(remeasured)) - tripped_again)
    new.notes.append(f"confirm round: re-measured {len(remeasured)} cell(s); speedup regression confirmed "
                     f"for {', '.join(sorted(tripped_again)) or 'none'}, cleared for "
                     f"{', '.join(cleared) or 'none'}")
    if once:
        new.notes.append(f"tripped only in the confirm round, not counted: {', '.join(once)}")
    return new
