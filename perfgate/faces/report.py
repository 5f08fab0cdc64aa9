"""`perfgate report`: one self-contained HTML page and/or a Markdown digest of results, with trends from the
history, and the compile-modes, per-cell and stage views. Imports no torch.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfgate.ab.verdict import PairedVerdict
from perfgate.core import exits
from perfgate.core.output import OutputError
from perfgate.core.records_file import RecordFileError, gated_rounds, latest
from perfgate.faces.compare import confirm_round, nonempty_records
from perfgate.store import history


def cmd_report(args: argparse.Namespace) -> int:
    from perfgate.render import html_report

    if not (args.html or args.markdown or args.modes or args.cells or args.stages):
        print(
            "perfgate: report: give --html OUT.html, --markdown OUT.md, --modes, --cells and/or --stages",
            file=sys.stderr,
        )
        return exits.UNUSABLE
    try:
        every = nonempty_records(args.results)
        records = latest(every)  # one per cell, for the views; the verdicts below are the gate's rounds
        if args.modes:
            from perfgate.render import modes

            sys.stdout.write(modes.render_markdown(records))
        if args.cells:
            from perfgate.render import cells

            sys.stdout.write(cells.render_markdown(records))
        if args.stages:
            from perfgate.render import stage_account

            print(stage_account.cells_table(records))
            print(stage_account.run_line(records) or "perfgate: no stage account in these records")
        if not (args.html or args.markdown):
            return exits.PASS
        first, again = gated_rounds(every)  # the verdicts the gate gave, confirm round included
        paired = PairedVerdict.of(records)  # a paired run's clocks, judged B against A as the live gate did
        report = html_report.build(
            records,
            db_path=args.db,
            baseline=args.baseline,
            caption=args.caption or "",
            sources=[Path(p).name for p in args.results],
            title=args.title,
            rounds=(first, confirm_round(again)),
            paired=paired if paired.cells else None,
        )
        html_report.write(report, args.html, args.markdown)
    except (RecordFileError, history.HistoryError, OutputError) as err:
        print(f"perfgate: cannot make the report: {err}", file=sys.stderr)
        return exits.UNUSABLE
    for path in (args.html, args.markdown):
        if path:
            print(f"wrote {path}")
    return exits.PASS


def add_parser(sub) -> None:
    rep = sub.add_parser(
        "report", help="one self-contained HTML page and/or a Markdown digest of results, with trends from the history"
    )
    rep.add_argument("results", nargs="+", metavar="RESULTS", help="results files; a later record of a cell wins")
    rep.add_argument("--db", help="history database for the trend charts (default: none, no trends)")
    rep.add_argument("--baseline", metavar="PATH_OR_DIR", help="mark the gate's verdicts against this baseline")
    rep.add_argument("--caption", help="a sentence shown under the title (e.g. where the history comes from)")
    rep.add_argument("--title", default="perfgate report", help="the page title")
    rep.add_argument("--html", metavar="OUT.html", help="write the HTML page here")
    rep.add_argument("--markdown", metavar="OUT.md", help="write the Markdown digest here")
    rep.add_argument(
        "--modes",
        action="store_true",
        help="print per model and precision a Markdown table of "
        "eager and each compile mode: first call (compile) s and MiB, train and inference ms and "
        "speedups",
    )
    rep.add_argument(
        "--cells",
        action="store_true",
        help="print a Markdown table with one row per cell: both "
        "speedups, step times, first call and warm compile s, both peaks, graph breaks, recompiles, "
        "numerics, status, wall cost and reason",
    )
    rep.add_argument(
        "--stages",
        action="store_true",
        help="print a Markdown table with one row per cell: its "
        "wall seconds by stage (process start, build, reference, compile, numerics, warm-up, timing, "
        "clocks, ...) and the timed rounds' share, then the run's totals by stage",
    )
    rep.set_defaults(func=cmd_report)
