"""A paired run's verdict over its cells, its exit code with the baseline gate's, and its words (Markdown for the
job summary and PR comment, JSON beside the gate's report). Imports no torch.

In a paired run the committed baseline judges what carries across machines exactly (status, numerics, graph
breaks, recompiles, memory, compile time: perfgate.judge.gate.baseline_rules_for, per record), and the paired comparison
judges the clocks and counts, which do not carry across machines.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

from perfgate.ab import paired
from perfgate.core import exits
from perfgate.render.report import md_text

# Each estimator (paired.ESTIMATORS, paired.PAIR_MEDIAN) in a report's words.
ESTIMATOR_WORDS = {
    "min": "each side's fastest round",
    "q10": "each side's 10th-percentile round",
    "q25": "each side's 25th-percentile round",
    "median": "each side's median round",
    "mean": "each side's mean round",
    paired.PAIR_MEDIAN: "the median of the round pairs' B/A ratios",
}


def estimator_words(estimators_text: str, pinned: Sequence[int] = ()) -> str:
    """A summary's `estimator` (paired.estimators' "pair_median (device: mean)") in a reader's words, naming the
    CPUs both sides' rounds shared where the paired median judged them (the minimum's rounds ran unpinned): "the
    median of the round pairs' B/A ratios, both sides on CPUs 14 and 15 (device: each side's mean round)". A
    name or part it does not know is left as it is."""
    head, _, rest = estimators_text.partition(" (")
    words = ESTIMATOR_WORDS.get(head, head)
    if head == paired.PAIR_MEDIAN and pinned:
        cpus = [str(c) for c in sorted(pinned)]
        listed = f"s {', '.join(cpus[:-1])} and {cpus[-1]}" if len(cpus) > 1 else f" {cpus[0]}"
        words += f", both sides on CPU{listed}"
    named = []
    for part in rest.removesuffix(")").split(", ") if rest else []:
        clock, colon, name = part.partition(": ")
        named.append(f"{clock}: {ESTIMATOR_WORDS.get(name, name)}" if colon else part)
    return f"{words} ({', '.join(named)})" if named else words


@dataclass
class PairedVerdict:
    """Each paired cell's summary (the record's `paired` field) by cell id, and their outcomes."""

    cells: dict[str, dict] = field(default_factory=dict)
    # Cells measured unpaired (data-parallel: their ranks hold the GPUs the sides would share) that no baseline
    # judges: never a pass. A run with a baseline leaves it empty, the baseline judging them.
    unjudged: list[str] = field(default_factory=list)

    @classmethod
    def of(cls, records, baseline: bool = True) -> "PairedVerdict":
        """The verdict over a run's records; `baseline`: whether a baseline judges the unpaired cells."""
        records = list(records)
        cells = {r["cell"]: r["paired"] for r in records if isinstance(r.get("paired"), dict)}
        alone = {r["cell"] for r in records if r.get("status") == "ok" and r["cell"] not in cells}
        return cls(cells, [] if baseline else sorted(alone))

    def outcome(self, cell: str) -> str:
        """The cell's paired outcome; one a record could not have had (null, "Regression", "error": a hand-edited
        or foreign record) is unsure, never a pass."""
        outcome = self.cells[cell].get("outcome")
        return outcome if outcome in paired.OUTCOMES else "unsure"

    def regressions(self) -> list[str]:
        return [c for c in self.cells if self.outcome(c) == "regression"]

    def unsure(self) -> list[str]:
        return [c for c in self.cells if self.outcome(c) == "unsure"]

    @property
    def exit_code(self) -> int:
        if self.regressions():
            return exits.REGRESSION
        return exits.UNUSABLE if self.unsure() or self.unjudged else exits.PASS

    def unjudged_words(self) -> str:
        return (
            f"{len(self.unjudged)} cell(s) ran unpaired and nothing judged them (a data-parallel cell is never "
            "paired: give --perf-baseline to judge it against a baseline, compare its two sides by whole processes "
            "with perfgate ab --processes N, or leave it out with --perf-data-parallel without): "
            + ", ".join(self.unjudged)
        )

    def combined_exit(self, gate_exit: int) -> int:
        return combined_exit(gate_exit, self)

    def write_reports(self, report_dir: str) -> None:
        """report.md and report.json in `report_dir`, where no baseline gate writes them."""
        import json
        from pathlib import Path

        from perfgate.core.output import write_atomic

        write_atomic(str(Path(report_dir) / "report.md"), self.markdown())
        body = {"report_schema": 1, "exit_code": self.exit_code, "errors": [], "reports": [], "paired": self.as_json()}
        write_atomic(str(Path(report_dir) / "report.json"), json.dumps(body, indent=2, sort_keys=True) + "\n")

    def lines(self) -> list[str]:
        """The terminal's closing lines: the verdict, and each cell that is not ok with why."""
        if not self.cells:
            return [f"perfgate paired: UNSURE (exit 2: never a pass): {self.unjudged_words()}"] if self.unjudged else []
        head = {0: "PASS", 1: "FAIL", 2: "UNSURE (exit 2: never a pass)"}[self.exit_code]
        out = [f"perfgate paired: {head}: {len(self.cells)} cell(s) against {self._against()}"]
        for cell in self.regressions() + self.unsure():
            out.append(f"  {cell}: {self.outcome(cell)}: {self._why(cell)}")
        if self.unjudged:
            out.append(f"  {self.unjudged_words()}")
        return out

    def _against(self) -> str:
        return next(iter(self.cells.values())).get("against", "?")

    def _why(self, cell: str) -> str:
        summary = self.cells[cell]
        if summary.get("error"):
            return summary["error"]
        bad = self._rules(cell, self.outcome(cell))
        words = [
            f"{r['side']} {r['clock']} {_pct(r['change'])} [{_pct(r['lo'])}, {_pct(r['hi'])}] vs {_pct(r['threshold'])}"
            + (f" (by process pair: {', '.join(_pct(x) for x in r['by_pair'])})" if r.get("by_pair") else "")
            for r in bad
        ]
        words += [
            f"{c['side']} step {c['verb']} {c['b']:,.0f} {c['label']}, base {c['a']:,.0f} ({_change(c)})"
            for c in summary.get("counts", [])
            if c["outcome"] == "regression"
        ]
        if any(r["clock"] == "device" for r in bad):
            words += kernel_words(summary.get("kernels") or [], {r["side"] for r in bad if r["clock"] == "device"})
        if self.outcome(cell) == "unsure":
            words.append(f"after {summary.get('duets')} process pair(s) and {summary.get('looks')} look(s)")
            words.append(what_decides(bad, cell))
        return "; ".join(filter(None, words))

    def _rules(self, cell: str, outcome: str) -> list[dict]:
        return [r for r in self.cells[cell].get("rules", []) if r["outcome"] == outcome]

    def _estimators(self) -> str:
        """How the cells' figures were taken, in words: each record's own (the device clock's mean, its minimum
        in a record judged before 2026-11-29 without fresh layouts; the paired median where both sides' rounds
        shared CPUs), the cells' words joined where they differ."""
        words = {
            estimator_words(summary.get("estimator") or paired.DEFAULT_ESTIMATOR, summary.get("pinned") or ())
            for summary in self.cells.values()
        }
        return "; ".join(sorted(words))

    def markdown(self) -> str:
        if not self.cells:
            return (
                f"## Paired timing: **UNSURE** (exit 2: never a pass)\n\n{md_text(self.unjudged_words())}\n"
                if self.unjudged
                else ""
            )
        head = {0: "PASS", 1: "**FAIL**", 2: "**UNSURE** (exit 2: never a pass)"}[self.exit_code]
        rows = [
            f"## Paired timing: {head}",
            "",
            f"Base: {md_text(self._against())}; this tree measured beside it on this runner, rounds alternated. "
            f"Each figure: this tree's step time against the base's, by {self._estimators()}, "
            "with its interval; a rule fails when the interval lies beyond its line, and passes when it lies "
            "inside.",
            "",
            "| cell | outcome | wall compiled | wall eager | device compiled | host compiled | counts | pairs |",
            "|---|---|---|---|---|---|---|---|",
        ]
        order = {o: i for i, o in enumerate(paired.OUTCOMES)}
        for cell in sorted(self.cells, key=lambda c: (order.get(self.outcome(c), 0), c)):
            summary = self.cells[cell]
            by = {(r["clock"], r["side"]): r for r in summary.get("rules", [])}
            shown = [
                _cell_text(by.get(key))
                for key in (("wall", "compiled"), ("wall", "eager"), ("device", "compiled"), ("host", "compiled"))
            ]
            pairs = by.get(("wall", "compiled"), {}).get("pairs", 0)
            outcome = self.outcome(cell) + (f": {md_text(summary['error'])}" if summary.get("error") else "")
            shown.append(_counts_text(summary.get("counts")))
            rows.append(f"| {md_text(cell)} | {outcome} | {' | '.join(shown)} | {pairs} |")
        notes = sorted({s["note"] for s in self.cells.values() if s.get("note")})
        notes += [self.unjudged_words()] if self.unjudged else []
        notes += [
            f"{cell}: unsure: {what_decides(self._rules(cell, 'unsure'), cell)}"
            for cell in self.unsure()
            if self._rules(cell, "unsure")
        ]
        for cell in self.regressions() + self.unsure():  # where a device rule's GPU time went
            summary = self.cells[cell]
            sides = {r["side"] for r in summary.get("rules", []) if r["clock"] == "device" and r["outcome"] != "ok"}
            notes += [f"{cell}: {words}" for words in kernel_words(summary.get("kernels") or [], sides)]
        return "\n".join(rows + [""] + [f"- {md_text(n)}" for n in notes]) + "\n"

    def as_json(self) -> dict:
        return {
            "exit_code": self.exit_code,
            "cells": {
                cell: {k: v for k, v in summary.items() if k != "rounds"} for cell, summary in self.cells.items()
            },
            "unjudged": self.unjudged,
        }


