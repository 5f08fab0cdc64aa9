"""What an A/B verdict by processes is made of: the processes judged (Process), a Comparison per timed rule, an
ABRow per cell and the ABReport with its exit code; and what a report says over its rows, its notes and the
geometric means. Imports no torch; perfgate.ab.process_verdict fills them in, perfgate.ab.process_report shows them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from perfgate.ab.process_rules import ALPHA
from perfgate.core import exits
from perfgate.core.stats import geomean
from perfgate.judge.finding import Finding
from perfgate.judge.rules import SpeedupRule

AB_SIDES = ("A", "B")


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


def report_notes(report: ABReport, rules: Sequence) -> list[str]:
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
