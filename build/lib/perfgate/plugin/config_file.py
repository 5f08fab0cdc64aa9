"""`[tool.perfgate]` in a project's pyproject.toml: its --perf-* defaults, so a project need not carry them in
pytest's addopts. A key is an option's name without `--perf-` (`models = ["gpt2", "vit_b16"]` is
`--perf-models=gpt2,vit_b16`); a key that names no option is a usage error listing those that do.

The settings become arguments put before pytest's own (addopts and the command line), so pytest parses them with
each option's own type and choices, and an option given in addopts or on the command line, which pytest parses
later, overrides its setting.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below 3.11
    import tomli as tomllib

PREFIX = "--perf-"
TABLE = "[tool.perfgate]"


def settings(pyproject: Path) -> dict:
    """The [tool.perfgate] table of `pyproject` ({} when there is none, or no file)."""
    if not pyproject.is_file():
        return {}
    try:
        document = tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise pytest.UsageError(f"{pyproject}: cannot read {TABLE}: {err}") from None
    table = document.get("tool", {}).get("perfgate", {})
    if not isinstance(table, dict):
        raise pytest.UsageError(f"{pyproject}: {TABLE} must be a table of option names")
    return table


def _value(key: str, value) -> str:
    """A TOML value as the option's text: a list comma-joined, as the list options take it."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise pytest.UsageError(f"{TABLE} {key} = {value!r}: give a string, a number or a list of strings")


def as_args(table: dict, options: set[str], where: Path) -> list[str]:
    """The settings of `table` as --perf-* arguments; `options` are the --perf-* names pytest knows."""
    unknown = sorted(key for key in table if f"{PREFIX}{key}" not in options)
    if unknown:
        valid = ", ".join(sorted(name.removeprefix(PREFIX) for name in options))
        raise pytest.UsageError(f"{where}: {TABLE} has no option {', '.join(unknown)}; valid keys: {valid}")
    return [f"{PREFIX}{key}={_value(key, value)}" for key, value in table.items()]


def perf_options(parser: pytest.Parser) -> set[str]:
    """The --perf-* option names of perfgate's option group."""
    group = parser.getgroup("perfgate")
    return {name for option in group.options for name in option.names() if name.startswith(PREFIX)}
