"""The gate: compare one run's records with a stored baseline through a set of small rule objects.

Imports no torch. The rules live in perfgate.judge.rules (the ratio rules' test is explained there, the host-CPU
advisory in perfgate.judge.advisories); `compare` only iterates over them. A regression fails the gate (exit code 1);
improvements, advisories, missing and new cells are reported and never fail it. A baseline that cannot be
used raises BaselineError before anything is compared (exit code 2). The plugin re-measures the cells that
a ratio rule (wall, device or host clock) tripped (`speedup_suspects`) and calls `confirm`, so such a
regression must trip twice on the same clock. `gate_run` is the one entry every face calls (`perfgate
compare`, the plugin's session end, the HTML report), so they judge alike. A report's rows, a cell's figures beside
its baseline's and its verdict, are perfgate.judge.gate_rows's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Sequence

from perfgate.core import exits
from perfgate.core.record import TIME_ALONE, nothing_measured
from perfgate.core.record_reading import engine_failed, process_of, unfiled, unfinished
from perfgate.core.stats import geomean
from perfgate.core.validate import checked
from perfgate.judge.advisories import changed_batch_advisory, foreign_cpu_advisory
from perfgate.judge.baseline import BaselineError, group_by_key, key_of, resolve_baseline
from perfgate.judge.finding import ADVISORY, IMPROVEMENT, REGRESSION, Finding
from perfgate.judge.gate_rows import CellRow, cell_row, verdict_of
from perfgate.judge.rules import (
    CLOCK_NAMES,
    DEFAULT_RULES,
    CountBandRule,
    CountRule,
    HostTimeRule,
    NumericsRule,
    RelativeRule,
    SpeedupRule,
    StatusRule,
    both_ok,
    default_rules,
)

# The rules are re-exported, so a caller builds a rule set from the gate alone (gate.default_rules(...));
# listed here because pyflakes reads __all__, not noqa comments.
__all__ = [
    "GateReport",
    "GateOutcome",
    "compare",
    "speedup_suspects",
    "confirm",
    "gate_run",
    "baseline_rules_for",
    "BaselineError",
    "DEFAULT_RULES",
    "ADVISORY",
    "IMPROVEMENT",
    "REGRESSION",
    "CountBandRule",
    "CountRule",
    "Finding",
    "HostTimeRule",
    "NumericsRule",
    "RelativeRule",
    "SpeedupRule",
    "StatusRule",
    "default_rules",
]


@dataclass
class GateReport:
    fingerprint: str | None  # the baseline's; None where a hand-made baseline lacks the field
    tier: str | None
    rows: list[CellRow]
    regressions: list[Finding]
    improvements: list[Finding]
    missing: list[str]  # in the baseline, not in this run (a narrowed run is allowed)
    new: list[str]  # in this run, not in the baseline
    failed: list[str]  # failed or skipped in this run
    geomean_speedup: float | None  # over cells ok in both the run and the baseline
    geomean_baseline: float | None
    baseline_runs: int | None
    notes: list[str] = field(default_factory=list)
    advisories: list[Finding] = field(default_factory=list)  # reported, never fail the gate
    records: list[dict] = field(default_factory=list, repr=False)
    baseline: dict = field(default_factory=dict, repr=False)
    rules: tuple = field(default=DEFAULT_RULES, repr=False)
    baseline_location: str = "baselines"  # the file or directory gated against: the triage's command names it

    @property
    def passed(self) -> bool:
        return not self.regressions

    @property
    def exit_code(self) -> int:
        return exits.PASS if self.passed else exits.REGRESSION


def _check_environment(records: Sequence[dict], baseline: dict) -> None:
    expected = (baseline.get("fingerprint"), baseline.get("tier"))
    foreign = sorted({key_of(r) for r in records} - {expected})
    if foreign:
        raise BaselineError(
            f"records for {', '.join(f'{fp} ({tier})' for fp, tier in foreign)} cannot be "
            f"compared with the baseline for {expected[0]} ({expected[1]})"
        )


def paired_here(record: dict | None) -> bool:
    """Whether `record` carries a paired verdict (--perf-against): its clocks and counts were judged B against
    A on its own runner, so the baseline's clock and count rules step aside for it. Per record, since a paired
    session measures its data-parallel cells unpaired, and those the baseline judges whole."""
    return isinstance((record or {}).get("paired"), dict)


def baseline_rules_for(rules: Sequence, record: dict | None) -> tuple:
    """The rules the committed baseline judges `record` by: all, or for a paired record what carries across
    machines alone (status, numerics, graph breaks, recompiles, memory, compile time)."""
    if not paired_here(record):
        return tuple(rules)
    return tuple(rule for rule in rules if not isinstance(rule, (SpeedupRule, CountBandRule)))


def _evaluate(current: dict[str, dict], baseline: dict, rules: Sequence) -> dict[str, list[Finding]]:
    """Findings per cell present in both the run and the baseline, by the rules that judge it (baseline_rules_for);
    the wall rule's on a host-bound cell measured on a host CPU foreign to the baseline, and those that scale
    with the batch of a cell whose batch changed, are advisories (perfgate.judge.advisories.foreign_cpu_advisory,
    changed_batch_advisory)."""
    cells, cpus = baseline["cells"], baseline.get("host_cpus") or []
    return {
        cid: [
            changed_batch_advisory(rule, foreign_cpu_advisory(rule, f, cur, cpus), cells[cid], cur)
            for rule in baseline_rules_for(rules, cur)
            if (f := rule.check(cells[cid], cur)) is not None
        ]
        for cid, cur in current.items()
        if cid in cells
    }


def _why_noisy(row: CellRow) -> str:
    """What the current record says about why a wall line is noisy: a host-bound step follows the CPU."""
    if row.busy_compiled is None:
        return ""
    return f"; {row.bound or 'host'}-bound: {100 * row.busy_compiled:.0f} % busy"


def _noise_notes(rows: Sequence[CellRow], rules: Sequence) -> list[str]:
    notes = []
    for rule in (r for r in rules if isinstance(r, SpeedupRule)):
        limited = [(row, c) for row in rows if (c := row.clock(rule.metric)) and c.noise_limited]
        if not limited:
            continue
        why = _why_noisy if rule.follows_host_cpu else (lambda row: "")
        names = ", ".join(f"{row.cell} ({c.threshold:.1%}, sd {c.noise:.1%}{why(row)})" for row, c in limited)
        notes.append(
            f"{len(limited)} noise-limited cell(s) on the {rule.clock} clock: their {rule.label} "
            f"moves so much between runs that the gate trips only on a change larger than the "
            f"threshold asked for, and may miss one of that size: {names}"
        )
    return notes


def _predates(baseline: dict, current: dict[str, dict], rules: Sequence) -> list[str]:
    """Clocks measured now that the baseline's ok cells lack: not compared; the baseline is older."""
    cells, notes = baseline["cells"], []
    current = {cid: cur for cid, cur in current.items() if not paired_here(cur)}  # the pairing judged their clocks
    for rule in (r for r in rules if isinstance(r, SpeedupRule)):
        lacking = [
            cid
            for cid, cur in current.items()
            if cid in cells and both_ok(cells[cid], cur) and cur.get(rule.metric) and not cells[cid].get(rule.metric)
        ]
        if lacking:
            notes.append(
                f"the baseline predates the {rule.clock} clock for {len(lacking)} cell(s), so it was "
                f"not compared there; remake the baseline (perfgate baseline update) to gate it"
            )
    bands = [r for r in rules if isinstance(r, CountBandRule)]
    unjudged = [cid for cid, cur in current.items() if cid in cells and any(r.unjudged(cells[cid], cur) for r in bands)]
    if unjudged:
        notes.append(
            f"no baseline count for {len(unjudged)} cell(s): the baseline predates the counts of a step's work "
            f"(record schema 13), so they were not compared and pass; remake the baseline to gate them"
        )
    steps = [cid for cid, cur in current.items() if cid in cells and CountBandRule.other_steps(cells[cid], cur)]
    if bands and steps:
        notes.append(
            f"{len(steps)} cell(s) counted over other steps than the baseline's (counts_steps), so their counts were "
            f"not compared and pass; remake the baseline to gate them"
        )
    return notes


