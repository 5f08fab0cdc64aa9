"""A project's pyproject.toml as perfgate reads it: the `[tool.perfgate]` table of --perf-* defaults, and pytest's
own addopts. Imports neither torch nor pytest: the plugin (perfgate.plugin.config_file, which turns a ValueError
here into a usage error) and `perfgate deal` (perfgate.faces.deal_args) both read it."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pytest itself depends on tomli below 3.11
    import tomli as tomllib  # type: ignore[import-not-found, no-redef]

PREFIX = "--perf-"
TABLE = "[tool.perfgate]"


def document(pyproject: Path) -> dict:
    """The file's TOML ({} when there is no file); ValueError, naming it, where it cannot be read."""
    if not pyproject.is_file():
        return {}
    try:
        return tomllib.loads(pyproject.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise ValueError(f"{pyproject}: cannot read {TABLE}: {err}") from None


def settings(pyproject: Path, parsed: dict | None = None) -> dict:
    """The [tool.perfgate] table of `pyproject` ({} when there is none, or no file; `parsed`: its document, read
    already); ValueError where the file cannot be read or the table is no table."""
    table = (document(pyproject) if parsed is None else parsed).get("tool", {}).get("perfgate", {})
    if not isinstance(table, dict):
        raise ValueError(f"{pyproject}: {TABLE} must be a table of option names")
    return table


def option_text(key: str, value) -> str:
    """A TOML value as the option's text: a list comma-joined, as the list options take it."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    if isinstance(value, (str, int, float)) and not isinstance(value, bool):
        return str(value)
    raise ValueError(f"{TABLE} {key} = {value!r}: give a string, a number or a list of strings")


def as_args(table: dict) -> list[str]:
    """The settings of `table` as --perf-* arguments (ValueError for a value no option takes)."""
    return [f"{PREFIX}{key}={option_text(key, value)}" for key, value in table.items()]


def addopts(parsed: dict) -> list[str]:
    """A parsed pyproject.toml's [tool.pytest.ini_options] addopts, as arguments."""
    given = parsed.get("tool", {}).get("pytest", {}).get("ini_options", {}).get("addopts", [])
    return shlex.split(given) if isinstance(given, str) else [str(arg) for arg in given]