def what_decides(unsure: list[dict], cell: str) -> str:
    """What would decide an unsure cell, by why its first unsure rule is unsure (docs/gate.md, items 5 and 6).
    A process has a speed of its own for its life, which more rounds of the same processes cannot take out: on a
    host-bound step's wall clock it follows the CPU the process got (a host probe 3x apart between processes on
    the H100 cf962799), on the device clock one kernel's GPU time. Fresh processes, or a host that holds its
    speed, decide such a cell; an interval across the line with pairs that agree wants more rounds."""
    if not unsure:
        return ""
    rule, again = unsure[0], f'the cell measured again (-k "{cell}")'
    by_pair, line, wall = rule.get("by_pair") or [], rule["threshold"], rule["clock"] == "wall"
    cause = "a host-bound step's speed in each process" if wall else "each process's kernels"
    fresh = f"{again}, in fresh processes" + (" on a host that holds its speed" if wall else "")
    if by_pair and rule["lo"] > line and rule.get("pooled"):
        return (
            f"its interval lies past the {_pct(line)} line, but a process pair read ok on its own ({cause} may "
            f"differ): {fresh}"
        )
    if by_pair and rule["lo"] > line:
        return (
            f"its interval lies past the {_pct(line)} line, but a regression stands only where every process pair "
            f"shows it ({paired.CONFIRM_PAIRS.get(rule['clock'], paired.UNSURE_PAIRS)} for the {rule['clock']} "
            f"clock) and not all did ({cause} may differ): {fresh}"
        )
    if by_pair and min(by_pair) < line < max(by_pair):
        return (
            f"its process pairs read on both sides of the {_pct(line)} line ({cause}, which more rounds of the same "
            f"processes cannot change): {fresh}"
        )
    return f"its interval spans the {_pct(line)} line: more rounds would decide it: {again}"