def _host_cpu_note(baseline: dict, records: Sequence[dict]) -> list[str]:
    known = baseline.get("host_cpus") or []
    foreign = sorted({cpu for r in records if (cpu := (r.get("env") or {}).get("cpu_model"))} - set(known))
    if not known or not foreign:
        return []
    return [
        f"host CPU {', '.join(foreign)} is not the baseline's ({', '.join(known)}): the wall speedups of "
        f"host-bound cells follow the host CPU, so their wall findings are advisories that never fail the "
        f"gate; device-bound cells and the device and host clocks gate as usual"
    ]


def _process_note(baseline: dict, records: Sequence[dict]) -> list[str]:
    """Where this run's cells ran against where the baseline's did, when both are known and differ."""
    known = baseline.get("processes") or []
    now = sorted({p for r in records if r.get("status") == "ok" and (p := process_of(r))} - set(known))
    if not known or not now:
        return []
    return [
        f"this run's cells ran in {', '.join(now)} and the baseline's in {', '.join(known)}: a cell whose "
        f"compiled step is close to host-bound can read slower or faster there on the same machine "
        f"(docs/time-to-verdict.md); make the baseline with the gate's --perf-isolate setting"
    ]


def _notes(baseline: dict, rows: Sequence[CellRow], records: Sequence[dict], rules: Sequence) -> list[str]:
    """Notes on how far the baseline's clocks could judge: none where every record's clocks were the pairing's."""
    notes: list[str] = []
    records = [r for r in records if not paired_here(r)]
    if not records:
        return notes
    unknown = [r.cell for r in rows if r.run_to_run_known is False]
    if (baseline.get("runs") or 0) < 2:
        notes.append(
            "the baseline has a single run: run-to-run noise is unknown, so the speedup gate judges "
            "drops against the runs' own intervals, which are narrower than the noise between "
            "processes (false alarms are likelier); rebuild it from 5 or more runs"
        )
    elif unknown:
        notes.append(
            f"run-to-run noise unknown for {len(unknown)} cell(s) with fewer than 2 ok runs in the "
            f"baseline (judged against their intervals alone): {', '.join(unknown)}"
        )
    notes += _noise_notes(rows, rules)
    notes += _predates(baseline, {r["cell"]: r for r in records}, rules)
    return notes + _host_cpu_note(baseline, records) + _process_note(baseline, records)


