"""Render a GateReport as Markdown (a GitHub job summary or PR comment) and as JSON. Imports no torch.

The Markdown starts with a one-line verdict and the geomeans, then what needs a human (regressions), then
what is good news (improvements), then advisories (never fail the gate), then what was not compared
(missing, new, failed), then every cell in two tables: the three clocks (wall and device speedup, host ms
eager -> compiled, busy %, each clock's line, the rules that tripped; a data-parallel cell's device column
is its compute clock), and the rest (compile, memory, ...).
It also holds what every report prints with: `fmt`, `shown` (a record field in its unit's format, from
perfgate.core.record.FIELDS), Markdown escaping, and `text_table` for `perfgate results` and `history show`.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Sequence

from perfgate.core.clocks import DEVICE, HOST, WALL, shown_in
from perfgate.core.record import FIELD
from perfgate.core.record_reading import compiled_peak_is_right
from perfgate.core.text import visible
from perfgate.judge.gate import GateReport
from perfgate.judge.rules import CLOCK_NAMES
from perfgate.judge.triage import triage
from perfgate.render.wording import finding_json, finding_text

# A GitHub PR comment holds 65 536 characters; keep a margin for the CLI's other reports and headers.
MAX_CHARS = 60_000

# Table order: what needs attention first.
VERDICT_ORDER = ("regression", "failed", "improvement", "advisory", "new", "missing", "ok")

CLOCK_COLUMNS = (
    "cell",
    "wall speedup [lo, hi]",
    "baseline",
    "change",
    "line",
    "noise",
    "device speedup",
    "change",
    "line",
    "host ms eager → compiled",
    "change",
    "line",
    "busy",
    "verdict (rules)",
)
COLUMNS = (
    "cell",
    "eager ms",
    "compiled ms",
    "compile s",
    "graph breaks",
    "recompiles",
    "peak MiB (compiled)",
    "numerics",
    "verdict (rules)",
)
# The record fields behind COLUMNS' middle columns, in order (shown in their units' formats).
TABLE_FIELDS = ("eager_ms", "compiled_ms", "compile_s", "graph_breaks", "recompiles", "peak_mem_compiled_mb")


# What lets free text escape its place: HTML, links and images ([...]), code spans, table cells, new lines.
# Emphasis marks (* _) are left alone: harmless, and escaping them mangles cell ids like inductor_default.
# ">" stays: without "<" it opens no tag, and "0 -> 3" reads better raw.
_MD_SPECIAL = str.maketrans({c: f"\\{c}" for c in "\\`[]|"} | {"<": "&lt;", "&": "&amp;", "\n": " ", "\r": " "})


def md_text(text) -> str:
    """Free text (a reason, a message, a note) as literal Markdown: a cell's failure text is whatever the
    exception said, and a PR comment must not render HTML or links from it."""
    return visible(text).translate(_MD_SPECIAL)


def md_code(text) -> str:
    """A name as a code span that stays one span and one table cell."""
    return "`" + visible(text).replace("`", "'").replace("|", "\\|") + "`"


# How every report prints a value of each unit (perfgate.core.record_field.Field.unit).
UNIT_FORMATS = {"ms": ".2f", "s": ".1f", "x": ".3f", "MiB": ".0f", "count": "d", "samples": "d"}


def fmt(value, spec: str) -> str:
    """A value in a format spec, "–" where it is null."""
    return "–" if value is None else format(value, spec)


def first_call(seconds: float | None, cache: str | None) -> str:
    """A first compiled call's seconds, with what it found in the inductor cache (record_reading.first_call_cache)
    unless that was nothing: a warm compile is no first-call time a user meets on a new machine."""
    text = fmt(seconds, ".1f")
    return text if seconds is None or cache in (None, "cold", "no cache") else f"{text} ({cache})"


def ratio_text(record: dict, name: str = "speedup") -> str:
    """ "2.249× [2.239, 2.265]": a record's clock ratio with its 95 % interval where it has one; – where null."""
    value, lo, hi = record.get(name), record.get(f"{name}_lo"), record.get(f"{name}_hi")
    if value is None:
        return "–"
    return f"{value:.3f}×" + ("" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]")


