"""The `perfgate` command: a thin face over perfgate.judge (baseline, gate), perfgate.store.history and perfgate.render.

Imports no torch, so it runs on a CPU box in a second. Exit codes: 0 the gate passes, 1 a regression,
2 unusable input (a missing, corrupt or foreign baseline, an unreadable results file: the message names the
file, line, cell and field), 3 an internal error (a bug in perfgate: never read as a regression).

    perfgate compare RESULTS [RESULTS ...] --baseline PATH_OR_DIR [--markdown FILE] [--json FILE]
    perfgate baseline update RESULTS [RESULTS ...] [--dir baselines]    (runs: by run_id, else one a file)
    perfgate results RESULTS [RESULTS ...]
    perfgate history add RESULTS [RESULTS ...] [--db PATH] [--commit SHA] [--date ISO]
    perfgate history show CELL [--db PATH] [--fingerprint F] [--metric speedup]
    perfgate report RESULTS [RESULTS ...] [--db PATH] [--baseline PATH_OR_DIR] [--caption TEXT]
                    [--html OUT.html] [--markdown OUT.md] [--modes] [--cells] [--stages]
    perfgate ab [--a-python PY] [--a-rev REV] [--a-env K=V ...] [--a-args ARGS]  (and --b-...)
                [--processes N] [--out DIR] [--markdown FILE] [--json FILE] [--html FILE] -- PYTEST_ARGS...
    perfgate ab --resume DIR [--processes N] [--html FILE]                (docs/ab.md)
    perfgate ab --judge DIR [--html FILE]
    perfgate bisect (--good REV --bad REV | --step-python PY ... | --step-path DIR ... | --step-pip REQS ...)
                    [--rule gate|METRIC[:PCT]] [--processes N] [--max-processes M] [--out DIR] -- PYTEST_ARGS...
    perfgate bisect --resume DIR                                           (docs/bisect.md)
    perfgate export RESULTS [RESULTS ...] --format csv|v3|pytest-benchmark|openmetrics [--output FILE]
    perfgate completion bash|zsh                                           (a shell completion script)
    perfgate --version
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
import traceback
import warnings
from pathlib import Path
from typing import Sequence

from perfgate import __version__
from perfgate.core import exits
from perfgate.core.clocks import BY_RATIO
from perfgate.core.output import OutputError, write_atomic
from perfgate.core.record import nothing_measured
from perfgate.core.records_file import RecordFileError, iter_records, load_records
from perfgate.judge.baseline import BaselineError, disagreements, save_baselines
from perfgate.judge.gate import gate_run
from perfgate.render.report import records_table, text_table
from perfgate.render.report_files import write_reports
from perfgate.store import history

# Below this many runs the run-to-run spread is unknown (1 run) or a rough guess: with 3 runs its estimate
# has 2 degrees of freedom, and the speedup gate catches a 5 % loss less often and cries wolf on noisy
# cells more often than with 5 (docs/gate-power.md).
ADVISED_RUNS = 5


def _records(paths: Sequence[str]) -> list[dict]:
    records = load_records(paths)
    if not records:
        raise RecordFileError(f"no records in {', '.join(paths)}")
    return records


def cmd_compare(args: argparse.Namespace) -> int:
    try:
        outcome = gate_run(_records(args.results), args.baseline)
    except (RecordFileError, BaselineError) as err:
        return _cannot_compare([str(err)])
    try:
        text = write_reports(outcome, args.markdown, args.json)  # with errors: a page saying why, for a PR comment
    except OutputError as err:
        return _cannot_compare(list(outcome.errors) + [str(err)])
    if outcome.errors:
        return _cannot_compare(outcome.errors)
    sys.stdout.write(text)
    return outcome.exit_code


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
        records = _records(args.results)
    except RecordFileError as err:
        print(f"perfgate: {err}", file=sys.stderr)
        return exits.UNUSABLE
    print(records_table(records))
    return exits.PASS


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
    """{index into points: "<- change +x %"} for the change points of the ok values of a clock's ratio."""
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
    # Change points on the clocks' ratios alone (wall and device speedup), as in the report's trends: the method's
    # noise floor (1 %) and smallest step (2 %) are sized for timings and would hide a count's 1.5 % band.
    is_ratio = args.metric in BY_RATIO
    marks = _change_marks(points, args.metric) if is_ratio else {}
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
    if is_ratio:
        from perfgate.judge.changepoint import series_changes
        from perfgate.judge.triage import bisect_hint

        ok, seg = series_changes(points, args.metric)
        for cp in (cp for cp in seg.change_points if cp.shift < 0):  # a lower level: what to bisect
            print(f"change point {cp.shift:+.1%}: {bisect_hint(points, ok, cp.index, rule=args.metric)}")
    return exits.PASS