def kernel_words(kernels: list[dict], sides: set[str], named: int = 3) -> list[str]:
    """Where a device rule's GPU time moved, per process pair: "compiled GPU time by kernel, pair 1: spin_kernel
    +0.200 ms (0 -> 0.200), ...; kept kernels 24.10 -> 24.46 ms" (paired_work.kernels_moved)."""
    out = []
    for k in kernels:
        if k["side"] not in sides:
            continue
        moved = ", ".join(
            f"{m['kernel'][:60]} {m['b_ms'] - m['a_ms']:+.3f} ms ({m['a_ms']:.3f} -> {m['b_ms']:.3f})"
            for m in k["moved"][:named]
        )
        total = f"kept kernels {k['a_ms']:.2f} -> {k['b_ms']:.2f} ms"
        out.append(f"{k['side']} GPU time by kernel, pair {k['pair']}: {moved}; {total}")
    return out


def _pct(x: float) -> str:
    return f"{x * 100:+.1f} %"


def _cell_text(rule: dict | None) -> str:
    if rule is None:
        return "-"
    mark = {"regression": " **worse**", "unsure": " unsure"}.get(rule["outcome"], "")
    return f"{_pct(rule['change'])} [{_pct(rule['lo'])}, {_pct(rule['hi'])}] / {rule['threshold'] * 100:g} %{mark}"


def _counts_text(counted: list[dict] | None) -> str:
    """The counts that moved past their band ("compiled GPU kernels +4.1 % **worse**"), else "same"."""
    if not counted:
        return "-"
    moved = [c for c in counted if c["outcome"] != "ok"]
    marks = {"regression": " **worse**", "fewer": " fewer"}
    return "; ".join(f"{c['side']} {c['label']} {_change(c)}{marks[c['outcome']]}" for c in moved) or "same"


def _change(count: dict) -> str:
    return _pct(count["change"]) if count["change"] is not None else "from none"


def combined_exit(gate_exit: int, verdict: PairedVerdict) -> int:
    """The run's exit: a regression shown by either judge is 1; else unsure or uncomparable is 2; else 0."""
    return exits.combined([gate_exit, verdict.exit_code])