def peaks_text(record: dict) -> str:
    """ "9000 → 7000": a record's eager and compiled peak MiB, the compiled one only where its schema measured
    it right (perfgate.core.record_reading.compiled_peak_is_right)."""
    compiled = record.get("peak_mem_compiled_mb") if compiled_peak_is_right(record) else None
    return f"{fmt(record.get('peak_mem_eager_mb'), '.0f')} → {fmt(compiled, '.0f')}"


def status_text(record: dict) -> str:
    """A record's status, marked where a zoo known issue expects it (so a known failure is not read as new);
    an ok cell under a known issue says the issue did not occur, the hint to retire it (pytest's XPASS)."""
    status = record.get("status") or "?"
    if not record.get("known_issue"):
        return status
    return status + (" (known issue did not occur)" if status == "ok" else " (known issue)")


def _value(source, name: str):
    """Field `name` of a record (a dict) or of a gate row (its attribute of that name)."""
    return source.get(name) if isinstance(source, dict) else getattr(source, name)


def shown(source, name: str) -> str:
    """The record field `name` of a record or a gate row in its unit's format. A name the record table
    lacks raises KeyError instead of showing dashes."""
    return fmt(_value(source, name), UNIT_FORMATS[FIELD[name].unit])


def text_table(rows: Sequence[Sequence[str]]) -> str:
    """Rows of texts (the first the header) as a plain table for a terminal, columns aligned by spaces; control
    characters shown escaped (a reason's ESC sequence recoloured the terminal, its \\r\\n broke the row)."""
    rows = [[visible(value) for value in row] for row in rows]
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows)


def _pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.1%}"


def verdict_line(report: GateReport) -> str:
    n_cells = sum(1 for r in report.rows if r.verdict != "missing")
    state = "PASS" if report.passed else "FAIL"
    advisories = f", {len(report.advisories)} advisory(ies)" if report.advisories else ""
    return (
        f"**perfgate {state}**: {len(report.regressions)} regression(s), "
        f"{len(report.improvements)} improvement(s){advisories} in {n_cells} cell(s) "
        f"({report.fingerprint}, tier {report.tier})"
    )


def geomean_line(report: GateReport) -> str:
    now, ref = report.geomean_speedup, report.geomean_baseline
    if now is None or ref is None:
        return "Geomean speedup: no cell ok in both the run and the baseline."
    both = sum(1 for r in report.rows if r.change is not None)
    return (
        f"Geomean speedup {now:.3f}x vs baseline {ref:.3f}x ({_pct(now / ref - 1)}) over {both} "
        f"cell(s); baseline from {report.baseline_runs} run(s)."
    )


def _rule_name(finding) -> str:
    """Which rule tripped: "wall clock", "device clock", "host clock", or the metric's name."""
    clock = CLOCK_NAMES.get(finding.metric)
    return f"{clock} clock" if clock else finding.metric.replace("_", " ")


def _section(title: str, lines: Sequence[str]) -> list[str]:
    return [f"#### {title}", *lines, ""] if lines else []


def _failed_line(report: GateReport, cell: str) -> str:
    row = next(r for r in report.rows if r.cell == cell)
    known = "" if row.verdict == "regression" else " (not ok in the baseline either)"
    return f"- {md_code(cell)} {row.status}: {md_text(row.reason or 'no reason given')}{known}"


def _verdict(row) -> str:
    """ "**regression** (device, host)": the verdict and the clocks or metrics of the rules that tripped."""
    verdict = f"**{row.verdict}**" if row.verdict == "regression" else row.verdict
    tripped = [CLOCK_NAMES.get(m, m) for m in row.tripped]
    return f"{verdict} ({', '.join(tripped)})" if tripped else verdict


def _line(clock) -> str:
    """A clock's effective line, * where noise pushed it past the threshold asked for."""
    if clock is None:
        return "–"
    return fmt(clock.threshold, ".1%") + ("*" if clock.noise_limited else "")


