"""The report people look at: one self-contained HTML page and a Markdown digest of a run's records, with
each cell's history from the SQLite database. Imports no torch.

    perfgate report RESULTS... [--db PATH] [--baseline PATH_OR_DIR] --html OUT.html [--markdown OUT.md]

Per environment (fingerprint): bar charts of speedup per model x variant x precision with the 95 % interval
as an error bar, cold compile time (warm compile inside), and peak memory compiled / eager; then one trend
chart per cell over the history, with change points (perfgate.judge.changepoint) and, when a baseline is given,
the points the gate's own wall rule calls a regression. The verdicts come from gate.gate_run with the rules
given (the defaults unless a caller passes others), as `perfgate compare` and the plugin judge. The page has
no scripts and no external URLs: the charts are inline SVG (perfgate.render.report_charts, drawn by
perfgate.render.charts) and the styles sit in the page.

jinja2 renders the page because a template with autoescaping keeps every record string (reasons, break
reasons, labels) escaped without escaping by hand in Python; it is a dependency of torch anyway, and the
data side declares it so that `perfgate report` runs without torch.
"""

from __future__ import annotations

import datetime as _dt
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence

from perfgate.core import exits
from perfgate.core.clocks import COUNTS, DEVICE
from perfgate.core.stats import geomean
from perfgate.core.text import visible
from perfgate.judge.baseline import group_by_key
from perfgate.judge.gate import GateReport, gate_run
from perfgate.judge.rules import DEFAULT_RULES
from perfgate.render.report import fmt, md_code, md_text, shown
from perfgate.render.report_charts import (
    PHASE_ORDER,
    Chart,
    cell_order,
    compile_chart,
    mem_ratio,
    memory_chart,
    ok_with,
    speedup_charts,
    speedup_text,
)
from perfgate.render.trends import Trend, clock_rule, count_changes, trend
from perfgate.render.wording import finding_text
from perfgate.store import history


@dataclass
class Section:
    """Everything shown for one environment (fingerprint)."""

    fingerprint: str
    heading: str
    versions: str
    geomeans: list[str]
    charts: list[Chart]
    table: list[dict]
    failed: list[dict]
    trends: list[Trend] = field(default_factory=list)
    no_trend: list[str] = field(default_factory=list)
    device_trends: list[Trend] = field(default_factory=list)  # the device speedup's, beside the wall's
    count_changes: list[str] = field(default_factory=list)  # each count's change points (trends.count_changes)
    count_bisects: list[str] = field(default_factory=list)  # the bisect command for each count that grew


@dataclass
class Report:
    title: str
    generated: str
    caption: str
    sources: list[str]
    sections: list[Section]
    gate_lines: list[str]
    notes: list[str]
    gate_failed: bool = False  # a gated environment has a regression (its gate exit code is 1)


# ---------------------------------------------------------------------------------------------- assembly


def _gate(
    records: Sequence[dict], baseline_location, rules: Sequence, notes: list[str], remeasure=None
) -> list[GateReport]:
    """The gate's report per environment and tier of `records` that has a usable baseline, from gate.gate_run
    as `perfgate compare` and the plugin judge (`remeasure`: the run's confirm round, where it had one); why an
    environment has none goes to `notes`."""
    if not baseline_location:
        return []
    known = [r for r in records if (r.get("env") or {}).get("fingerprint")]
    if len(known) < len(records):
        notes.append(f"no verdicts for {len(records) - len(known)} record(s) without env.fingerprint")
    reports = []
    for (fingerprint, tier), group in sorted(group_by_key(known).items()):
        outcome = gate_run(group, baseline_location, remeasure, rules)
        notes += [f"no verdicts for {fingerprint} ({tier}): {error}" for error in outcome.errors]
        reports += outcome.reports
    return reports


def _gate_lines(report: GateReport) -> list[str]:
    lines = [
        f"{'FAIL' if report.exit_code else 'PASS'} {report.fingerprint} ({report.tier}): "
        f"{len(report.regressions)} regression(s), {len(report.improvements)} improvement(s)"
    ]
    lines += [f"regression {f.cell}: {finding_text(f)}" for f in report.regressions]
    return lines + [f"advisory {f.cell} (never fails the gate): {finding_text(f)}" for f in report.advisories]