def cmd_report(args: argparse.Namespace) -> int:
    from perfgate.render import html_report

    if not (args.html or args.markdown or args.modes or args.cells or args.stages):
        print(
            "perfgate: report: give --html OUT.html, --markdown OUT.md, --modes, --cells and/or --stages",
            file=sys.stderr,
        )
        return exits.UNUSABLE
    try:
        records = _records(args.results)
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
        report = html_report.build(
            records,
            db_path=args.db,
            baseline=args.baseline,
            caption=args.caption or "",
            sources=[Path(p).name for p in args.results],
            title=args.title,
        )
        html_report.write(report, args.html, args.markdown)
    except (RecordFileError, history.HistoryError, OutputError) as err:
        print(f"perfgate: cannot make the report: {err}", file=sys.stderr)
        return exits.UNUSABLE
    for path in (args.html, args.markdown):
        if path:
            print(f"wrote {path}")
    return exits.PASS


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


def _add_export_parser(sub) -> None:
    exp = sub.add_parser("export", help="results as CSV, PyTorch v3 JSON, pytest-benchmark JSON or OpenMetrics")
    exp.add_argument("results", nargs="+", metavar="RESULTS", help="results files; one record per run and cell")
    exp.add_argument("--format", required=True, choices=("csv", "v3", "pytest-benchmark", "openmetrics"))
    exp.add_argument("--output", "-o", metavar="FILE", help="write here (default: standard output)")
    exp.set_defaults(func=cmd_export)


def cmd_completion(args: argparse.Namespace) -> int:
    from perfgate import completion

    sys.stdout.write(completion.script(build_parser(), args.shell))
    return 0


def _add_completion_parser(sub) -> None:
    from perfgate.completion import SHELLS

    comp = sub.add_parser(
        "completion", help="print a completion script for this command, e.g. source <(perfgate completion bash)"
    )
    # choices: a shell not in SHELLS is argparse's usage error, exit 2, naming the value and the valid ones.
    comp.add_argument("shell", choices=SHELLS, help="the shell the script is for")
    comp.set_defaults(func=cmd_completion)


def _add_history_parser(sub) -> None:
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


def _add_report_parser(sub) -> None:
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


def cmd_ab(args: argparse.Namespace) -> int:
    from perfgate.ab import process_run
    from perfgate.ab.process_env import ABError, side_from_options

    def progress(message: str) -> None:
        print(f"[perfgate ab] {message}", flush=True)

    out = Path(args.judge or args.resume or args.out or process_run.default_out())
    if out.exists() and not out.is_dir():  # a run's directory: a file there would crash the first write
        option = "--judge" if args.judge else "--resume" if args.resume else "--out"
        print(f"perfgate ab: cannot compare: {option} {out} is a file, not a run's directory", file=sys.stderr)
        return exits.UNUSABLE
    if args.paired:
        from perfgate.ab import face

        return face.run(args, out)

    def judged():
        if args.judge:  # a run cut by a time limit, judged here: resuming on another machine would mix two
            if (
                args.resume
                or args.processes is not None
                or args.precompile is not None
                or args.pytest_args
                or any(getattr(args, f"{s}_{k}") for s in "ab" for k in ("python", "rev", "env", "args"))
            ):
                raise ABError(
                    "--judge DIR judges the run in DIR as it stands: give no sides, --resume, "
                    "--processes, --precompile or pytest args"
                )
            if not out.is_dir():
                raise ABError(f"--judge {out}: no such run directory")
            return process_run.verdict(process_run.load_manifest(out), out)
        process_run.check_processes(args.processes)
        sides = [
            side_from_options(label, *(getattr(args, f"{label.lower()}_{k}") for k in ("python", "rev", "env", "args")))
            for label in ("A", "B")
        ]
        if args.resume and (
            args.pytest_args
            or args.precompile is not None
            or any(s.rev or s.env or s.args or args.a_python or args.b_python for s in sides)
        ):
            raise ABError(
                "--resume DIR carries on the run as its manifest says: give no sides, --precompile or pytest args"
            )
        return process_run.run_ab(
            out,
            progress,
            sides=sides,
            common=args.pytest_args,
            processes=args.processes,
            resume=bool(args.resume),
            precompile=process_run.DEFAULT_PRECOMPILE if args.precompile is None else args.precompile,
        )

    return process_run.report_and_exit("ab", out, judged, args.markdown, args.json, args.html)