def _assemble(records: list[dict], baseline: dict, rules: Sequence, findings: dict[str, list[Finding]]) -> GateReport:
    current = {r["cell"]: r for r in records}
    cells = baseline["cells"]
    rows = []
    for cid in sorted(set(current) | set(cells)):
        base, cur, found = cells.get(cid), current.get(cid), findings.get(cid, [])
        rows.append(cell_row(cid, verdict_of(found, base, cur), base, cur, baseline_rules_for(rules, cur), found))
    # Cells ok with a speedup in both the run and the baseline: what the geomeans are over.
    compared = [
        cid
        for cid in sorted(findings)
        if both_ok(cells[cid], current[cid]) and cells[cid].get("speedup") and current[cid].get("speedup")
    ]
    every = [f for cid in sorted(findings) for f in findings[cid]]
    return GateReport(
        fingerprint=baseline.get("fingerprint"),
        tier=baseline.get("tier"),
        rows=rows,
        regressions=[f for f in every if f.kind == REGRESSION],
        improvements=[f for f in every if f.kind == IMPROVEMENT],
        missing=sorted(set(cells) - set(current)),
        new=sorted(set(current) - set(cells)),
        failed=sorted(cid for cid, r in current.items() if r.get("status") != "ok"),
        geomean_speedup=geomean([current[c]["speedup"] for c in compared]),
        geomean_baseline=geomean([cells[c]["speedup"] for c in compared]),
        baseline_runs=baseline.get("runs"),
        notes=_notes(baseline, rows, records, rules),
        advisories=[f for f in every if f.kind == ADVISORY],
        records=records,
        baseline=baseline,
        rules=tuple(rules),
    )


