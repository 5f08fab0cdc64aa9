"""The `perfgate` command's entry point: main, and the parser it assembles from perfgate/faces/ (one module per
command, each a thin face over perfgate.judge, perfgate.store, perfgate.render or perfgate.ab).

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
    perfgate deal [--gpus all|N] [--out DIR] -- PYTEST_ARGS...              (docs/gate.md: a runner of several GPUs)
    perfgate export RESULTS [RESULTS ...] --format csv|v3|pytest-benchmark|openmetrics [--output FILE]
    perfgate completion bash|zsh                                           (a shell completion script)
    perfgate --version
"""

from __future__ import annotations

import argparse
import sys
import traceback
import warnings
from pathlib import Path
from typing import Sequence

from perfgate import __version__
from perfgate.core import exits
from perfgate.faces import ab, bisect, compare, completion, deal, export, history, report
from perfgate.faces.compare import ADVISED_RUNS

__all__ = ["ADVISED_RUNS", "build_parser", "main"]  # ADVISED_RUNS: the tests and users read it here


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="perfgate", description="torch.compile performance gate")
    parser.add_argument("--version", action="version", version=f"perfgate {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    # In this order `perfgate --help` and the completion script list the commands.
    for face in (compare, history, report, ab, bisect, deal, export):
        face.add_parser(sub)
    completion.add_parser(sub, parser)
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