def _add_ab_parser(sub) -> None:
    ab = sub.add_parser(
        "ab",
        help="run the cells under two environments A and B, alternating processes on "
        "this machine, and judge B against A; exit 0 pass, 1 regression, 2 cannot "
        "compare (docs/ab.md)",
        description="Pytest args after -- select the cells for both sides, e.g. "
        '-- perftests -m "gpu and pr" -p no:randomly',
    )
    for s, label in (("a", "A"), ("b", "B")):
        ab.add_argument(
            f"--{s}-python", metavar="PY", help=f"side {label}'s interpreter, a venv's bin/python (default: this one)"
        )
        ab.add_argument(
            f"--{s}-rev",
            metavar="REV",
            help=f"side {label} runs this git revision of the repository "
            "(checked out under DIR/worktrees; default: the working tree)",
        )
        ab.add_argument(
            f"--{s}-env",
            metavar="NAME=VALUE",
            action="append",
            default=[],
            help=f"an environment variable for side {label} (repeatable)",
        )
        ab.add_argument(
            f"--{s}-args",
            metavar="ARGS",
            default="",
            help=f"pytest args for side {label} only, one shell-quoted string, e.g. "
            f"--{s}-args=--perf-inject=device_slow:3",
        )
    ab.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help="processes per side, at least 2 (default 3; with --resume: raise it to add pairs)",
    )
    ab.add_argument(
        "--precompile",
        type=int,
        metavar="N",
        help="a side's first process compiles its cells N at once before timing them, and its compile-time "
        "figures are those first calls (default 4; 0: each cell compiles in its own turn)",
    )
    ab.add_argument(
        "--paired",
        action="store_true",
        help="both sides alive on one GPU, rounds alternated, three outcomes (the PR gate's engine: one pytest "
        "run with --perf-against; docs/gate.md); without it, whole processes alternate",
    )
    ab.add_argument("--out", metavar="DIR", help="the run's directory (default: .perfgate/ab-<UTC time>)")
    ab.add_argument("--resume", metavar="DIR", help="carry on the A/B run in DIR, then judge it")
    ab.add_argument(
        "--judge",
        metavar="DIR",
        help="judge the A/B run in DIR as it stands, running nothing (a run "
        "stopped by a time limit: its complete processes; a side needs 2 for the timed rules)",
    )
    ab.add_argument("--markdown", metavar="FILE", help="also write the Markdown verdict here")
    ab.add_argument("--json", metavar="FILE", help="also write the verdict as JSON here")
    ab.add_argument(
        "--html",
        metavar="OUT.html",
        help="also write an HTML report of the run: a section per side, "
        "the verdict on top (a finished run: perfgate ab --resume DIR --html OUT.html)",
    )
    ab.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="pytest args for both sides (after --)")
    ab.set_defaults(func=cmd_ab)


def cmd_bisect(args: argparse.Namespace) -> int:
    from perfgate.ab import bisect_report, bisect_run, process_report, process_run
    from perfgate.ab.bisect_verdict import BadRule, BisectError
    from perfgate.ab.process_env import ABError

    def progress(message: str) -> None:
        print(f"[perfgate bisect] {message}", flush=True)

    out = Path(args.resume or args.out or process_run.default_out("bisect"))
    range_given = args.good or args.bad or args.step_python or args.step_path or args.step_pip
    try:
        if args.resume:
            if range_given or args.pytest_args:
                raise BisectError(
                    "--resume DIR carries on the bisection as its bisect.json says: give no range or pytest args"
                )
            manifest = None
        else:
            rule = BadRule.parse(args.rule)
            steps = bisect_run.steps_from(
                Path.cwd(),
                out,
                args.python or sys.executable,
                args.good,
                args.bad,
                args.step_python,
                args.step_path,
                args.step_pip,
            )
            # `is None`, not `or`: --processes 0 became 3 and ran (ab had fixed it), now new_manifest refuses it
            processes = 3 if args.processes is None else args.processes
            manifest = bisect_run.new_manifest(
                out,
                steps,
                args.pytest_args,
                rule,
                processes,
                max(processes, 5) if args.max_processes is None else args.max_processes,
                shlex.split(args.pip_args or ""),
                Path.cwd().resolve(),
            )
        manifest = bisect_run.run_bisect(out, progress, manifest=manifest)
        if args.html and manifest["outcome"]["first_bad"] is not None:
            probe_dir = out / manifest["probes"][str(manifest["outcome"]["first_bad"])]["dir"]
            process_report.html(
                process_run.verdict(
                    process_run.load_manifest(probe_dir), probe_dir, BadRule.parse(manifest["rule"]).rules()
                ),
                args.html,
            )
        sys.stdout.write(bisect_report.write(manifest, out, args.markdown, args.json))
    except (BisectError, ABError, OutputError) as err:
        print(f"perfgate bisect: cannot bisect: {err}", file=sys.stderr)
        return exits.UNUSABLE
    except KeyboardInterrupt:
        print(
            f"perfgate bisect: stopped; what was measured is in {out}: perfgate bisect --resume {out} carries on",
            file=sys.stderr,
        )
        return exits.UNUSABLE
    return bisect_report.EXIT_CODES[manifest["outcome"]["outcome"]]


