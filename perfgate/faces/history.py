"""`perfgate history add` and `perfgate history show`: every run's records in the SQLite history
(perfgate.store.history), and one cell's series with its change points. Imports no torch.
"""

from __future__ import annotations

import argparse
import sys
from typing import Sequence

from perfgate.core import exits
from perfgate.core.clocks import BY_RATIO
from perfgate.core.records_file import RecordFileError, iter_records
from perfgate.render.report import text_table
from perfgate.store import history


def cmd_history_add(args: argparse.Namespace) -> int:
    try:
        # Per file, not load_records: history keeps every run's record of a cell, keyed (run_id, cell). Every
        # file read before any is added: an empty or unreadable one is refused (exit 2, as `compare` does)
        # with nothing added.
        sources = [(path, list(iter_records(path))) for path in args.results]
        empty = [path for path, records in sources if not records]
        if empty:
            raise RecordFileError(f"no records in {', '.join(empty)}")
        for path, records in sources:
            count = history.append(args.db, records, commit=args.commit, date=args.date)
            print(f"{args.db}: {count} record(s) from {path}")
    except (RecordFileError, history.HistoryError) as err:
        print(f"perfgate: cannot add to the history: {err}", file=sys.stderr)
        return exits.UNUSABLE
    return exits.PASS


def _metric_text(point: dict, metric: str) -> str:
    """A clock's ratio with its 95 % interval where the record has one; any other metric as it is."""
    value = point.get(metric)
    if value is None:
        return "–"
    if metric in BY_RATIO:
        lo, hi = point.get(f"{metric}_lo"), point.get(f"{metric}_hi")
        return f"{value:.3f} [{lo:.3f}, {hi:.3f}]" if lo and hi else f"{value:.3f}"
    return f"{value:.4g}"


def _change_marks(points: Sequence[dict], metric: str = "speedup") -> dict[int, str]:
    """{index into points: "<- change +x %"} for the change points of the ok values of a clock's ratio or a count."""
    from perfgate.judge.changepoint import series_changes

    ok, seg = series_changes(points, metric)
    return {ok[cp.index]: f"<- change point {cp.shift:+.1%}" for cp in seg.change_points}


def cmd_history_show(args: argparse.Namespace) -> int:
    try:
        points = history.series(args.db, args.cell, args.fingerprint)
    except history.HistoryError as err:
        print(f"perfgate: {err}", file=sys.stderr)
        return exits.UNUSABLE
    if not points:
        known = sorted({cell for cell, _ in history.cells(args.db)})
        print(
            f"perfgate: no history for {args.cell} in {args.db}; cells there: {', '.join(known) or 'none'}",
            file=sys.stderr,
        )
        return exits.UNUSABLE
    # Change points on the clocks' ratios (wall and device speedup, as in the report's trends) and on the counts,
    # each count on its band's scale (perfgate.judge.changepoint.COUNT_BANDS); not on the other columns.
    from perfgate.judge.changepoint import COUNT_BANDS

    is_ratio, is_count = args.metric in BY_RATIO, args.metric in COUNT_BANDS
    marks = _change_marks(points, args.metric) if is_ratio or is_count else {}
    rows = [("date", "commit", "run", "fingerprint", "status", args.metric, "")]
    rows += [
        (
            str(p["date"]),
            (p["commit"] or "–")[:12],
            str(p["run_id"])[:12],
            p["fingerprint"],
            p["status"],
            _metric_text(p, args.metric),
            marks.get(i, ""),
        )
        for i, p in enumerate(points)
    ]
    print(text_table(rows))
    if is_ratio or is_count:
        from perfgate.judge.changepoint import series_changes
        from perfgate.judge.triage import bisect_hint

        # What to bisect: a lower speedup, or a count that grew (more work a step). A count's bisection judges
        # it under the gate's rules, whose paired probes compare every count B against A (perfgate.ab.paired).
        ok, seg = series_changes(points, args.metric)
        worse = (cp for cp in seg.change_points if (cp.shift > 0 if is_count else cp.shift < 0))
        rule = "gate" if is_count else args.metric
        for cp in worse:
            print(f"change point {cp.shift:+.1%}: {bisect_hint(points, ok, cp.index, rule=rule)}")
    return exits.PASS


def add_parser(sub) -> None:
    hist = sub.add_parser("history", help="every run's records in a SQLite database, and a cell's series")
    hist_sub = hist.add_subparsers(dest="action", required=True)
    add = hist_sub.add_parser("add", help="append results files to the history (idempotent per run and cell)")
    add.add_argument("results", nargs="+", metavar="RESULTS", help="results files (JSON lines)")
    add.add_argument("--db", default=history.DEFAULT_DB, help=f"the database (default: {history.DEFAULT_DB})")
    add.add_argument("--commit", help="the commit measured, e.g. $GITHUB_SHA (default: unknown)")
    add.add_argument("--date", help="ISO-8601 date to file the runs under (default: each record's start time)")
    add.set_defaults(func=cmd_history_add)
    show = hist_sub.add_parser("show", help="one cell's series, oldest first, with its change points")
    show.add_argument("cell", metavar="CELL", help="a cell id, e.g. gpt2-train-inductor_default-amp_bf16")
    show.add_argument("--db", default=history.DEFAULT_DB, help=f"the database (default: {history.DEFAULT_DB})")
    show.add_argument("--fingerprint", help="only this environment (default: all)")
    show.add_argument("--metric", default="speedup", choices=history.METRICS, help="what to list (default: speedup)")
    show.set_defaults(func=cmd_history_show)
