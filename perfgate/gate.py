"""The gate: compare one run's records with a stored baseline through a set of small rule objects.

Imports no torch. The rules live in perfgate.rules (the speedup rule's test is explained there); `compare`
only iterates over them. A regression fails the gate (exit code 1); improvements, missing and new cells are
reported and never fail it. A baseline that cannot be used raises BaselineError before anything is compared
(exit code 2). The plugin re-measures the cells whose speedup tripped (`speedup_suspects`) and calls
`confirm`, so a speedup regression must trip twice.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Sequence

from perfgate.baseline import BaselineError, group_by_key, key_of, resolve_baseline
from perfgate.rules import (DEFAULT_RULES, IMPROVEMENT, REFRESH, REGRESSION, CountRule, Finding,
                            NumericsRule, RelativeRule, SpeedupRule, StatusRule, both_ok, default_rules)
from perfgate.stats import geomean

# The rules are re-exported, so a caller builds a rule set from the gate alone (gate.default_rules(...));
# listed here because pyflakes reads __all__, not noqa comments.
__all__ = ["CellRow", "GateReport", "GateOutcome", "compare", "speedup_suspects", "confirm", "gate_run",
           "BaselineError", "DEFAULT_RULES", "IMPROVEMENT", "REFRESH", "REGRESSION", "CountRule", "Finding",
           "NumericsRule", "RelativeRule", "SpeedupRule", "StatusRule", "default_rules"]


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
    threshold: float | None         # the speedup rule's effective threshold: the smallest drop that trips
    noise_limited: bool             # noise alone puts that line past the nominal threshold
    noise: float | None             # the sd of the speedup's log drop the rule assumed (0.01 ~ 1 %)
    run_to_run_known: bool | None   # the baseline cell had 2+ ok runs (None: speedup not gated here)
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
    gated = bool(rule and base and cur and both_ok(base, cur) and base.get("speedup"))
    threshold = rule.effective_threshold(base, cur) if gated else None
    noise = rule.noise(base, cur) if gated else None
    cur, base = cur or {}, base or {}
    ref, now = base.get("speedup"), cur.get("speedup")
    change = now / ref - 1 if ref and now is not None and cur.get("status") == "ok" else None
    return CellRow(
        cell=cell_id, verdict=verdict, status=cur.get("status"), reason=cur.get("reason") or "",
        eager_ms=cur.get("eager_ms"), compiled_ms=cur.get("compiled_ms"), speedup=now,
        speedup_lo=cur.get("speedup_lo"), speedup_hi=cur.get("speedup_hi"), baseline_speedup=ref,
        change=change, threshold=threshold, noise_limited=gated and rule.noise_limited(base, cur),
        noise=noise.sigma if noise else None, run_to_run_known=noise.known if noise else None,
        compile_s=cur.get("compile_s"),
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
    unknown = [r.cell for r in rows if r.run_to_run_known is False]
    if (baseline.get("runs") or 0) < 2:
        notes.append("the baseline has a single run: run-to-run noise is unknown, so the speedup gate judges "
                     "drops against the runs' own intervals, which are narrower than the noise between "
                     "processes (false alarms are likelier); rebuild it from 5 or more runs")
    elif unknown:
        notes.append(f"run-to-run noise unknown for {len(unknown)} cell(s) with fewer than 2 ok runs in the "
                     f"baseline (judged against their intervals alone): {', '.join(unknown)}")
    limited = [f"{r.cell} ({r.threshold:.1%}, sd {r.noise:.1%})" for r in rows if r.noise_limited]
    if limited:
        notes.append(f"{len(limited)} noise-limited cell(s): their speedup moves so much between runs that "
                     f"the gate trips only on a drop larger than the threshold asked for, and may miss one "
                     f"of that size: {', '.join(limited)}")
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


@dataclass
class GateOutcome:
    """The gate over a whole run: one report per (fingerprint, tier), or why nothing could be compared."""

    reports: list[GateReport]
    errors: list[str]

    @property
    def exit_code(self) -> int:
        if self.errors:
            return 2
        return max((r.exit_code for r in self.reports), default=0)


def gate_run(records: Sequence[dict], baseline_location, remeasure=None) -> GateOutcome:
    """Gate a run's records against the baseline file or directory. `remeasure(cell_ids) -> records`, when
    given, re-runs the cells whose speedup tripped (a confirm round): the pytest plugin passes one, the
    offline CLI cannot. Both faces call this, so they judge alike."""
    groups = group_by_key(records)
    baselines, errors = {}, []
    for key in sorted(groups):
        try:
            baselines[key] = resolve_baseline(baseline_location, *key)
        except BaselineError as err:
            errors.append(str(err))
    if errors:
        return GateOutcome([], errors)
    reports = []
    for key in sorted(groups):
        report = compare(groups[key], baselines[key])
        suspects = speedup_suspects(report)
        if suspects and remeasure is not None:
            report = confirm(report, remeasure(suspects))
        reports.append(report)
    return GateOutcome(reports, [])
