"""`perfgate export`: records as CSV, PyTorch's benchmark v3 JSON, pytest-benchmark's JSON or OpenMetrics
text, for another tool's dashboard. Imports no torch.
"""

from __future__ import annotations

import argparse
import sys

from perfgate.core import exits
from perfgate.core.output import OutputError, write_atomic
from perfgate.core.records_file import RecordFileError, iter_records


def cmd_export(args: argparse.Namespace) -> int:
    """Records in another tool's format (perfgate.render.export says what goes out and why)."""
    from perfgate.render import export

    try:
        # Every run's records, one per run and cell: a history of runs is what a dashboard plots.
        records = export.latest(record for path in args.results for record in iter_records(path))
        if not records:
            raise RecordFileError(f"no records in {', '.join(args.results)}")
        text = export.render(records, args.format)
        if args.output:
            write_atomic(args.output, text)
        else:
            sys.stdout.write(text)
    except (RecordFileError, OutputError) as err:
        print(f"perfgate: cannot export: {err}", file=sys.stderr)
        return exits.UNUSABLE
    left_out = len(records) - len(export.standing(records))
    if left_out and args.format != "csv":  # said, so a dashboard with fewer cells than the run is no mystery
        print(f"perfgate: export: {left_out} of {len(records)} record(s) left out: not ok, or unfit", file=sys.stderr)
    if args.output:
        print(f"wrote {args.output}")
    return exits.PASS


def add_parser(sub) -> None:
    exp = sub.add_parser("export", help="results as CSV, PyTorch v3 JSON, pytest-benchmark JSON or OpenMetrics")
    exp.add_argument("results", nargs="+", metavar="RESULTS", help="results files; one record per run and cell")
    exp.add_argument("--format", required=True, choices=("csv", "v3", "pytest-benchmark", "openmetrics"))
    exp.add_argument("--output", "-o", metavar="FILE", help="write here (default: standard output)")
    exp.set_defaults(func=cmd_export)
