"""`perfgate ab`: the cells under two environments A and B on this machine, B judged against A (docs/ab.md).
By default the CLI's way into the paired engine, the PR gate's: it runs pytest once on this interpreter, asking
the plugin to measure every cell with side A (`--perf-against`, `--perf-against-python`, `--perf-against-env`)
beside side B (`--perf-b-rev`, `--perf-b-python`, `--perf-b-env`, or this checkout); the plugin's paired
verdict is the exit code. With
--processes N (and --resume, --judge), whole pytest processes of A and B alternate instead
(perfgate.ab.process_run), for sides that cannot share a GPU. Imports no torch.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

from perfgate.ab import sides
from perfgate.ab.sides import SideError, nonblank, parse_env
from perfgate.core import exits

# The options that choose the process-alternating A/B: a run of whole processes, to size, resume or judge.
PROCESS_MODE = ("processes", "resume", "judge")
# What the process-alternating A/B has and the paired run does not: a paired run is one pytest process with
# both sides alive in it, nothing to resume or add pairs to, and B's own args are the pytest args themselves.
PROCESS_ONLY = (*PROCESS_MODE, "precompile", "a_args", "b_args", "html")


def process_mode(args) -> bool:
    return any(getattr(args, name, None) not in (None, "") for name in PROCESS_MODE)


def paired_argv(args, out: Path) -> tuple[list[str], dict]:
    """(the pytest command, its environment) of a paired `perfgate ab`; SideError names a bad option."""
    given = [name for name in PROCESS_ONLY if getattr(args, name, None) not in (None, "", [])]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise SideError(
            f"{flags}: only with --processes N (the process-alternating A/B); the default, paired, is one "
            "pytest run with both sides alive"
        )
    # The session runs on this interpreter and tree, which coordinate; side B's worker runs what --b-* name.
    command = [sys.executable, "-m", "pytest", *args.pytest_args, "--perf-report", str(out)]
    # An A/B of two environments (an upgrade) judges eager's step as well: a slower dispatcher or allocator
    # slows its host path with the same counts and GPU work. The PR gate, one environment, only shows it.
    command += ["--perf-results", str(out / "results.jsonl"), "--perf-judge-eager-wall"]
    if args.b_rev is not None:
        command += ["--perf-b-rev", nonblank("--b-rev", args.b_rev)]
    if args.b_python is not None:
        command += ["--perf-b-python", sides.check_python("--b-python", args.b_python)]
    for item in args.b_env:
        parse_env("--b-env", [item])
        command += ["--perf-b-env", item]
    if args.a_rev is not None:
        command += ["--perf-against", nonblank("--a-rev", args.a_rev)]
    if args.a_python is not None:
        command += ["--perf-against-python", nonblank("--a-python", args.a_python)]
    for item in args.a_env:
        command += ["--perf-against-env", item]
    if args.a_rev is None and args.a_python is None and not args.a_env:
        # Side A's defaults, as for whole processes: this checkout, the interpreter running perfgate, no
        # variables (B differs by its own options, or it is an A/A); named, since pairing needs a side A.
        command += ["--perf-against-python", sys.executable]
    return command, dict(os.environ)


def run_paired(args, out: Path) -> int:
    """Run the paired pytest; its exit is the verdict's (0 pass, 1 regression, 2 unsure or unusable)."""
    try:
        command, env = paired_argv(args, out)
    except SideError as err:
        print(f"perfgate ab: cannot compare: {err}", file=sys.stderr)
        return exits.UNUSABLE
    out.mkdir(parents=True, exist_ok=True)
    print(f"[perfgate ab] paired: {' '.join(command)}", flush=True)
    code = subprocess.run(command, env=env).returncode
    # pytest's own codes for a run that never judged (4 usage error, 5 no test collected) are unusable input.
    return code if code in (exits.PASS, exits.REGRESSION, exits.UNUSABLE, exits.BUG) else exits.UNUSABLE


def cmd_ab(args: argparse.Namespace) -> int:
    from perfgate.ab import process_manifest, process_run
    from perfgate.ab.process_env import ABError, side_from_options

    def progress(message: str) -> None:
        print(f"[perfgate ab] {message}", flush=True)

    out = Path(args.judge or args.resume or args.out or process_run.default_out())
    if out.exists() and not out.is_dir():  # a run's directory: a file there would crash the first write
        option = "--judge" if args.judge else "--resume" if args.resume else "--out"
        print(f"perfgate ab: cannot compare: {option} {out} is a file, not a run's directory", file=sys.stderr)
        return exits.UNUSABLE
    if not process_mode(args):
        return run_paired(args, out)
    if args.paired:
        print("perfgate ab: cannot compare: --paired with --processes, --resume or --judge", file=sys.stderr)
        return exits.UNUSABLE

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
            return process_run.verdict(process_manifest.load_manifest(out), out)
        process_manifest.check_processes(args.processes)
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


def add_parser(sub) -> None:
    ab = sub.add_parser(
        "ab",
        help="run the cells under two environments A and B on this machine, both alive on one GPU (paired; "
        "--processes N: alternating whole processes), and judge B against A; exit 0 pass, 1 regression, "
        "2 unsure or cannot compare (docs/ab.md)",
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
            "(checked out under .perfgate/against-<sha>, or DIR/worktrees with --processes; default: the working tree)",
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
        help="alternate whole processes, N a side (at least 2), instead of the paired run: for sides that "
        "cannot share a GPU (with --resume: raise it to add pairs)",
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
        help="the default: both sides alive on one GPU, rounds alternated, three outcomes (the PR gate's "
        "engine: one pytest run with --perf-against; docs/gate.md)",
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