def _busy(source) -> str:
    """ "host-bound 61 %": the compiled step's GPU-busy share and what its wall time follows (a record's or a
    gate row's)."""
    busy = _value(source, "busy_compiled")
    return "–" if busy is None else f"{_value(source, 'bound') or '?'}-bound {100 * busy:.0f} %"


def _host_ms(row) -> str:
    if row.eager_host_ms is None and row.compiled_host_ms is None:
        return "–"
    return f"{shown(row, 'eager_host_ms')} → {shown(row, 'compiled_host_ms')}"


def _speedup(source) -> str:
    """ "2.249 [2.239, 2.265]": the wall speedup and its 95 % interval, of a record or a gate row."""
    return f"{shown(source, 'speedup')} [{shown(source, 'speedup_lo')}, {shown(source, 'speedup_hi')}]"


def _clock_row(row) -> str:
    def has(clock) -> bool:
        return (c := row.clock(clock.ratio)) is not None and c.value is not None

    wall, device, host = (row.clock(shown_in(column, has).ratio) for column in (WALL, DEVICE, HOST))
    interval = _speedup(row) if row.speedup is not None else "–"
    noise = fmt(row.noise, ".1%") + ("?" if row.run_to_run_known is False else "")
    cells = (
        md_code(row.cell),
        interval,
        fmt(row.baseline_speedup, ".3f"),
        _pct(row.change),
        _line(wall),
        noise,
        fmt(device.value if device else None, ".3f"),
        _pct(device.change if device else None),
        _line(device),
        _host_ms(row),
        _pct(host.change if host else None),
        _line(host),
        _busy(row),
        _verdict(row),
    )
    return "| " + " | ".join(cells) + " |"


def _table_row(row) -> str:
    cells = (md_code(row.cell), *(shown(row, name) for name in TABLE_FIELDS), row.numerics or "–", _verdict(row))
    return "| " + " | ".join(cells) + " |"


def _tables(rows: Sequence) -> list[str]:
    ordered = sorted(rows, key=lambda r: (VERDICT_ORDER.index(r.verdict), r.cell))
    return [
        "| " + " | ".join(CLOCK_COLUMNS) + " |",
        "|" + "---|" * len(CLOCK_COLUMNS),
        *(_clock_row(r) for r in ordered),
        "",
        "| " + " | ".join(COLUMNS) + " |",
        "|" + "---|" * len(COLUMNS),
        *(_table_row(r) for r in ordered),
    ]


# A baseline from other machines cannot tell a slower host from added host work (docs/gate.md).
PAIRED_HINT = (
    "- **host-side** cells need the base revision measured beside this tree on one runner: "
    "`pytest ... --perf-against BASE_REV` (the PR workflow runs it; docs/gate.md)"
)


def _head(report: GateReport) -> list[str]:
    lines = [verdict_line(report), "", geomean_line(report), ""]
    lines += _section(
        "Regressions", [f"- {md_code(f.cell)} ({_rule_name(f)}) {md_text(finding_text(f))}" for f in report.regressions]
    )
    triaged = triage(report)
    lines += _section(
        "Triage (what each flagged cell looks like, and the command that measures it again)",
        [
            f"- {md_code(t.cell)} **{t.kind}**: {md_text(t.why)}; {md_code(t.command)}; {md_text(t.env_text())}"
            for t in triaged
        ]
        + ([PAIRED_HINT] if any(t.kind == "host-side" for t in triaged) else []),
    )
    lines += _section("Improvements", [f"- {md_code(f.cell)} {md_text(finding_text(f))}" for f in report.improvements])
    lines += _section(
        "Advisories (reported only: never fail the gate, not re-measured)",
        [f"- {md_code(f.cell)} {md_text(finding_text(f))}" for f in report.advisories],
    )
    lines += _section(
        "Missing (in the baseline, not in this run; not gated)", [f"- {md_code(c)}" for c in report.missing]
    )
    lines += _section("New (not in the baseline; not gated)", [f"- {md_code(c)}" for c in report.new])
    lines += _section("Failed or skipped in this run", [_failed_line(report, c) for c in report.failed])
    lines += _section("Notes", [f"- {md_text(n)}" for n in report.notes])
    return lines


