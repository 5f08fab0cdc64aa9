"""An A/B verdict (perfgate.ab.process_rows.ABReport) as Markdown (a job summary or PR comment) and as JSON.
Imports no torch.

The Markdown says "B against A" throughout: a verdict line, the two environments, what cannot be compared,
the regressions, the improvements, notes, then every cell in two tables, regressions first: the timed rules
(wall, device and host clocks, eager and compiled ms: A → B, the change with its 95 % interval, the line
it had to cross) and the rest (cold compile, graph breaks, recompiles, memory, numerics, status). Every
text that comes from records or the command line (cell ids, reasons, paths, arguments) is escaped for
Markdown: a reason holding `|` or `<details>` must not break a table or the comment.
"""

from __future__ import annotations

import json
import re
from dataclasses import asdict
from pathlib import Path
from typing import Sequence

from perfgate.ab.process_rows import AB_SIDES, ABReport, ABRow, Comparison, geomeans
from perfgate.core import exits
from perfgate.core.clocks import BY_RATIO, DEVICE, HOST, WALL, shown_in
from perfgate.core.output import write_atomic
from perfgate.judge.rules import CLOCK_NAMES
from perfgate.render.report import MAX_CHARS
from perfgate.render.wording import finding_json, finding_text

VERDICT_ORDER = ("regression", "failed", "improvement", "ok")
# The timed columns: the clocks (a data-parallel cell's compute clock shows in the device column, as in the
# gate's report), then the absolute step times.
TIMED = (
    *((clock.ratio, clock.label) for clock in (WALL, DEVICE, HOST)),
    ("eager_ms", "eager ms"),
    ("compiled_ms", "compiled ms"),
)
OTHER = (
    ("compile_s", "compile s (cold)", ".1f"),
    ("graph_breaks", "graph breaks", "d"),
    ("recompiles", "recompiles", "d"),
    ("peak_mem_compiled_mb", "peak MiB compiled", ".0f"),
    ("peak_mem_eager_mb", "peak MiB eager", ".0f"),
    ("numerics", "numerics", ""),
    ("status", "status", ""),
)
MARKDOWN_SPECIAL = re.compile(r"([\\`*_\[\]<>#|~])")


def escape(text) -> str:
    """Plain text for Markdown: its special characters backslash-escaped, on one line."""
    return MARKDOWN_SPECIAL.sub(r"\\\1", " ".join(str(text).split()))


def _fmt(value, spec: str) -> str:
    if value is None:
        return "–"
    return escape(value) if not spec or isinstance(value, str) else format(value, spec)


def verdict_line(report: ABReport) -> str:
    runs = " + ".join(str(report.sides[s]["processes"]) for s in AB_SIDES)
    if report.errors:
        return f"**perfgate A/B: cannot compare** (exit 2), B against A, {runs} processes"
    state = "PASS" if not report.regressions else "FAIL"
    return (
        f"**perfgate A/B {state}**: {len(report.regressions)} regression(s), {len(report.improvements)} "
        f"improvement(s) in {len(report.rows)} cell(s), B against A, {runs} processes"
    )


def _sides_table(report: ABReport) -> list[str]:
    keys = ("torch", "transformers", "timm", "triton", "gpu")
    lines = ["| side | environment | " + " | ".join(keys) + " | processes |", "|---" * (len(keys) + 3) + "|"]
    for label in AB_SIDES:
        side = report.sides[label]
        versions = side.get("versions") or {}
        lines.append(
            f"| {label} | {escape(side.get('description') or '–')} | "
            + " | ".join(_fmt(versions.get(k), "") for k in keys)
            + f" | {side['processes']} |"
        )
    return lines


def _geomean_line(report: ABReport) -> str:
    a, b, cells = geomeans(report)
    if a is None or b is None:
        return "Geomean wall speedup: no cell compared on the wall clock."
    return f"Geomean wall speedup A {a:.3f}x → B {b:.3f}x ({b / a - 1:+.1%}) over {cells} cell(s)."


def _section(title: str, lines: Sequence[str]) -> list[str]:
    return [f"#### {title}", *lines, ""] if lines else []


def _finding_line(finding) -> str:
    rule = CLOCK_NAMES.get(finding.metric, finding.metric.replace("_", " "))
    return f"- {escape(finding.cell)} ({escape(rule)}) {escape(finding_text(finding))}"


