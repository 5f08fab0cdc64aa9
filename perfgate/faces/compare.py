"""`perfgate compare`, `perfgate baseline update` and `perfgate results`: a results file against a baseline,
results files folded into baselines, and a short table of records. Imports no torch.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Callable, Sequence

from perfgate.core import exits
from perfgate.core.output import OutputError
from perfgate.core.record import nothing_measured
from perfgate.core.records_file import RecordFileError, all_records, gated_rounds, iter_records, latest
from perfgate.judge.baseline import BaselineError, disagreements, save_baselines
from perfgate.judge.gate import gate_run
from perfgate.render.report import records_table
from perfgate.render.report_files import write_reports

AGAINST = ".against.jsonl"  # side A's records beside a paired run's results (perfgate.plugin.against)
# Below this many runs the run-to-run spread is unknown (1 run) or a rough guess: with 3 runs its estimate
# has 2 degrees of freedom, and the speedup gate catches a 5 % loss less often and cries wolf on noisy
# cells more often than with 5 (docs/gate-power.md).
ADVISED_RUNS = 5


def nonempty_records(paths: Sequence[str]) -> list[dict]:
    """Every record of these files in the order written (all_records); RecordFileError where there are none."""
    records = all_records(paths)
    if not records:
        raise RecordFileError(f"no records in {', '.join(paths)}")
    return records


def confirm_round(again: dict[str, dict]) -> Callable[[list[str]], list[dict]] | None:
    """gate.gate_run's `remeasure` from a results file's confirm round (records_file.gated_rounds): the cells'
    re-measured records, as the plugin's confirm round returned them; None where the run had none."""
    if not again:
        return None
    return lambda cell_ids: [again[cell_id] for cell_id in cell_ids if cell_id in again]


def cmd_compare(args: argparse.Namespace) -> int:
    return compare_files(args.results, args.baseline, args.markdown, args.json)


def compare_files(results: Sequence[str], baseline: str, markdown: str | None, json_path: str | None) -> int:
    """`perfgate compare`: judge the results files against the baseline, print the report, write it where
    asked, and return the exit code (perfgate deal calls it on its shards' merged records)."""
    from perfgate.ab.verdict import PairedVerdict

    paths = [p for p in results if not str(p).endswith(AGAINST)]
    for skipped in sorted(set(results) - set(paths)):
        print(f"perfgate: skipped {skipped}: side A's records of a paired run (the base's, not this tree's)")
    try:
        first, again = gated_rounds(nonempty_records(paths))  # as the gate judged them, confirm included
        # A paired run's records carry its verdict on the clocks, judged B against A on its own runner (the
        # records' `paired`): the committed baseline then judges only what carries across machines there
        # (gate.baseline_rules_for), as the live gate did, and the shards of a run dealt over several GPUs read as one
        # run's verdict.
        paired = PairedVerdict.of(first)
        outcome = gate_run(first, baseline, confirm_round(again))
    except (RecordFileError, BaselineError) as err:
        return _cannot_compare([str(err)])
    try:  # with errors: a page saying why, for a PR comment
        text = write_reports(outcome, markdown, json_path, paired=paired if paired.cells else None)
    except OutputError as err:
        return _cannot_compare(list(outcome.errors) + [str(err)])
    if outcome.errors:  # a paired regression still fails the run (exit 1), as the live gate's exit does
        code = _cannot_compare(outcome.errors)
        return paired.combined_exit(code) if paired.cells else code
    sys.stdout.write(text)
    return paired.combined_exit(outcome.exit_code) if paired.cells else outcome.exit_code


def _cannot_compare(messages: Sequence[str]) -> int:
    for message in messages:
        print(f"perfgate: cannot compare: {message}", file=sys.stderr)
    return exits.UNUSABLE


def cmd_baseline_update(args: argparse.Namespace) -> int:
    try:
        # Records group into runs by run_id (xdist workers share one), else one file is one run; within a
        # run a cell's later record (a confirm round) replaces the earlier.
        sources = [list(iter_records(path)) for path in args.results]
        every = [record for source in sources for record in source]
        nothing = nothing_measured(every) if every else None  # no record at all: said below
        if nothing:  # a baseline of skipped cells would gate nothing
            raise RecordFileError(nothing)
        written = save_baselines(sources, args.dir)
    except (RecordFileError, BaselineError, OutputError) as err:
        print(f"perfgate: cannot update the baseline: {err}", file=sys.stderr)
        return exits.UNUSABLE
    if not written:  # exit 0 with nothing written read as success to a CI step
        print(
            f"perfgate: cannot update the baseline: no records in {', '.join(map(str, args.results))}", file=sys.stderr
        )
        return exits.UNUSABLE
    for path in written:
        baseline = json.loads(path.read_text(encoding="utf-8"))
        statuses = [c["status"] for c in baseline["cells"].values()]
        print(f"wrote {path}: {len(statuses)} cell(s), {statuses.count('ok')} ok, from {baseline['runs']} run(s)")
        if baseline["runs"] < ADVISED_RUNS:
            print(
                f"  note: fewer than {ADVISED_RUNS} runs: the gate cannot tell run-to-run noise from a "
                f"regression well; give it {ADVISED_RUNS} or more runs, each its own pytest session"
            )
    for line in disagreements(sources):
        print(f"  warning: {line}")
    return exits.PASS


def cmd_results(args: argparse.Namespace) -> int:
    try:
        records = latest(nonempty_records(args.results))
    except RecordFileError as err:
        print(f"perfgate: {err}", file=sys.stderr)
        return exits.UNUSABLE
    print(records_table(records))
    return exits.PASS


def add_parser(sub) -> None:
    """`compare`, `baseline update` and `results` on the subcommands `sub`."""
    cmp = sub.add_parser(
        "compare",
        help="compare results with a baseline (a paired run's clocks by its own paired verdict); "
        "exit 0 pass, 1 regression, 2 unsure or cannot compare",
    )
    cmp.add_argument("results", nargs="+", metavar="RESULTS", help="results files (JSON lines)")
    cmp.add_argument(
        "--baseline",
        required=True,
        metavar="PATH_OR_DIR",
        help="a baseline file, or a directory holding <fingerprint>_<tier>.json files",
    )
    cmp.add_argument("--markdown", metavar="FILE", help="also write the Markdown report here")
    cmp.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    cmp.set_defaults(func=cmd_compare)

    base = sub.add_parser("baseline", help="make baselines")
    base_sub = base.add_subparsers(dest="action", required=True)
    upd = base_sub.add_parser("update", help="fold results files of independent runs into baselines")
    upd.add_argument(
        "results",
        nargs="+",
        metavar="RESULTS",
        help="results files; records group into runs by run_id, else one file is one run",
    )
    upd.add_argument("--dir", default="baselines", help="where baseline files go (default: baselines)")
    upd.set_defaults(func=cmd_baseline_update)

    res = sub.add_parser("results", help="a short table of the records in results files")
    res.add_argument("results", nargs="+", metavar="RESULTS")
    res.set_defaults(func=cmd_results)