def _table_row(record: dict, verdict: str | None) -> dict:
    device = record.get("device_speedup")
    return {
        "cell": record["cell"],
        "status": record.get("status"),
        "speedup": (speedup_text(record) if record.get("speedup") is not None else "–")
        + (f" · device {device:.3f}×" if device else ""),
        "eager_ms": shown(record, "eager_ms"),
        "compiled_ms": shown(record, "compiled_ms"),
        "compile_s": shown(record, "compile_s"),
        "mem": fmt(mem_ratio(record), ".2f"),
        "graph_breaks": shown(record, "graph_breaks"),
        "counts": counts_text(record),
        "numerics": record.get("numerics") or "–",
        "verdict": "; ".join(filter(None, (verdict, paired_text(record)))),
        "reason": record.get("reason") or "",
    }


def paired_text(record: dict) -> str:
    """ "paired: unsure": a paired run's outcome for the cell, B against its base (the record's `paired`)."""
    outcome = (record.get("paired") or {}).get("outcome")
    return f"paired: {outcome}" if outcome else ""


def counts_text(record: dict, side: str = "compiled") -> str:
    """A side's counts of a step's work, "88 Python calls · 27 ATen ops · 1 dynamo cache lookups" ("–": none)."""
    counted = [(count, record.get(count.field(side))) for count in COUNTS]
    return " · ".join(f"{value:,.0f} {count.label}" for count, value in counted if value is not None) or "–"


def _geomeans(records: Sequence[dict]) -> list[str]:
    out = []
    for phase in PHASE_ORDER:
        values = [r["speedup"] for r in ok_with(records, "speedup") if r.get("phase") == phase]
        if values:
            out.append(f"{phase} {geomean(values):.3f}× over {len(values)} cell(s)")
    return out


def _section(
    fingerprint: str,
    records: list[dict],
    gated: Sequence[GateReport],
    rules: Sequence,
    db_path: str | os.PathLike | None,
) -> Section:
    """One environment's charts, table and trends; `gated`: the gate's reports on it (one per tier), `rules`:
    the gate's (its wall and device rules mark the trends)."""
    verdicts = {row.cell: row.verdict for report in gated for row in report.rows}
    base_cells = {cid: cell for report in gated for cid, cell in report.baseline["cells"].items()}
    env = records[0].get("env") or {}
    versions = ", ".join(
        f"{k} {env[k]}" for k in ("driver", "cuda", "torch", "triton", "transformers", "timm") if env.get(k)
    )
    records = sorted(records, key=cell_order)
    section = Section(
        fingerprint=fingerprint,
        heading=f"{env.get('gpu') or env.get('cpu') or fingerprint} ({fingerprint})",
        versions=versions,
        geomeans=_geomeans(records),
        charts=speedup_charts(records, verdicts) + compile_chart(records) + memory_chart(records),
        table=[_table_row(r, verdicts.get(r["cell"])) for r in records],
        failed=[_table_row(r, verdicts.get(r["cell"])) for r in records if r.get("status") != "ok"],
    )
    if db_path:
        for record in records:
            points, base = history.series(db_path, record["cell"], fingerprint), base_cells.get(record["cell"])
            if len(points) < 2:
                section.no_trend.append(record["cell"])
                continue
            section.trends.append(trend(record["cell"], points, base, clock_rule(rules)))
            if sum(bool(p.get(DEVICE.ratio)) for p in points) >= 2:  # a CPU cell has no device clock
                section.device_trends.append(trend(record["cell"], points, base, clock_rule(rules, DEVICE.ratio)))
            texts, bisects = count_changes(record["cell"], points)
            section.count_changes += texts
            section.count_bisects += bisects
    return section