def _head(report: ABReport) -> list[str]:
    lines = [verdict_line(report), "", *_sides_table(report), "", _geomean_line(report), ""]
    lines += _section("Cannot compare (exit 2)", [f"- {escape(e)}" for e in report.errors])
    lines += _section("Regressions (B worse than A)", [_finding_line(f) for f in report.regressions])
    lines += _section("Improvements (B better than A)", [_finding_line(f) for f in report.improvements])
    lines += _section("Notes", [f"- {escape(n)}" for n in report.notes])
    return lines


def _number(value: float | None) -> str:
    if value is None:
        return "–"
    return f"{value:.3f}" if abs(value) < 100 else f"{value:.1f}"


def _timed_cells(c: Comparison | None) -> tuple[str, str]:
    """("A → B", "change [lo, hi] / line") of one timed rule; the line * where noise set it."""
    if c is None:
        return "–", "–"
    values = f"{_number(c.a)} → {_number(c.b)}"
    if c.change is None:
        return values, escape(c.note or "not compared")
    mark = f" **{c.kind}**" if c.kind else ""
    line = _pct(c.line, signed=False) + ("\\*" if c.noise_limited else "")
    return values, f"{_pct(c.change)} [{_pct(c.lo)}, {_pct(c.hi)}] / {line}{mark}"


def _pct(fraction: float | None, signed: bool = True) -> str:
    """+12.3%; past +/-1000 % the digits say nothing more (a 2-process side's interval can reach 1e9 %)."""
    if fraction is None:
        return "–"
    if abs(fraction) > 10:
        return f"{'>+' if signed and fraction > 0 else '>'}1000%" if fraction > 0 else "<-1000%"
    return f"{fraction:+.1%}" if signed else f"{fraction:.1%}"


def _verdict(row: ABRow) -> str:
    verdict = f"**{row.verdict}**" if row.verdict == "regression" else row.verdict
    tripped = [escape(CLOCK_NAMES.get(m, m)) for m in row.tripped]
    return f"{verdict} ({', '.join(tripped)})" if tripped else verdict


def _timed_row(row: ABRow) -> str:
    cells = [escape(row.cell)]
    for metric, _ in TIMED:
        column = BY_RATIO.get(metric)
        if column is not None:
            metric = shown_in(column, lambda clock: row.comparison(clock.ratio) is not None).ratio
        cells += _timed_cells(row.comparison(metric))
    return "| " + " | ".join([*cells, _verdict(row)]) + " |"


def _other_row(row: ABRow) -> str:
    cells = [escape(row.cell)]
    for name, _, spec in OTHER:
        cells.append(f"{_fmt(row.a.get(name), spec)} → {_fmt(row.b.get(name), spec)}")
    return "| " + " | ".join([*cells, _verdict(row)]) + " |"


def _tables(rows: Sequence[ABRow]) -> list[str]:
    ordered = sorted(rows, key=lambda r: (VERDICT_ORDER.index(r.verdict), r.cell))
    timed = ["cell", *(h for _, label in TIMED for h in (f"{label} A → B", "change [95 %] / line")), "verdict"]
    other = ["cell", *(f"{label} A → B" for _, label, _ in OTHER), "verdict"]
    return [
        "| " + " | ".join(timed) + " |",
        "|---" * len(timed) + "|",
        *map(_timed_row, ordered),
        "",
        "| " + " | ".join(other) + " |",
        "|---" * len(other) + "|",
        *map(_other_row, ordered),
    ]


def legend(report: ABReport) -> str:
    return (
        f"B against A, cell by cell. Timed rules: A → B are geometric means over each side's processes; the "
        f"change is in the rule's terms (a speedup's fall is negative, a time's growth positive) with its "
        f"95 % interval from Student's two-sample t on the log of each process's value; line: the smallest "
        f"change that counts, the larger of the rule's threshold line and the t quantile at one-sided "
        f"{report.alpha:g} times the standard error (\\* where that noise line sets it: the processes "
        f"disagree; more of them narrow it). Counts and memory: the largest over processes; compile s: "
        f"the cold compile of each side's first process; status ok only where every process ran the cell "
        f"ok. docs/ab.md explains the test and what it can detect."
    )