def compare(records: Iterable[dict], baseline: dict, rules: Sequence = DEFAULT_RULES) -> GateReport:
    """Compare one run's records (one fingerprint and tier) with a loaded baseline."""
    # A later record of a cell wins; impossible figures on an ok record make it a failed cell.
    records = list({r["cell"]: checked(r) for r in records}.values())
    _check_environment(records, baseline)
    current = {r["cell"]: r for r in records}
    return _assemble(records, baseline, rules, _evaluate(current, baseline, rules))


def _trips(report: GateReport) -> set[tuple[str, str]]:
    """(cell, metric) of every ratio-rule regression: what a confirm round must see again."""
    ratios = {r.metric for r in report.rules if isinstance(r, SpeedupRule)}
    return {(f.cell, f.metric) for f in report.regressions if f.metric in ratios}


def _named(trips) -> str:
    clocks: dict[str, list[str]] = {}
    for cid, metric in sorted(trips):
        clocks.setdefault(cid, []).append(CLOCK_NAMES.get(metric, metric))
    return ", ".join(f"{cid} ({', '.join(names)})" for cid, names in clocks.items()) or "none"


def speedup_suspects(report: GateReport) -> list[str]:
    """Cells that a ratio rule (wall, device or host clock) tripped as a regression: re-measure these once
    before believing them."""
    return sorted({cid for cid, _ in _trips(report)})


def confirm(report: GateReport, remeasured_records: Iterable[dict]) -> GateReport:
    """Compare again with re-measured records in place of the originals. A ratio-rule regression stands
    only if the same clock tripped in the first round AND again now; other rules judge the re-measured
    record as it is."""
    suspects = _trips(report)
    remeasured = {r["cell"]: r for r in remeasured_records}
    records = [remeasured.get(r["cell"], r) for r in report.records]
    known = {r["cell"] for r in report.records}
    records += [r for cid, r in remeasured.items() if cid not in known]
    _check_environment(records, report.baseline)
    findings = _evaluate({r["cell"]: r for r in records}, report.baseline, report.rules)
    ratios = {r.metric for r in report.rules if isinstance(r, SpeedupRule)}

    def first_time(cid: str, f: Finding) -> bool:  # a ratio trip with no trip of that clock in the first round
        return f.metric in ratios and f.kind == REGRESSION and (cid, f.metric) not in suspects

    once = {(cid, f.metric) for cid, fs in findings.items() for f in fs if first_time(cid, f)}
    findings = {cid: [f for f in fs if not first_time(cid, f)] for cid, fs in findings.items()}
    new = _assemble(records, report.baseline, report.rules, findings)
    tripped_again = {t for t in _trips(new) if t[0] in remeasured}
    cleared = {t for t in suspects if t[0] in remeasured} - tripped_again
    new.notes.append(
        f"confirm round: re-measured {len(remeasured)} cell(s); regression confirmed for "
        f"{_named(tripped_again)}, cleared for {_named(cleared)}"
    )
    if once:
        new.notes.append(f"tripped only in the confirm round, not counted: {_named(once)}")
    return new