def build(
    records: Sequence[dict],
    *,
    db_path: str | os.PathLike | None = None,
    baseline=None,
    caption: str = "",
    sources: Sequence[str] = (),
    title: str = "perfgate report",
    rules: Sequence = DEFAULT_RULES,
    rounds: tuple[Sequence[dict], Callable[[list[str]], list[dict]] | None] | None = None,
    paired=None,
) -> Report:
    """The report's content from one merged set of records (one per cell: perfgate.core.records_file.load_records),
    the history database (trends; optional) and a baseline file or directory (verdicts; optional), judged
    by `rules` as gate.gate_run judges them. `rounds`: (the first round's records, the confirm round as
    gate_run's `remeasure`), where the verdicts must be the gate's own (records_file.gated_rounds). `paired`: a
    paired run's verdict on the clocks (perfgate.ab.verdict.PairedVerdict, which the face hands in), whose lines
    head the gate's and whose regression fails the page as the baseline's does: the live gate's exit is both's."""
    notes: list[str] = []
    if db_path and not Path(db_path).is_file():
        notes.append(f"no history database at {db_path}: no trends")
        db_path = None
    judged, remeasure = rounds if rounds is not None else (records, None)
    gated = _gate(judged, baseline, rules, notes, remeasure)
    by_fp: dict[str, list[dict]] = {}
    for record in records:
        by_fp.setdefault((record.get("env") or {}).get("fingerprint") or "unknown", []).append(record)
    sections = [
        _section(fp, recs, [g for g in gated if g.fingerprint == fp], rules, db_path)
        for fp, recs in sorted(by_fp.items())
    ]
    generated = _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return Report(
        title,
        generated,
        caption,
        list(sources),
        sections,
        gate_lines=[*(paired.lines() if paired is not None else []), *(x for r in gated for x in _gate_lines(r))],
        notes=notes,
        gate_failed=any(r.exit_code for r in gated) or (paired is not None and paired.exit_code == exits.REGRESSION),
    )


# ---------------------------------------------------------------------------------------------- output


def render_html(report: Report) -> str:
    import jinja2
    from markupsafe import Markup

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("perfgate.render", "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        # Every text the page prints, with its control characters shown escaped; the charts' Markup is
        # drawn already (charts.escape does the same to it).
        finalize=lambda value: value if isinstance(value, Markup) or not isinstance(value, str) else visible(value),
    )
    env.filters["svg"] = Markup  # charts.py escapes every text it draws
    return env.get_template("report.html.j2").render(report=report)


def _md_row(row: dict, trend_by_cell: dict[str, Trend]) -> str:
    t = trend_by_cell.get(row["cell"])
    text = (
        row["speedup"],
        row["compile_s"],
        row["mem"],
        row["graph_breaks"],
        row["numerics"],
        row["verdict"] or ("not gated" if row["status"] == "ok" else row["status"]),
        t.spark if t else "",
        "; ".join(t.changes) if t and t.changes else "",
    )
    return "| " + " | ".join([md_code(row["cell"]), *map(md_text, text)]) + " |"


def render_markdown(report: Report) -> str:
    """A digest for a job summary or PR comment: verdicts, geomeans, one row per cell, change points."""
    lines = [f"## {md_text(report.title)}", ""]
    lines += [md_text(report.caption), ""] if report.caption else []
    lines += [f"- {md_text(line)}" for line in report.gate_lines] + ([""] if report.gate_lines else [])
    for section in report.sections:
        trends = {t.cell: t for t in section.trends}
        lines += [
            f"### {md_text(section.heading)}",
            "",
            md_text(section.versions),
            "",
            f"Geomean speedup: {md_text('; '.join(section.geomeans) or 'no ok cell')}.",
            "",
            "| cell | speedup [95 % CI] | compile s | mem compiled/eager | graph breaks | numerics | "
            "verdict | history | change points |",
            "|" + "---|" * 9,
        ]
        lines += [_md_row(row, trends) for row in section.table]
        lines.append("")
        lines += [f"- failed {md_code(row['cell'])}: {md_text(row['reason'])}" for row in section.failed]
        lines += [f"- {md_text(text)}" for t in section.trends for text in t.marked]
        lines += [f"- bisect {md_text(text)}" for t in section.trends for text in t.bisects]
        device = section.device_trends
        lines += [f"- {md_code(t.cell)} change point {md_text(text)}" for t in device for text in t.changes]
        lines += [f"- {md_text(text)}" for t in device for text in t.marked]
        lines += [f"- bisect {md_text(text)}" for t in device for text in t.bisects]
        lines += [f"- count change point {md_text(text)}" for text in section.count_changes]
        lines += [f"- bisect {md_text(text)}" for text in section.count_bisects]
    lines += [f"- note: {md_text(note)}" for note in report.notes]
    return "\n".join(lines).rstrip() + "\n"


def write(report: Report, html_path: str | os.PathLike | None, markdown_path: str | os.PathLike | None) -> None:
    """Each page whole or not at all: OutputError names a path that cannot be written (perfgate.core.output)."""
    from perfgate.core.output import write_atomic

    for path, render in ((html_path, render_html), (markdown_path, render_markdown)):
        if path:
            write_atomic(path, render(report))
