"""What `perfgate deal` reads of the pytest arguments it deals: the options it sets per session or refuses, the
precompile it runs once, the baseline and base side its one report judges against, each read where the
sessions' pytest reads it (`configured`), and the kept cache's costs its shards deal by. Imports neither torch
nor pytest."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path
from typing import Sequence

from perfgate.core import pyproject
from perfgate.core.matrix import MAX_PRECOMPILE, PAIRED_OPTIONS
from perfgate.core.output import OutputError
from perfgate.plan import costs

# Set per session by deal itself.
OWNED = ("--perf-shard", "--perf-results", "--perf-report", "--perf-data-parallel")
# Written by each session alone, so N sessions would each write 1/N of it over the others.
NOT_SHARED = {
    "--perf-save-baseline": "make the baseline from the run's records: perfgate baseline update DIR/results.jsonl",
    "--perf-history": "add the run's records once: perfgate history add DIR/results.jsonl",
    "--junitxml": "each session would write it over the others'",
    "--junit-xml": "each session would write it over the others'",
    # xdist workers print no closing lines, where a shard says which data-parallel cells it left out.
    "-n": "a dealt session is one process a GPU: deal is the parallelism",
    "--numprocesses": "a dealt session is one process a GPU: deal is the parallelism",
}
XDIST = ("-n", "--numprocesses")
PRECOMPILE = "--perf-precompile"


def configured(pytest_args: Sequence[str], where: Path | None = None) -> list[str]:
    """The arguments every dealt session's pytest reads, in its order, a later one winning: what it inherits
    (`inherited`), then `pytest_args`. A --perf-baseline set in [tool.perfgate] had judged the shards but not the
    merged report, which then named the data-parallel cells unjudged."""
    return [*inherited(where), *pytest_args]


def inherited(where: Path | None = None) -> list[str]:
    """The arguments a session's pytest reads before its command line: the [tool.perfgate] table
    (perfgate.core.pyproject) and [tool.pytest.ini_options] addopts of the nearest pyproject.toml at or above
    `where` (the working directory, where the sessions run: the rootdir pytest finds in the common case), then
    PYTEST_ADDOPTS. A table that cannot be read is left out: each session refuses it by name. Not read: addopts of
    a pytest.ini, tox.ini or setup.cfg, a rootdir other than that file's folder (--rootdir, -c), and -o addopts=."""
    start = where or Path.cwd()
    found = next((d / "pyproject.toml" for d in (start, *start.parents) if (d / "pyproject.toml").is_file()), None)
    from_file: list[str] = []
    if found is not None:
        try:
            parsed = pyproject.document(found)
            from_file = pyproject.as_args(pyproject.settings(found, parsed)) + pyproject.addopts(parsed)
        except ValueError:  # a bad table is each session's to refuse, by name
            from_file = []
    try:
        addopts = shlex.split(os.environ.get("PYTEST_ADDOPTS", ""))
    except ValueError:  # an unclosed quote: each session's pytest refuses it, naming it
        addopts = []
    return [*from_file, *addopts]


def option(pytest_args: Sequence[str], name: str) -> tuple[list[str], list[str]]:
    """(the values `name` is given in the pytest args, either spelling, in order; the args without it)."""
    values, rest, args = [], [], list(pytest_args)
    while args:
        arg = args.pop(0)
        if arg == name and args:
            values.append(args.pop(0))
        elif arg.startswith(name + "="):
            values.append(arg.split("=", 1)[1])
        else:
            rest.append(arg)
    return values, rest


