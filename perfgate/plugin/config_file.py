"""`[tool.perfgate]` in a project's pyproject.toml: its --perf-* defaults, so a project need not carry them in
pytest's addopts. A key is an option's name without `--perf-` (`models = ["gpt2", "vit_b16"]` is
`--perf-models=gpt2,vit_b16`); a key that names no option is a usage error listing those that do. The reading
itself: perfgate.core.pyproject.

The settings become arguments put before pytest's own (addopts and the command line), so pytest parses them with
each option's own type and choices, and an option given in addopts or on the command line, which pytest parses
later, overrides its setting.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from perfgate.core import pyproject as project
from perfgate.core.pyproject import PREFIX, TABLE

__all__ = ["PREFIX", "TABLE", "as_args", "perf_options", "settings"]


def settings(pyproject: Path) -> dict:
    """The [tool.perfgate] table of `pyproject` ({} when there is none, or no file)."""
    try:
        return project.settings(pyproject)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None


def as_args(table: dict, options: set[str], where: Path) -> list[str]:
    """The settings of `table` as --perf-* arguments; `options` are the --perf-* names pytest knows."""
    unknown = sorted(key for key in table if f"{PREFIX}{key}" not in options)
    if unknown:
        valid = ", ".join(sorted(name.removeprefix(PREFIX) for name in options))
        raise pytest.UsageError(f"{where}: {TABLE} has no option {', '.join(unknown)}; valid keys: {valid}")
    try:
        return project.as_args(table)
    except ValueError as err:
        raise pytest.UsageError(str(err)) from None


def perf_options(parser: pytest.Parser) -> set[str]:
    """The --perf-* option names of perfgate's option group."""
    group = parser.getgroup("perfgate")
    return {name for option in group.options for name in option.names() if name.startswith(PREFIX)}
