"""`perfgate settle`: a gate's host-side regressions judged again on the runner that raised them, by an A/B of
the base revision against this tree (perfgate.judge.settle says which and why; docs/gate.md "Host-side
alarms"). Imports no torch: the A/B's processes run their own pytest.

    perfgate settle --report out/report.json --base BASE_SHA [--processes 3] [--out DIR] -- -p no:randomly ...

Exit 0: the gate passed, or every regression was host-side and the A/B passed; 1: a regression that is not
host-side stands (no A/B is run), or the A/B found one; 2: the report cannot be read, the gate judged
nothing, or the A/B could not compare.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from perfgate import ab_run
from perfgate.ab_env import side_from_options
from perfgate.judge import settle


def _names_tests(arg: str) -> bool:
    """A node id, a test file or a folder of test files: what pytest would run beside the cells. An option's
    value (a cache folder, a baseline folder, `no:randomly`) is none of these."""
    if arg.startswith("-"):
        return False
    path = Path(arg.split("::")[0])
    return (
        "::" in arg
        or (path.suffix == ".py" and path.name.startswith("test"))
        or (path.is_dir() and any(path.glob("test_*.py")))
    )


def _selection_problem(pytest_args) -> str | None:
    """settle selects the cells itself (their node ids): a test path or node id among the args would run more."""
    extra = [a for a in pytest_args if _names_tests(a)]
    if extra:
        return (
            f"pytest args {extra}: settle adds the host-side cells' node ids itself; give options only "
            "(e.g. -- -p no:randomly --perf-isolate off)"
        )
    return None


def run(args: argparse.Namespace) -> int:
    try:
        found = settle.settlement(settle.read_report(args.report))
    except settle.SettleError as err:
        print(f"perfgate settle: {err}", file=sys.stderr)
        return ab_run.EXIT_CANNOT_COMPARE
    print(settle.text(found), flush=True)
    if found.exit_code or not found.host_side:
        return found.exit_code
    problem = _selection_problem(args.pytest_args)
    if problem:
        print(f"perfgate settle: cannot compare: {problem}", file=sys.stderr)
        return ab_run.EXIT_CANNOT_COMPARE
    out = Path(args.out or ab_run.default_out("settle"))
    sides = [side_from_options("A", None, args.base, [], ""), side_from_options("B", None, None, [], "")]
    return ab_run.report_and_exit(
        "settle",
        out,
        lambda: ab_run.run_ab(
            out,
            lambda message: print(f"[perfgate settle] {message}", flush=True),
            sides=sides,
            common=[*args.pytest_args, *found.host_side],
            processes=args.processes,
            precompile=ab_run.DEFAULT_PRECOMPILE,
        ),
        args.markdown,
        args.json,
        args.html,
    )


def add_parser(sub) -> None:
    parser = sub.add_parser(
        "settle",
        help="judge a gate's host-side regressions again by an A/B on this runner (the base revision against "
        "this tree); exit 0 pass, 1 regression, 2 cannot compare (docs/gate.md)",
        description="Pytest args after -- are options for both sides; settle adds the cells' node ids.",
    )
    # An option, not a positional: argparse gives a second positional before `--` nothing after it.
    parser.add_argument(
        "--report", required=True, metavar="REPORT.json", help="the gate's report.json (pytest --perf-report DIR)"
    )
    parser.add_argument("--base", required=True, metavar="REV", help="side A: the base revision, e.g. the PR's base")
    parser.add_argument(
        "--processes",
        type=int,
        metavar="N",
        help=f"processes per side, at least 2 (default {ab_run.DEFAULT_PROCESSES})",
    )
    parser.add_argument("--out", metavar="DIR", help="the A/B run's directory (default: .perfgate/settle-<UTC time>)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the A/B's Markdown verdict here")
    parser.add_argument("--json", metavar="FILE", help="also write the A/B's verdict as JSON here")
    parser.add_argument("--html", metavar="OUT.html", help="also write the A/B's HTML report here")
    parser.add_argument("pytest_args", nargs="*", metavar="-- PYTEST_ARGS", help="pytest options for both sides")
    parser.set_defaults(func=run)