LEGEND = (
    "Three clocks per cell. Wall speedup: eager/compiled ms per step (median and 95 % interval over "
    "rounds), host stalls included; change is against the baseline's median over runs. Device speedup: "
    "eager/compiled GPU-busy ms per step. Host ms: to issue one step, eager → compiled; its change is "
    "that of compiled host time relative to eager's (+ is worse). Busy: the compiled step's GPU-busy "
    "share of its wall time; below 90 % it is host-bound and its wall speedup follows the host CPU. Line: "
    "the smallest change that fails the gate on that clock (it must also be at least 2 noise sds, and "
    "trip again when re-measured); * where noise pushes it past the threshold asked for, so a change of "
    "that size may go uncaught. Noise: the sd of the wall drop the gate assumed, from the baseline's "
    "run-to-run spread and both runs' intervals; ? where run-to-run noise is unknown (fewer than 2 "
    "baseline runs). Verdict (rules): the clocks or metrics whose rules tripped."
)


def markdown(report: GateReport, max_chars: int = MAX_CHARS) -> str:
    """The report as GitHub Markdown, at most `max_chars`: unchanged cells leave the tables first."""
    head = "\n".join(_head(report))
    text = "\n".join([head, "#### All cells", *_tables(report.rows), "", LEGEND, ""])
    if len(text) <= max_chars:
        return text
    kept = [r for r in report.rows if r.verdict != "ok"]
    omitted = len(report.rows) - len(kept)
    text = "\n".join(
        [
            head,
            f"#### Cells ({omitted} unchanged cell(s) omitted to fit; see the JSON report)",
            *_tables(kept),
            "",
            LEGEND,
            "",
        ]
    )
    return text if len(text) <= max_chars else text[: max_chars - 40] + "\n\n… (truncated; see the JSON report)\n"


def to_json(report: GateReport) -> dict:
    """The report as plain JSON-able data (no records or baseline: those are files already)."""
    return {
        "fingerprint": report.fingerprint,
        "tier": report.tier,
        "passed": report.passed,
        "exit_code": report.exit_code,
        "verdict": verdict_line(report).replace("**", ""),
        "geomean_speedup": report.geomean_speedup,
        "geomean_baseline": report.geomean_baseline,
        "baseline_runs": report.baseline_runs,
        "regressions": [finding_json(f) for f in report.regressions],
        "improvements": [finding_json(f) for f in report.improvements],
        "advisories": [finding_json(f) for f in report.advisories],
        "missing": list(report.missing),
        "new": list(report.new),
        "failed": list(report.failed),
        "notes": list(report.notes),
        "rows": [asdict(r) for r in report.rows],
        "triage": [asdict(t) for t in triage(report)],
    }


RECORD_COLUMNS = (
    "cell",
    "status",
    "eager ms",
    "compiled ms",
    "speedup [lo, hi]",
    "device speedup",
    "busy",
    "compile s",
    "breaks",
    "recompiles",
    "numerics",
    "reason",
)


def _record_cells(record: dict) -> tuple[str, ...]:
    interval = "–" if record.get("speedup") is None else _speedup(record)
    reason = record.get("reason") or ""
    return (
        record["cell"],
        str(record.get("status")),
        shown(record, "eager_ms"),
        shown(record, "compiled_ms"),
        interval,
        shown(record, "device_speedup"),
        _busy(record),
        shown(record, "compile_s"),
        shown(record, "graph_breaks"),
        shown(record, "recompiles"),
        str(record.get("numerics") or "–"),
        reason if len(reason) <= 60 else reason[:57] + "...",
    )


def records_table(records: Sequence[dict]) -> str:
    """A plain aligned table of records for a terminal (`perfgate results`)."""
    return text_table([RECORD_COLUMNS, *(_record_cells(r) for r in sorted(records, key=lambda r: r["cell"]))])
