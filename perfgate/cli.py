"""The `perfgate` command: a thin face over perfgate.baseline, perfgate.gate and perfgate.report.

Imports no torch, so it runs on a CPU box in a second. Exit codes: 0 the gate passes, 1 a regression,
2 nothing could be compared (a missing, corrupt or foreign baseline, an unreadable results file).

    perfgate compare RESULTS [RESULTS ...] --baseline PATH_OR_DIR [--markdown FILE] [--json FILE]
    perfgate baseline update RESULTS [RESULTS ...] [--dir baselines]    (runs: by run_id, else one a file)
    perfgate results RESULTS [RESULTS ...]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Sequence

from perfgate.baseline import BaselineError, save_baselines
from perfgate.gate import gate_run
from perfgate.record import RecordFileError, iter_records, load_records
from perfgate.report import markdown, records_table, to_json

EXIT_CANNOT_COMPARE = 2

# Below this many runs the run-to-run spread is unknown (1 run) or a rough guess: with 3 runs its estimate
# has 2 degrees of freedom, and the speedup gate catches a 5 % loss less often and cries wolf on noisy
# cells more often than with 5 (docs/gate-power.md).
ADVISED_RUNS = 5


def _records(paths: Sequence[str]) -> list[dict]:
    records = load_records(paths)
    if not records:
        raise RecordFileError(f"no records in {', '.join(paths)}")
    return records


def _write(path: str | None, text: str) -> None:
    if path:
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        Path(path).write_text(text, encoding="utf-8")


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        outcome = gate_run(_records(args.results), args.baseline)
    except (RecordFileError, BaselineError) as err:
        return _cannot_compare([str(err)])
    if outcome.errors:
        return _cannot_compare(outcome.errors)
    text = write_reports(outcome, args.markdown, args.json)
    sys.stdout.write(text)
    return outcome.exit_code


def write_reports(outcome, markdown_path: str | None, json_path: str | None) -> str:
    """The markdown (returned, and written where asked) and JSON reports of a gated run."""
    text = "\n\n---\n\n".join(markdown(r) for r in outcome.reports)
    _write(markdown_path, text)
    _write(json_path, json.dumps({"exit_code": outcome.exit_code,
                                  "reports": [to_json(r) for r in outcome.reports]},
                                 indent=2, sort_keys=True) + "\n")
    return text


def _cannot_compare(messages: Sequence[str]) -> int:
    for message in messages:
        print(f"perfgate: cannot compare: {message}", file=sys.stderr)
    return EXIT_CANNOT_COMPARE


def cmd_baseline_update(args: argparse.Namespace) -> int:
    try:
        # Records group into runs by run_id (xdist workers share one), else one file is one run; within a
        # run a cell's later record (a confirm round) replaces the earlier.
        written = save_baselines([list(iter_records(path)) for path in args.results], args.dir)
    except (RecordFileError, BaselineError) as err:
        print(f"perfgate: cannot update the baseline: {err}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE
    for path in written:
        baseline = json.loads(path.read_text(encoding="utf-8"))
        statuses = [c["status"] for c in baseline["cells"].values()]
        print(f"wrote {path}: {len(statuses)} cell(s), {statuses.count('ok')} ok, from {baseline['runs']} run(s)")
        if baseline["runs"] < ADVISED_RUNS:
            print(f"  note: fewer than {ADVISED_RUNS} runs: the gate cannot tell run-to-run noise from a "
                  f"regression well; give it {ADVISED_RUNS} or more runs, each its own pytest session")
    return 0


def cmd_results(args: argparse.Namespace) -> int:
    try:
        records = _records(args.results)
    except RecordFileError as err:
        print(f"perfgate: {err}", file=sys.stderr)
        return EXIT_CANNOT_COMPARE
    print(records_table(records))
    return 0


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfgate", description="torch.compile performance gate")
    sub = parser.add_subparsers(dest="command", required=True)

    cmp = sub.add_parser("compare", help="compare results with a baseline; exit 0 pass, 1 regression, "
                                         "2 cannot compare")
    cmp.add_argument("results", nargs="+", metavar="RESULTS", help="results files (JSON lines)")
    cmp.add_argument("--baseline", required=True, metavar="PATH_OR_DIR",
                     help="a baseline file, or a directory holding <fingerprint>_<tier>.json files")
    cmp.add_argument("--markdown", metavar="FILE", help="also write the Markdown report here")
    cmp.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    cmp.set_defaults(func=cmd_compare)

    base = sub.add_parser("baseline", help="make baselines")
    base_sub = base.add_subparsers(dest="action", required=True)
    upd = base_sub.add_parser("update", help="fold results files of independent runs into baselines")
    upd.add_argument("results", nargs="+", metavar="RESULTS",
                     help="results files; records group into runs by run_id, else one file is one run")
    upd.add_argument("--dir", default="baselines", help="where baseline files go (default: baselines)")
    upd.set_defaults(func=cmd_baseline_update)

    res = sub.add_parser("results", help="a short table of the records in results files")
    res.add_argument("results", nargs="+", metavar="RESULTS")
    res.set_defaults(func=cmd_results)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
