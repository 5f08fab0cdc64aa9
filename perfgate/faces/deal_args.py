"""What `perfgate deal` reads of the pytest arguments it deals: the options it sets per session or refuses, the
precompile it runs once, and the baseline and base side its one report judges against, each read where the
sessions' pytest reads it. Imports neither torch nor pytest (perfgate.plugin.config_file only when called)."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Sequence

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
PRECOMPILE = "--perf-precompile"
MAX_PRECOMPILE = 256  # perfgate.plugin.options.MAX_PRECOMPILE, without importing pytest here


def configured(pytest_args: Sequence[str], where: Path | None = None) -> list[str]:
    """The arguments every dealt session's pytest reads, in its order, a later one winning: the [tool.perfgate]
    table (perfgate.plugin.config_file) and [tool.pytest.ini_options] addopts of the nearest pyproject.toml at or
    above `where` (the working directory, where the sessions run: the rootdir pytest finds in the common case),
    then PYTEST_ADDOPTS, then `pytest_args`. A table that cannot be read is left out: each session refuses it by
    name. A --perf-baseline set in [tool.perfgate] judged the shards but not the merged report, which then named
    the data-parallel cells unjudged."""
    start = where or Path.cwd()
    found = next((d / "pyproject.toml" for d in (start, *start.parents) if (d / "pyproject.toml").is_file()), None)
    from_file: list[str] = []
    if found is not None:
        from perfgate.plugin import config_file

        try:
            table = config_file.settings(found)
            from_file = config_file.as_args(table, {config_file.PREFIX + key for key in table}, found)
            ini = config_file.tomllib.loads(found.read_text(encoding="utf-8"))
            addopts = ini.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("addopts", [])
            from_file += shlex.split(addopts) if isinstance(addopts, str) else [str(a) for a in addopts]
        except Exception:  # noqa: BLE001 - a bad table is each session's to refuse, by name
            from_file = []
    return [*from_file, *shlex.split(os.environ.get("PYTEST_ADDOPTS", "")), *pytest_args]


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
    the sessions read before `pytest_args` (configured's), where one deal sets is overridden by deal's own, and
    one no session may write alone is refused too, saying where it came from."""
    lines = []
    for arg, own in [*((a, False) for a in inherited), *((a, True) for a in pytest_args)]:
        name = arg.split("=", 1)[0]
        name = "-n" if name.startswith("-n") and not name.startswith("--") else name  # -n2 as -n 2
        if name in OWNED and own:
            lines.append(f"{arg}: deal sets {', '.join(OWNED)} for each session")
        elif name in NOT_SHARED:
            where = "" if own else " (set in pyproject.toml or PYTEST_ADDOPTS)"
            lines.append(f"{arg}{where}: {NOT_SHARED[name]}")
    return lines


def baseline_in(pytest_args: Sequence[str]) -> str | None:
    """--perf-baseline's value in the pytest args (either spelling; the last, as pytest reads it), else None."""
    values, _ = option(pytest_args, "--perf-baseline")
    return values[-1] if values else None


def paired_in(pytest_args: Sequence[str]) -> bool:
    """Whether the sessions measure each cell beside a base side (--perf-against, -python, -env)."""
    return any(arg.startswith("--perf-against") for arg in pytest_args)