def markdown(report: ABReport, max_chars: int = MAX_CHARS) -> str:
    """The verdict as GitHub Markdown, at most `max_chars`: unchanged cells leave the tables first."""
    head = "\n".join(_head(report))
    text = "\n".join([head, "#### All cells, B against A", *_tables(report.rows), "", legend(report), ""])
    if len(text) <= max_chars:
        return text
    kept = [r for r in report.rows if r.verdict != "ok"]
    text = "\n".join(
        [
            head,
            f"#### Cells ({len(report.rows) - len(kept)} unchanged cell(s) omitted to fit; see report.json)",
            *_tables(kept),
            "",
            legend(report),
            "",
        ]
    )
    return text if len(text) <= max_chars else text[: max_chars - 40] + "\n\n… (truncated; see report.json)\n"


def to_json(report: ABReport) -> dict:
    return {
        "exit_code": report.exit_code,
        "verdict": verdict_line(report).replace("**", ""),
        "alpha": report.alpha,
        "sides": report.sides,
        "errors": list(report.errors),
        "only_in_a": list(report.only_in_a),
        "only_in_b": list(report.only_in_b),
        "regressions": [finding_json(f) for f in report.regressions],
        "improvements": [finding_json(f) for f in report.improvements],
        "notes": list(report.notes),
        "rows": [asdict(row) for row in report.rows],
    }


def write(
    report: ABReport,
    out: Path,
    markdown_path: str | None = None,
    json_path: str | None = None,
    html_path: str | None = None,
) -> str:
    """report.md and report.json into the run's directory (and where asked, and the HTML page where asked);
    returns the Markdown."""
    if html_path:
        html(report, html_path)
    text = markdown(report)
    write_pair(out, text, to_json(report), markdown_path, json_path)
    return text


def write_pair(out: Path, text: str, payload: dict, markdown_path: str | None, json_path: str | None) -> None:
    """A run's report.md and report.json into its directory, and where asked (an A/B run's, a bisection's),
    each written whole or not at all: OutputError names a path that cannot be written."""
    data = json.dumps(payload, indent=2, sort_keys=True) + "\n"
    for path, content in (
        (out / "report.md", text),
        (out / "report.json", data),
        (markdown_path, text),
        (json_path, data),
    ):
        if path:
            write_atomic(path, content)


# ---------------------------------------------------------------------------------------------- HTML


def representative(report: ABReport, side: str) -> list[dict]:
    """One record per cell of a side for the HTML page's charts: the process with the median wall speedup
    (the lower one of an even count), its environment labelled with the side."""
    chosen = []
    cells = sorted({r["cell"] for p in report.processes if p.side == side for r in p.records})
    for cell in cells:
        records = [r for p in report.processes if p.side == side for r in p.records if r["cell"] == cell]
        ok = sorted((r for r in records if r.get("status") == "ok" and r.get("speedup")), key=lambda r: r["speedup"])
        record = ok[(len(ok) - 1) // 2] if ok else records[-1]
        env = record.get("env") or {}
        chosen.append({**record, "env": {**env, "fingerprint": f"{side} · {env.get('fingerprint') or 'unknown'}"}})
    return chosen


def html(report: ABReport, path: str | Path) -> None:
    """The HTML report (perfgate.render.html_report) of an A/B run: a section per side with its charts (the median
    process of each cell), and the A/B verdict where the gate's verdict goes."""
    from perfgate.render import html_report

    caption = " · ".join(f"{s}: {report.sides[s].get('description') or '?'}" for s in AB_SIDES)
    page = html_report.build(
        representative(report, "A") + representative(report, "B"),
        caption=caption,
        title="perfgate A/B report",
        sources=[f"{p.name}" for p in report.processes],
    )
    page.gate_lines = [
        verdict_line(report).replace("**", "").replace("perfgate A/B ", ""),
        *(f"regression {f.cell}: {finding_text(f)}" for f in report.regressions),
        *(f"improvement {f.cell}: {finding_text(f)}" for f in report.improvements),
        *(f"cannot compare: {e}" for e in report.errors),
    ]
    page.gate_failed = report.exit_code == exits.REGRESSION
    page.notes += report.notes
    html_report.write(page, path, None)
