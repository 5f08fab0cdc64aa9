"""What an installed perfgate promises another project: its pytest11 entry point (the plugin, with no conftest),
[tool.perfgate] defaults that the command line overrides, `python -m perfgate --version`, py.typed, a CHANGELOG
in step with the record schema, and the record's JSON Schema in step with FIELDS."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

# numpy before pytester's in-process runs: imported inside one, then dropped from sys.modules with the run's
# modules, it cannot be imported again ("cannot load module more than once per process")
import numpy  # noqa: F401

import perfgate
from perfgate.core import record_schema
from perfgate.core.pyproject import tomllib  # tomli below Python 3.11
from perfgate.core.record import FIELDS, RECORD_SCHEMA

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
HEADER = """
def pytest_report_header(config):
    return f"perf: {config.getoption('perf_round_ms')} {config.getoption('perf_isolate')}"
"""


def installed(pytester, monkeypatch) -> None:
    """A scratch project where perfgate is installed: a dist-info on sys.path with pyproject's pytest11 entry
    points (pytest finds plugins through importlib.metadata), and no conftest naming the plugin. Installing the
    wheel into a fresh venv would take a minute of the test command."""
    entry_points = PYPROJECT["project"]["entry-points"]["pytest11"]
    dist = pytester.mkdir("site") / "perfgate_scratch-0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: perfgate-scratch\nVersion: 0\n")
    (dist / "entry_points.txt").write_text("[pytest11]\n" + "".join(f"{k} = {v}\n" for k, v in entry_points.items()))
    monkeypatch.syspath_prepend(dist.parent)
    monkeypatch.delenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", raising=False)
    pytester.makeconftest(HEADER)


def test_an_installed_perfgate_is_a_plugin_whose_pyproject_defaults_the_command_line_overrides(pytester, monkeypatch):
    installed(pytester, monkeypatch)
    pytester.makepyprojecttoml('[tool.perfgate]\nround-ms = 7\nisolate = "off"\n')
    out = pytester.runpytest_inprocess("--collect-only", "-p", "no:randomly")
    out.stdout.fnmatch_lines(["perf: 7.0 off"])
    out = pytester.runpytest_inprocess("--collect-only", "-p", "no:randomly", "--perf-round-ms=9", "--perf-isolate=all")
    out.stdout.fnmatch_lines(["perf: 9.0 all"])


def test_a_pyproject_key_that_names_no_option_is_a_usage_error_listing_the_keys(pytester, monkeypatch):
    installed(pytester, monkeypatch)
    pytester.makepyprojecttoml('[tool.perfgate]\nmodel = "gpt2"\n')
    out = pytester.runpytest_inprocess("--collect-only", "-p", "no:randomly")
    assert out.ret == 4, out.stdout.str()
    out.stderr.fnmatch_lines(["*[[]tool.perfgate[]] has no option model; valid keys: *models*"])


def test_python_m_perfgate_prints_the_version():
    proc = subprocess.run([sys.executable, "-m", "perfgate", "--version"], capture_output=True, text=True, cwd=REPO)
    assert proc.returncode == 0 and proc.stdout.strip() == f"perfgate {perfgate.__version__}", proc.stderr
    assert PYPROJECT["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "perfgate.__version__"}


def test_the_package_says_it_is_typed():
    assert (REPO / "perfgate" / "py.typed").is_file()
    assert "py.typed" in PYPROJECT["tool"]["setuptools"]["package-data"]["perfgate"]


def test_the_changelog_top_entry_names_this_version_and_the_record_schema_it_writes():
    top = next(line for line in (REPO / "CHANGELOG.md").read_text().splitlines() if line.startswith("## "))
    match = re.fullmatch(r"## (\S+) .*: record schema (\d+)", top)
    assert match, f"CHANGELOG.md's top entry should read '## <version> ...: record schema <N>', not {top!r}"
    assert (match[1], int(match[2])) == (perfgate.__version__, RECORD_SCHEMA), (
        f"CHANGELOG.md's top entry {top!r}: this perfgate is {perfgate.__version__} and writes record schema "
        f"{RECORD_SCHEMA}; a new schema or version gets its entry"
    )


def test_the_shipped_json_schema_is_the_one_fields_makes():
    shipped = json.loads(record_schema.PATH.read_text())
    assert shipped == record_schema.json_schema(), "regenerate it: python -m perfgate.core.record_schema"
    assert "record.schema.json" in PYPROJECT["tool"]["setuptools"]["package-data"]["perfgate.core"]
    for field in FIELDS:  # each property as its Field says: JSON kind, choices, sign
        prop = shipped["properties"][field.name]
        assert prop["type"] == [record_schema.KINDS[field.type], "null"]
        assert prop.get("enum") == ([*field.choices, None] if field.check == "choice" else None)
        assert ("minimum" in prop or "exclusiveMinimum" in prop) == (field.check in (">= 0", "> 0", "count"))
    assert shipped["required"] == ["status"] and "speedup" in shipped["then"]["required"]