@dataclass
class GateOutcome:
    """The gate over a whole run: one report per (fingerprint, tier), or why nothing could be compared."""

    reports: list[GateReport]
    errors: list[str]
    # The cells whose process was stopped mid-cell (a CI step's limit, Ctrl-C), each "cell: where it stopped":
    # not judged, since nothing of theirs failed that the PR did, and never a pass.
    unfinished: list[str] = field(default_factory=list)
    # The cells perfgate's own paired engine failed to run ("cell: the error"): no verdict on the code (exit 3).
    broken: list[str] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        if self.errors:  # nothing judged: unusable, or a crash in perfgate where its engine failed a cell
            return exits.BUG if self.broken else exits.UNUSABLE
        code = max((r.exit_code for r in self.reports), default=exits.PASS)
        if code == exits.REGRESSION:
            return code
        return max(code, exits.UNUSABLE if self.unfinished else exits.PASS, exits.BUG if self.broken else exits.PASS)


def gate_run(
    records: Sequence[dict], baseline_location, remeasure=None, rules: Sequence = DEFAULT_RULES
) -> GateOutcome:
    """Gate a run's records against the baseline file or directory. `remeasure(cell_ids) -> records`, when
    given, re-runs the cells a ratio rule tripped (a confirm round): the pytest plugin passes one, the
    offline CLI and the HTML report cannot. Every face calls this, so they judge alike.

    A run that measured nothing (no record, every cell skipped) cannot be judged (exit 2, with the skip
    reasons), nor can a skipped cell with no environment (no baseline is its own); a skipped cell of a
    known environment that the baseline had ok fails the gate (StatusRule): a selected cell that was not
    measured never passes. A cell that was not selected is `missing` and allowed (a narrowed run). A cell whose
    record is the checkpoint of a process stopped mid-cell (`unfinished`) is not judged: the run is unsure (exit
    2) unless another cell shows a regression, never failed for the stop, which the PR did not make. Nor is one
    perfgate's own paired engine failed to run (`engine_failed`): a crash in perfgate, exit 3, never a verdict."""
    cut = [f"{r['cell']}: {r.get('reason')}" for r in records if unfinished(r)]
    broken = [f"{r['cell']}: {r.get('reason')}" for r in records if engine_failed(r)]
    finished = [r for r in records if not (unfinished(r) or engine_failed(r))]
    if (cut or broken) and not finished:
        outcome = GateOutcome([], [f"no cell was judged: {'; '.join((cut + broken)[:5])}"])
    else:
        outcome = _gate_finished(finished, baseline_location, remeasure, rules)
    return replace(outcome, unfinished=cut, broken=broken)


def _gate_finished(records: Sequence[dict], baseline_location, remeasure, rules: Sequence) -> GateOutcome:
    """gate_run over the records of cells that finished."""
    nothing = nothing_measured(records)
    if nothing:
        return GateOutcome([], [nothing])
    homeless = [r for r in records if unfiled(r)]
    if homeless:
        named = ", ".join(f"{r['cell']} ({r.get('reason') or 'no reason given'})" for r in homeless[:5])
        more = f" and {len(homeless) - 5} more" if len(homeless) > 5 else ""
        return GateOutcome(
            [],
            [
                f"{len(homeless)} selected cell(s) were not measured and carry no environment, "
                f"so no baseline can judge them: {named}{more}"
            ],
        )
    unfit = [r for r in records if r.get("unfit")]
    if unfit:
        return GateOutcome(
            [],
            [
                f"{len(unfit)} record(s) are unfit for a timing gate ({unfit[0]['cell']}: "
                f"{unfit[0]['unfit']}); time the cells again alone: {TIME_ALONE}"
            ],
        )
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
        report = compare(groups[key], baselines[key], rules)
        suspects = speedup_suspects(report)
        if suspects and remeasure is not None:
            report = confirm(report, remeasure(suspects))
        report.baseline_location = str(baseline_location)
        reports.append(report)
    return GateOutcome(reports, [])