def precompile_of(pytest_args: Sequence[str]) -> tuple[int | None, list[str]]:
    """(--perf-precompile's N, else None; the pytest args without it). deal precompiles once for every shard:
    a shard's precompile ends by removing every launch-config pick written since it began
    (perfgate.measure.precompile), and shards that each precompiled removed the picks other shards' cells had
    just timed. A dealt session never precompiles (perfgate.core.matrix.DEALT_ENV), wherever the option was set."""
    values, rest = option(pytest_args, PRECOMPILE)
    workers = []
    for value in values:
        try:
            workers.append(int(value))  # as pytest reads it: "+4" and " 4" are 4
        except ValueError:
            workers.append(0)
    if not values or not all(1 <= n <= MAX_PRECOMPILE for n in workers):  # left to the shards, whose pytest
        return None, list(pytest_args)  # refuses it by name (exit 4: 2)
    return workers[-1], rest


def refused(pytest_args: Sequence[str], inherited: Sequence[str] = ()) -> list[str]:
    """Why each option deal cannot pass to several sessions is refused: one line each. `inherited`: the options
    the sessions read before `pytest_args` (`inherited`), where one deal sets is overridden by deal's own, one
    the command line gives again is overridden by it, and one no session may write alone is refused too, saying
    where it came from. xdist off (-n 0) is no parallelism: it passes."""
    lines = []
    given = {_name(arg) for arg in pytest_args}
    for args, own in ((list(inherited), False), (list(pytest_args), True)):
        for i, arg in enumerate(args):
            name = _name(arg)
            if (not own and name in given) or (name in XDIST and _value(args, i) == "0"):
                continue
            if name in OWNED and own:
                lines.append(f"{arg}: deal sets {', '.join(OWNED)} for each session")
            elif name in NOT_SHARED:
                where = "" if own else " (set in pyproject.toml or PYTEST_ADDOPTS)"
                lines.append(f"{arg}{where}: {NOT_SHARED[name]}")
    return lines


def _value(args: Sequence[str], i: int) -> str | None:
    """The value of the option at args[i]: after its "=", joined to a short option (-n2), or the next arg."""
    arg = args[i]
    if "=" in arg:
        return arg.split("=", 1)[1]
    if not arg.startswith("--") and len(arg) > 2:
        return arg[2:]
    return args[i + 1] if i + 1 < len(args) else None


def _name(arg: str) -> str:
    """An option's name: -n2 as -n, --perf-baseline=b as --perf-baseline."""
    name = arg.split("=", 1)[0]
    return "-n" if name.startswith("-n") and not name.startswith("--") else name


def baseline_in(pytest_args: Sequence[str]) -> str | None:
    """--perf-baseline's value in the pytest args (either spelling; the last, as pytest reads it), else None: an
    empty one too, which is how a command line switches off a config file's."""
    values, _ = option(pytest_args, "--perf-baseline")
    return (values[-1] or None) if values else None


def paired_in(pytest_args: Sequence[str]) -> bool:
    """Whether the sessions measure each cell beside another side (perfgate.core.matrix.PAIRED_OPTIONS)."""
    return any(_name(arg) in PAIRED_OPTIONS for arg in pytest_args)


def gated(pytest_args: Sequence[str]) -> bool:
    """Whether the sessions judge what they measure (a baseline, or a side to pair with): each then reports."""
    return baseline_in(pytest_args) is not None or paired_in(pytest_args)


def kept_costs(seen: Sequence[str], out: Path) -> list[str]:
    """--perf-costs DIR/costs.jsonl: a copy of the kept cache's costs (perfgate.plan.costs.snapshot), which every
    shard deals by alike, taken while no session runs; none where the sessions read a --perf-costs already or the
    cache holds no costs, and none that cannot be made (the shards then deal by the priors)."""
    caches, _ = option(seen, "--perf-cache-dir")
    if option(seen, "--perf-costs")[0] or not (caches and caches[-1]):
        return []
    copy = out / costs.KEPT_COSTS
    try:
        return ["--perf-costs", str(copy)] if costs.snapshot(caches[-1], copy) else []
    except (OSError, OutputError) as err:
        print(f"perfgate deal: the shards deal by the priors, the kept costs not copied: {err}", file=sys.stderr)
        return []
