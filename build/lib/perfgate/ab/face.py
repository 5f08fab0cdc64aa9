"""`perfgate ab --paired`: the CLI's way into the paired engine. It runs pytest once, with side B's interpreter
and environment, asking the plugin to measure every cell beside side A (`--perf-against`,
`--perf-against-python`, `--perf-against-env`); the plugin's paired verdict is the exit code. Imports no torch.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from perfgate.ab.sides import SideError, nonblank, parse_env
from perfgate.core import exits

# What the process-alternating A/B has and the paired run does not: a paired run is one pytest process with
# both sides alive in it, nothing to resume or add pairs to, and B's own args are the pytest args themselves.
PROCESS_ONLY = ("processes", "precompile", "resume", "judge", "a_args", "b_args", "html")


def argv(args, out: Path) -> tuple[list[str], dict]:
    """(the pytest command, its environment) of a paired `perfgate ab`; SideError names a bad option."""
    given = [name for name in PROCESS_ONLY if getattr(args, name, None) not in (None, "", [])]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise SideError(f"{flags}: only without --paired (they belong to the process-alternating A/B)")
    python = nonblank("--b-python", args.b_python) if args.b_python is not None else sys.executable
    if args.b_rev is not None:
        raise SideError("--b-rev with --paired: side B is this checkout; run perfgate from B's checkout instead")
    command = [python, "-m", "pytest", *args.pytest_args, "--perf-report", str(out)]
    command += ["--perf-results", str(out / "results.jsonl")]
    if args.a_rev is not None:
        command += ["--perf-against", nonblank("--a-rev", args.a_rev)]
    if args.a_python is not None:
        command += ["--perf-against-python", nonblank("--a-python", args.a_python)]
    for item in args.a_env:
        command += ["--perf-against-env", item]
    if args.a_rev is None and args.a_python is None and not args.a_env:
        raise SideError("--paired needs a side A: --a-rev, --a-python or --a-env (else it compares a tree with itself)")
    env = {**os.environ, **parse_env("--b-env", args.b_env)}
    return command, env


def run(args, out: Path) -> int:
    """Run the paired pytest; its exit is the verdict's (0 pass, 1 regression, 2 unsure or unusable)."""
    try:
        command, env = argv(args, out)
    except SideError as err:
        print(f"perfgate ab: cannot compare: {err}", file=sys.stderr)
        return exits.UNUSABLE
    out.mkdir(parents=True, exist_ok=True)
    print(f"[perfgate ab] paired: {' '.join(command)}", flush=True)
    code = subprocess.run(command, env=env).returncode
    # pytest's own codes for a run that never judged (4 usage error, 5 no test collected) are unusable input.
    return code if code in (exits.PASS, exits.REGRESSION, exits.UNUSABLE, exits.BUG) else exits.UNUSABLE
