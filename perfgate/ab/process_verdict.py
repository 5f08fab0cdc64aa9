"""The A/B verdict: environment B against environment A, cell by cell, from the records of processes that
alternated on one machine (perfgate.ab.process_run runs them), into an ABReport (perfgate.ab.process_rows).
Imports no torch.

The gate's own rule objects judge (perfgate.ab.process_rules.ab_rules: default_rules plus the absolute step
times), with the gate's
exit codes: 0 pass, 1 a regression, 2 cannot compare. What differs is where the noise comes from: a
gate knows a baseline's run-to-run spread from 5 or more runs; here each side has a few processes (3 by
default) and nothing else. The timed rules (wall, device and host clocks, eager and compiled ms) therefore
take Student's two-sample t on the log of each process's value (perfgate.core.stats.two_sample; docs/ab.md
says why, and what 3 against 3 can and cannot see):

    d      = the rule's log drop from A's geometric mean over processes to B's   (> 0: B is worse)
    se     = sqrt(s_A^2 / n_A + s_B^2 / n_B), each s the sd of log values between that side's processes,
             floored at its processes' own in-run sd
    df     = n_A + n_B - 2
    regression  iff  d > q * se  and  d > max(t - q * se, t / 2)     q: the t quantile at 1 - ALPHA, df

i.e. the rule's two lines (perfgate.judge.rules.SpeedupRule.lines_for) with Student's quantile for its z. The
count, memory, compile-time, numerics and status rules see one cell per side (side_cell), folded as a
baseline's runs are (perfgate.judge.baseline_fold): counts the median over processes, with their range where
they lie past the count's band from it (A's range widens the rule; B is judged by its median), memory the
largest over processes, numerics failing if any process failed, status ok only if every
process ran the cell ok, and compile time the cold compile of the side's first process (its cache was
empty; the later ones compile from it): the cell's first call there, or, where that process precompiled
(`perfgate ab --precompile N`) and its cell found every graph in the cache, the precompile's first call of
the cell, made beside N-1 other compiles on both sides alike.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import replace
from typing import Sequence

from perfgate.ab.process_rows import AB_SIDES, ABReport, ABRow, Comparison, Process, report_notes
from perfgate.ab.process_rules import ALPHA, CONFIDENCE, ab_rules
from perfgate.core.record import TIME_ALONE, nothing_measured
from perfgate.core.stats import geomean, interval_sd, rel_spread, t_quantile, two_sample
from perfgate.core.validate import checked
from perfgate.judge.baseline_fold import fold_cell
from perfgate.judge.finding import AB, IMPROVEMENT, REGRESSION, Finding
from perfgate.judge.rules import SpeedupRule

# Rounds behind each absolute step time (its in-run sd: the floor of the sd between processes).
ROUNDS_OF = {"eager_ms": "eager_round_ms", "compiled_ms": "compiled_round_ms"}
# sd of a median of n normal values ~ sqrt(pi / 2) sd / sqrt(n)
MEDIAN_SD = math.sqrt(math.pi / 2)


# ---------------------------------------------------------------------------------------------- one side


def side_cell(cell_id: str, processes: Sequence[Process]) -> dict:
    """One side's cell for the count, memory, compile-time, numerics and status rules (the module
    docstring says how it is folded)."""
    records = [p_records[cell_id] for p_records in (_by_cell(p) for p in processes) if cell_id in p_records]
    if not records:
        return {"cell": cell_id, "status": "failed", "reason": "no record", "processes": len(processes)}
    # The oldest record's schema: a rule that needs a newer one (compiled memory) then leaves the cell out.
    cell = {
        **fold_cell(records),
        "cell": cell_id,
        "processes": len(processes),
        "schema": min(r.get("schema") or 1 for r in records),
    }
    not_ok = [r for r in records if r.get("status") != "ok"]
    missing = len(processes) - len(records)
    if cell["status"] == "ok" and (not_ok or missing):
        first = not_ok[0] if not_ok else {"status": "failed", "reason": "no record (the process stopped?)"}
        cell.update(
            status=first["status"],
            reason=f"{first['status']} in {len(not_ok) + missing} of "
            f"{len(processes)} processes: {first.get('reason') or '?'}",
        )
    cold = next((p for p in processes if p.cold), None)
    cold_record = _by_cell(cold).get(cell_id) if cold else None
    compile_s = cold_compile_s(cold_record, cold.precompiled.get(cell_id)) if cold else None
    # The cold compile: the compile-time rule judges "fresh" (cold) compiles only.
    cell.update(compile_s=compile_s, compile_cache="fresh" if compile_s is not None else "warm")
    return cell


def cold_compile_s(record: dict | None, precompiled_s: float | None) -> float | None:
    """A cold process's compile of the cell, s: its record's first call, unless that call found every graph
    in the cache (its precompile compiled them: then the precompile's first call, or None without one)."""
    if record is None or record.get("status") != "ok":
        return None
    if record.get("compile_cache_hits") and not record.get("compile_cache_misses"):
        return precompiled_s
    return record.get("compile_s")


def _by_cell(process: Process) -> dict[str, dict]:
    return {r["cell"]: r for r in process.records}


def _in_run_sd(record: dict, metric: str) -> float:
    """A process's own sampling sd of log `metric`: from its interval (ratios) or its rounds (ms)."""
    rounds = ROUNDS_OF.get(metric)
    if rounds is None:
        return interval_sd(record.get(f"{metric}_lo"), record.get(f"{metric}_hi"))
    values = record.get(rounds) or []
    spread = rel_spread(values)
    return MEDIAN_SD * spread / math.sqrt(len(values)) if spread else 0.0


# ---------------------------------------------------------------------------------------------- timed rules


def compare_timed(
    rule: SpeedupRule, cell_id: str, a_records: Sequence[dict], b_records: Sequence[dict], alpha: float = ALPHA
) -> Comparison:
    """Student's t on one timed metric of one cell (both sides' records all ok)."""
    m = rule.metric
    a = [r[m] for r in a_records if r.get(m) and r[m] > 0]
    b = [r[m] for r in b_records if r.get(m) and r[m] > 0]
    empty = Comparison(
        m, rule.label, geomean(a), geomean(b), None, None, None, None, False, None, None, len(a), len(b), None
    )
    if min(len(a_records), len(b_records)) < 2:  # Student's t has no spread to go on
        return _not_compared(empty, f"{len(a_records)} + {len(b_records)} processes: not compared (2 a side at least)")
    if len(a) < len(a_records):
        return _not_compared(
            empty,
            "not measured in A" if not a else f"measured in {len(a)} of {len(a_records)} A processes: not compared",
        )
    if len(b) < len(b_records):
        notes = {note for r in b_records if not r.get(m) and (note := r.get("clocks_note"))}
        return _not_compared(empty, f"missing in B ({'; '.join(sorted(notes)) or 'no reason given'})", kind=REGRESSION)
    floor_a = statistics.median(_in_run_sd(r, m) for r in a_records)
    floor_b = statistics.median(_in_run_sd(r, m) for r in b_records)
    test = two_sample(a, b, floor_a, floor_b)
    ref, now = geomean(a), geomean(b)
    if ref is None or now is None:  # cannot be: each side has 2 or more values > 0 (above)
        raise ValueError(f"{cell_id} {m}: no geometric mean of {a} and {b}")
    z = t_quantile(1 - alpha, test.df)
    cur = b_records[0]  # the model's own threshold, where its record carries one (record "gate")
    significance, size = rule.lines_for(test.se, cur, z)
    line = max(significance, size)
    d = rule.log_drop(ref, now)
    kind = None if abs(d) <= line else REGRESSION if d > 0 else IMPROVEMENT
    ends = sorted(rule.change(1.0, math.exp(end)) for end in test.interval(CONFIDENCE))
    return Comparison(
        m,
        rule.label,
        ref,
        now,
        rule.change(ref, now),
        ends[0],
        ends[1],
        rule.fraction(line, loss=d >= 0),
        significance > rule.log_threshold(cur) + 1e-12,
        test.t,
        test.df,
        test.n_a,
        test.n_b,
        kind,
    )


def _not_compared(comparison: Comparison, note: str, kind: str | None = None) -> Comparison:
    return replace(comparison, note=note, kind=kind)


def timed_finding(rule: SpeedupRule, cell_id: str, c: Comparison) -> Finding:
    """A timed comparison that tripped, as a finding of side B against side A (a figure missing in B: `missing`)."""
    form = rule.form if c.change is not None else "missing"
    if c.kind is None:
        raise ValueError(f"{cell_id} {rule.metric}: the comparison tripped nothing, so it is no finding")
    return Finding(
        cell_id,
        rule.metric,
        c.kind,
        c.a,
        c.b,
        c.line,
        form=form,
        loss=c.kind == REGRESSION,
        sides=AB,
        clock=rule.clock,
        label=rule.label,
        change=c.change,
        lo=c.lo,
        hi=c.hi,
        note=c.note,
        confidence=CONFIDENCE,
        t=c.t,
        df=c.df,
        processes=(c.n_a, c.n_b),
    )


# ---------------------------------------------------------------------------------------------- other rules


def _other_findings(rules: Sequence, a_cell: dict, b_cell: dict) -> list[Finding]:
    """The untimed rules on one cell a side: the gate's findings, read as B against A."""
    return [replace(finding, sides=AB) for rule in rules if (finding := rule.check(a_cell, b_cell)) is not None]


# ---------------------------------------------------------------------------------------------- a cell


def judge_cell(
    cell_id: str, a_procs: Sequence[Process], b_procs: Sequence[Process], rules: Sequence, alpha: float = ALPHA
) -> tuple[ABRow, list[Finding]]:
    a_cell, b_cell = side_cell(cell_id, a_procs), side_cell(cell_id, b_procs)
    timed = [r for r in rules if isinstance(r, SpeedupRule) and r.applies(a_cell)]
    findings = _other_findings([r for r in rules if not isinstance(r, SpeedupRule)], a_cell, b_cell)
    comparisons = []
    if a_cell["status"] == "ok" and b_cell["status"] == "ok":
        a_recs = [_by_cell(p)[cell_id] for p in a_procs]
        b_recs = [_by_cell(p)[cell_id] for p in b_procs]
        for rule in timed:
            c = compare_timed(rule, cell_id, a_recs, b_recs, alpha)
            comparisons.append(c)
            if c.kind is not None:
                findings.append(timed_finding(rule, cell_id, c))
    kinds = {f.kind for f in findings}
    verdict = (
        REGRESSION
        if REGRESSION in kinds
        else IMPROVEMENT
        if IMPROVEMENT in kinds
        else "ok"
        if a_cell["status"] == b_cell["status"] == "ok"
        else "failed"
    )
    order = [r.metric for r in rules]
    tripped = tuple(sorted({f.metric for f in findings}, key=order.index))
    return ABRow(cell_id, verdict, tuple(comparisons), a_cell, b_cell, tripped), findings


# ---------------------------------------------------------------------------------------------- the run


def versions(processes: Sequence[Process]) -> dict[str, str]:
    """The environment a side ran in, from its records: each version, or "a / b" where processes differ."""
    keys = ("gpu", "torch", "triton", "transformers", "timm", "python", "cuda", "cpu_model")
    seen: dict[str, list] = {k: [] for k in keys}
    for record in (r for p in processes for r in p.records):
        env = record.get("env") or {}
        for key in keys:
            if env.get(key) is not None and env[key] not in seen[key]:
                seen[key].append(env[key])
    return {k: " / ".join(map(str, v)) for k, v in seen.items() if v}


def judge_ab(
    processes: Sequence[Process],
    rules: Sequence | None = None,
    alpha: float = ALPHA,
    descriptions: dict[str, str] | None = None,
) -> ABReport:
    """The verdict of an A/B run from its complete processes. Records are checked as the gate checks them
    (perfgate.core.validate.checked: impossible figures on an ok record make it a failed cell), and records
    timed by xdist workers that shared the machine (`unfit`) cannot be compared: exit 2."""
    rules = ab_rules() if rules is None else tuple(rules)
    processes = [replace(p, records=tuple(checked(r) for r in p.records)) for p in processes]
    by_side = {s: sorted((p for p in processes if p.side == s), key=lambda p: p.rep) for s in AB_SIDES}
    cells = {s: {r["cell"] for p in by_side[s] for r in p.records} for s in AB_SIDES}
    errors = [
        f"{s} has {len(by_side[s])} complete process(es); a verdict needs 2 or more a side "
        f"(perfgate ab --resume DIR runs the rest)"
        for s in AB_SIDES
        if len(by_side[s]) < 2
    ]
    nothing = nothing_measured([r for p in processes for r in p.records]) if processes else None
    errors += [nothing] if nothing else []  # both sides skipping every cell (no GPU) once passed
    unfit = [(p.name, r) for p in processes for r in p.records if r.get("unfit")]
    if unfit:
        name, record = unfit[0]
        errors.append(
            f"{len(unfit)} record(s) are unfit for a timing verdict ({name} {record['cell']}: "
            f"{record['unfit']}); run the sides alone: {TIME_ALONE}"
        )
    only_a, only_b = sorted(cells["A"] - cells["B"]), sorted(cells["B"] - cells["A"])
    if only_a or only_b:
        errors.append(
            f"A and B ran different cells: only in A: {', '.join(only_a) or 'none'}; only in B: "
            f"{', '.join(only_b) or 'none'}"
        )
    rows, regressions, improvements = [], [], []
    # A run cut short (a side with 1 process) still shows what was measured: the counts, memory, numerics
    # and status are judged as always, the timed figures are shown but not compared; the exit stays 2.
    if by_side["A"] and by_side["B"]:
        for cell_id in sorted(cells["A"] & cells["B"]):
            row, findings = judge_cell(cell_id, by_side["A"], by_side["B"], rules, alpha)
            rows.append(row)
            regressions += [f for f in findings if f.kind == REGRESSION]
            improvements += [f for f in findings if f.kind == IMPROVEMENT]
    sides = {
        s: {
            "processes": len(by_side[s]),
            "versions": versions(by_side[s]),
            "description": (descriptions or {}).get(s, ""),
        }
        for s in AB_SIDES
    }
    report = ABReport(
        sides, rows, regressions, improvements, only_a, only_b, errors, alpha=alpha, processes=list(processes)
    )
    report.notes = report_notes(report, rules)
    return report


__all__ = [
    "judge_ab",
    "judge_cell",
    "side_cell",
    "compare_timed",
    "timed_finding",
    "versions",
]