def _add_bisect_parser(sub) -> None:
    bis = sub.add_parser(
        "bisect",
        help="find the first bad step of a range of commits or environments, each "
        "probe an A/B run against the good end; exit 1 found, 0 no bad step, "
        "2 cannot say (docs/bisect.md)",
        description="Pytest args after -- select the cells, as for perfgate ab, e.g. "
        '-- perftests -m "gpu and pr" --perf-models gpt2 -k infer -p no:randomly',
    )
    bis.add_argument("--good", metavar="REV", help="the last good commit of this repository (the range's start)")
    bis.add_argument("--bad", metavar="REV", help="a bad commit, after --good (the range's end)")
    bis.add_argument(
        "--step-python",
        metavar="PY",
        action="append",
        default=[],
        help="an interpreter (a venv's bin/python) as a step, repeated in order: good first, bad last",
    )
    bis.add_argument(
        "--step-path",
        metavar="DIR",
        action="append",
        default=[],
        help="a directory put first on PYTHONPATH as a step (e.g. pip install --target), in order",
    )
    bis.add_argument(
        "--step-pip",
        metavar="REQS",
        action="append",
        default=[],
        help='a pip requirement set as a step, e.g. "transformers==4.57.1", installed with --no-deps '
        "into DIR/envs/NN when probed, in order",
    )
    bis.add_argument(
        "--pip-args",
        metavar="ARGS",
        help='extra pip install args for --step-pip, one shell-quoted string, e.g. "--no-index --find-links wheels"',
    )
    bis.add_argument("--python", metavar="PY", help="the interpreter of commit, path and pip steps (default: this one)")
    bis.add_argument(
        "--rule",
        default="gate",
        metavar="RULE",
        help="what makes a step bad: gate (any of the gate's rules, default), METRIC or METRIC:PCT, "
        "e.g. device_speedup:2.5 or speedup (the nightly's change points are on speedup)",
    )
    bis.add_argument(
        "--processes", type=int, metavar="N", help="processes a side of each probe (default 3, at least 2)"
    )
    bis.add_argument(
        "--max-processes",
        type=int,
        metavar="M",
        help="an unsure probe is measured again with 2 more a side, up to M (default max(N, 5))",
    )
    bis.add_argument("--out", metavar="DIR", help="the bisection's directory (default: .perfgate/bisect-<UTC time>)")
    bis.add_argument("--resume", metavar="DIR", help="carry on the bisection in DIR")
    bis.add_argument("--markdown", metavar="FILE", help="also write the Markdown report here")
    bis.add_argument("--json", metavar="FILE", help="also write the report as JSON here")
    bis.add_argument("--html", metavar="OUT.html", help="the HTML A/B report of the probe that read the first bad step")
    bis.add_argument(
        "pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="pytest args for every process (after --)"
    )
    bis.set_defaults(func=cmd_bisect)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfgate", description="torch.compile performance gate")
    parser.add_argument("--version", action="version", version=f"perfgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    cmp = sub.add_parser("compare", help="compare results with a baseline; exit 0 pass, 1 regression, 2 cannot compare")
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
    _add_history_parser(sub)
    _add_report_parser(sub)
    _add_ab_parser(sub)
    _add_bisect_parser(sub)
    _add_export_parser(sub)
    _add_completion_parser(sub)
    return parser


def _plain_warnings(show):
    """warnings.showwarning that prints perfgate's own UserWarnings as one plain line: their text names the
    input's file and line already, and Python's format added `perfgate/cli.py:85: UserWarning` and the source
    line that warned, which tell a user nothing. Any other warning keeps Python's format (`show`)."""
    package = Path(__file__).resolve().parent

    def showwarning(message, category, filename, lineno, file=None, line=None):
        if issubclass(category, UserWarning) and Path(filename).resolve().is_relative_to(package):
            print(f"perfgate: warning: {message}", file=file or sys.stderr)
        else:
            show(message, category, filename, lineno, file, line)

    return showwarning


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)  # a usage error exits 2, as argparse does
    try:
        with warnings.catch_warnings():  # restores showwarning on the way out (main runs inside tests too)
            warnings.showwarning = _plain_warnings(warnings.showwarning)
            return args.func(args)
    except Exception:  # noqa: BLE001 - a crash must not exit 1, which a CI reads as "regression"
        traceback.print_exc()
        print(
            f"perfgate: internal error in `perfgate {args.command}` (exit {exits.BUG}): a bug in "
            f"perfgate, not a verdict on the results; the traceback is above",
            file=sys.stderr,
        )
        return exits.BUG


if __name__ == "__main__":
    sys.exit(main())
