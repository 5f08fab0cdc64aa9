"""The A/B verdict: environment B against environment A, cell by cell, from the records of processes that
alternated on one machine (perfgate.ab.process_run runs them). Imports no torch.

The gate's own rule objects judge (ab_rules: default_rules plus the absolute step times), with the gate's
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
count, memory, compile-time, numerics and status rules see one cell per side (side_cell): counts and
memory the largest over processes, numerics failing if any process failed, status ok only if every
process ran the cell ok, and compile time the cold compile of the side's first process (its cache was
empty; the later ones compile from it): the cell's first call there, or, where that process precompiled
(`perfgate ab --precompile N`) and its cell found every graph in the cache, the precompile's first call of
the cell, made beside N-1 other compiles on both sides alike.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass, field, replace
from typing import ClassVar, Sequence

from perfgate.core import exits
from perfgate.core.record import TIME_ALONE, nothing_measured
from perfgate.core.stats import geomean, interval_sd, rel_spread, t_quantile, two_sample
from perfgate.core.validate import checked
from perfgate.judge.baseline_fold import fold_cell
from perfgate.judge.finding import AB, IMPROVEMENT, REGRESSION, Finding
from perfgate.judge.rules import SpeedupRule, default_rules

AB_SIDES = ("A", "B")
# One-sided false-alarm rate of one timed comparison when nothing changed. An A/B run has no confirm round,
# and a PR tier makes ~50 timed comparisons (10 cells x 5), so the per-comparison rate must be small for
# the run's: tests/test_ab_verdict.py simulates both (docs/ab.md has the rates).
ALPHA = 0.001
CONFIDENCE = 0.95  # the interval the report prints for each change
# Rounds behind each absolute step time (its in-run sd: the floor of the sd between processes).
ROUNDS_OF = {"eager_ms": "eager_round_ms", "compiled_ms": "compiled_round_ms"}
# sd of a median of n normal values ~ sqrt(pi / 2) sd / sqrt(n)
MEDIAN_SD = math.sqrt(math.pi / 2)


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


@dataclass(frozen=True)
class Process:
    """One pytest process of an A/B run and the records it wrote (one per cell)."""

    side: str  # "A" | "B"
    rep: int  # 1, 2, ... within its side
    records: tuple[dict, ...]
    cold: bool = False  # its side's compile cache was empty when it started
    # A cold process's precompile (<results>.precompile.json): cell id -> its cold first call, s.
    precompiled: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return f"{self.side}-{self.rep}"


@dataclass(frozen=True)
class Comparison:
    """One timed rule on one cell, B against A. `change`, `lo`, `hi` and `line` are in the rule's terms
    (a speedup's change, -0.05: 5 % lower; a time's, +0.05: 5 % slower); lo and hi bound the change with
    CONFIDENCE; `line` is the smallest change that counts (None: not compared)."""

    metric: str
    label: str
    a: float | None  # geometric mean over A's processes
    b: float | None
    change: float | None
    lo: float | None
    hi: float | None
    line: float | None
    noise_limited: bool
    t: float | None
    df: int | None
    n_a: int
    n_b: int
    kind: str | None  # REGRESSION | IMPROVEMENT | None
    note: str = ""  # why not compared


@dataclass(frozen=True)
class ABRow:
    cell: str
    verdict: str  # regression | improvement | failed | ok
    comparisons: tuple[Comparison, ...]
    a: dict  # side_cell of A
    b: dict
    tripped: tuple[str, ...] = ()  # metrics of this cell's findings

    def comparison(self, metric: str) -> Comparison | None:
        return next((c for c in self.comparisons if c.metric == metric), None)


@dataclass
class ABReport:
    sides: dict[str, dict]  # "A"/"B" -> {processes, versions, description}
    rows: list[ABRow]
    regressions: list[Finding]
    improvements: list[Finding]
    only_in_a: list[str]
    only_in_b: list[str]
    errors: list[str]  # why the run cannot be compared (exit 2)
    notes: list[str] = field(default_factory=list)
    alpha: float = ALPHA
    processes: list[Process] = field(default_factory=list, repr=False)

    @property
    def exit_code(self) -> int:
        if self.errors:
            return exits.UNUSABLE
        return exits.REGRESSION if self.regressions else exits.PASS


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
    report.notes = _notes(report, rules)
    return report


def _notes(report: ABReport, rules: Sequence) -> list[str]:
    notes = []
    for rule in (r for r in rules if isinstance(r, SpeedupRule)):
        limited = [(row.cell, c) for row in report.rows if (c := row.comparison(rule.metric)) and c.noise_limited]
        if limited:
            names = ", ".join(f"{cell} ({c.line:.1%})" for cell, c in limited)
            notes.append(
                f"{len(limited)} cell(s) noise-limited on {rule.label}: the processes of a side "
                f"disagree so much that only a change past the line shown counts (more processes "
                f"a side narrow it: --processes): {names}"
            )
    cold = [
        s
        for s in AB_SIDES
        if not any(
            row.a.get("compile_cache") == "fresh" if s == "A" else row.b.get("compile_cache") == "fresh"
            for row in report.rows
        )
    ]
    if report.rows and cold:
        notes.append(
            f"no cold compile on side {', '.join(cold)} (its first process did not start with an "
            f"empty cache): compile time not compared"
        )
    if report.rows:
        notes.append(
            f"where the figures come from: timed figures, every process of a side; compile time, the "
            f"cold process ({_names(report, lambda p: p.cold)}{_precompiled(report)}); numerics, the processes "
            f"that judged it ({_names(report, _judged_numerics)}; the later ones ran with --perf-numerics=off)"
        )
    return notes


def _precompiled(report: ABReport) -> str:
    names = _names(report, lambda p: p.cold and p.precompiled)
    return "" if names == "none" else f"; {names}: its precompile's first calls, compiled several at once"


def _judged_numerics(process: Process) -> bool:
    return any(r.get("numerics") in ("pass", "fail") for r in process.records)


def _names(report: ABReport, which) -> str:
    return ", ".join(p.name for p in sorted(report.processes, key=lambda p: (p.side, p.rep)) if which(p)) or "none"


def geomeans(report: ABReport, metric: str = "speedup") -> tuple[float | None, float | None, int]:
    """Geometric means of a metric over the cells compared on it: (A, B, cells)."""
    pairs = [(c.a, c.b) for row in report.rows if (c := row.comparison(metric)) and c.change is not None]
    return geomean([a for a, _ in pairs]), geomean([b for _, b in pairs]), len(pairs)


__all__ = [
    "ABReport",
    "ABRow",
    "Comparison",
    "Process",
    "StepTimeRule",
    "ab_rules",
    "judge_ab",
    "judge_cell",
    "side_cell",
    "compare_timed",
    "timed_finding",
    "geomeans",
    "versions",
    "ALPHA",
    "AB_SIDES",
]
