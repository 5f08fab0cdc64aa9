"""The second hostile-newcomer battery (issue 54): values that hung a run, files where folders are wanted,
JSON nested past the parser's limit, a read-only history, misleading messages. Each is unusable input: a usage
error or exit 2 naming the option, file or field, never a hang or a traceback. docs/reliability.md lists them.
In-process throughout (the plugin's checks called as pytest calls them): CI time is tight."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from perfgate.cli import main
from perfgate.judge.baseline import build_baseline, write_baseline
from perfgate.plugin import folders, options
from perfgate.store import history

import synthetic as syn
import tiny_suite

KEY = (syn.H100, "pr")
DEEP = 100_000  # the depth: far past Python's recursion limit of 1000


class FakeConfig:
    """What options.check reads of a pytest.Config: the --perf-* values given, the rest their defaults."""

    def __init__(self, **given):
        self.given = {f"--perf-{k.replace('_', '-')}": v for k, v in given.items()}
        self.option = SimpleNamespace(numprocesses=None)

    def getoption(self, name):
        return self.given.get(name, {"--perf-numerics": "on"}.get(name))

    def getini(self, name):
        return "fixtures:REGISTRY"


@pytest.fixture(scope="module")
def run():
    return syn.run(7)


@pytest.fixture
def here(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # the default --perf-results lands under it
    return tmp_path


@pytest.mark.parametrize(
    "given, said",
    [
        ({"shard": "1/1000000000000"}, "--perf-shard='1/1000000000000': N must be at most 1000"),
        ({"rotate": "2/5000"}, "--perf-rotate='2/5000': N must be at most 1000"),
        ({"min_rounds": 10**12}, "--perf-min-rounds=1000000000000: rounds must be at most 1000"),
        ({"max_rounds": 1001}, "--perf-max-rounds=1001: rounds must be at most 1000"),
        ({"round_ms": 1e308}, "--perf-round-ms=1e+308: the round length must be at most 10000 ms"),
        ({"inject": "host_slow:1e308"}, "--perf-inject='host_slow:1e308': host_slow's argument must be at most 1000"),
        ({"inject": "hang:1e9"}, "hang's argument must be at most 86400"),
        (
            {"cell_timeout": 1e308},
            "--perf-cell-timeout=1e+308: the time limit must be a finite number of seconds > 0 and",
        ),
        ({"precompile": 10**6, "cache_dir": "c"}, "--perf-precompile=1000000: the number of processes must be 1"),
        ({"models": ""}, "--perf-models='' names nothing"),
        ({"models": ",,,"}, "--perf-models=',,,' names nothing"),
        ({"variants": " , "}, "--perf-variants=' , ' names nothing"),
    ],
    ids=lambda v: "-".join(v) if isinstance(v, dict) else None,
)
def test_a_count_or_duration_past_its_bound_or_an_empty_list_is_refused(here, given, said):
    with pytest.raises(ValueError) as err:
        options.check(FakeConfig(**given))
    assert said in str(err.value)


def test_counts_at_their_bounds_pass(here):
    chosen = options.check(FakeConfig(shard="1000/1000", min_rounds=1000, round_ms=10_000.0, inject="host_slow:1000"))
    assert chosen.shard == (1000, 1000)


@pytest.mark.parametrize("option", ["profile", "cache_dir", "reference_cache"])
def test_a_file_where_a_folder_is_wanted_is_refused_before_the_first_cell(here, option):
    (here / "f").write_text("x")
    with pytest.raises(ValueError, match=f"--perf-{option.replace('_', '-')}=f: is a file; give a directory"):
        options.check(FakeConfig(**{option: "f"}))


@pytest.mark.parametrize(
    "option, says",
    [
        ("costs", "neither a history database nor a costs file"),  # a costs file is JSON lines
        ("history", "history database t.txt: file is not a database"),
    ],
)
def test_a_text_file_as_a_history_database_is_refused_not_an_internal_error(here, option, says):
    (here / "t.txt").write_text("hello\n")
    with pytest.raises(ValueError, match=f"--perf-{option}=t.txt: {says}"):
        options.check(FakeConfig(**{option: "t.txt"}))


def test_a_costs_file_is_taken_and_its_lines_past_reading_are_left_out(here):
    """A kept cache's costs file, which CI restores run after run: a line no parser can read (an int past float's
    range, nesting past the parser's depth) is no cost and no crash; an empty file is a file of no costs."""
    huge = '{"cell": "a", "seconds": 1' + "0" * 400 + "}"
    good = '{"cell": "b", "seconds": 3.5, "paired": false}'
    (here / "costs.jsonl").write_text("\n".join([huge, _deep("object"), good]) + "\n")
    (here / "empty.jsonl").write_text("")
    for name in ("costs.jsonl", "empty.jsonl"):
        options.check(FakeConfig(costs=name))
    from perfgate.plan.costs import cost_lines

    assert cost_lines(here / "costs.jsonl") == [{"cell": "b", "seconds": 3.5, "paired": False}]


def _deep(kind: str) -> str:
    return "[" * DEEP + "]" * DEEP if kind == "array" else '{"a":' * DEEP + "1" + "}" * DEEP


@pytest.mark.parametrize("kind", ["array", "object"])
@pytest.mark.parametrize("command", ["compare", "results", "report", "history", "baseline"])
def test_json_nested_past_the_parsers_limit_in_a_records_file_is_exit_2_naming_the_line(
    tmp_path, run, capsys, command, kind
):
    lines = [json.dumps(r) for r in run[:2]] + [json.dumps(run[2])[:-1] + f', "extra": {_deep(kind)}}}']
    results = tmp_path / "r.jsonl"
    results.write_text("\n".join(lines) + "\n")
    base = write_baseline(tmp_path / "b.json", build_baseline([run])[KEY])
    argv = {
        "compare": ["compare", str(results), "--baseline", str(base)],
        "results": ["results", str(results)],
        "report": ["report", str(results), "--html", str(tmp_path / "x.html")],
        "history": ["history", "add", str(results), "--db", str(tmp_path / "h.db")],
        "baseline": ["baseline", "update", str(results), "--dir", str(tmp_path / "bl")],
    }[command]
    assert main(argv) == 2
    said = f"{results}:3: not a JSON record (a value nested deeper than the JSON reader follows"
    assert said in capsys.readouterr().err


def test_a_baseline_nested_past_the_parsers_limit_is_exit_2_and_a_usage_error_under_pytest(tmp_path, run, capsys):
    base = tmp_path / "b.json"
    base.write_text('{"schema": 1, "cells": ' + _deep("array") + "}")
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in run))
    assert main(["compare", str(results), "--baseline", str(base)]) == 2
    assert f"baseline {base} is not valid JSON (a value nested deeper" in capsys.readouterr().err
    with pytest.raises(ValueError, match="--perf-baseline=.*nested deeper"):  # was an INTERNALERROR
        options.check_baseline(str(base))


@contextlib.contextmanager
def _read_only(path):
    """`path` unwritable for this process: mode 444 for a user; for root (whom modes do not stop) immutable."""
    os.chmod(path, stat.S_IRUSR | stat.S_IRGRP | stat.S_IROTH)
    if os.geteuid() == 0 and subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode != 0:
        pytest.skip("root, and chattr +i does not work here: nothing makes the file read-only")
    try:
        yield
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(path)], capture_output=True)


@pytest.mark.parametrize("command", ["show", "report"])
def test_a_read_only_history_can_be_read(tmp_path, run, capsys, command):
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in run))
    db = tmp_path / "h.db"
    history.append(db, run)
    argv = (
        ["history", "show", run[0]["cell"], "--db", str(db)]
        if command == "show"
        else ["report", str(results), "--db", str(db), "--markdown", str(tmp_path / "r.md")]
    )
    with _read_only(db):
        assert main(argv) == 0, capsys.readouterr().err


@pytest.mark.parametrize(
    "edit, said",
    [
        (lambda b: b.update(cells=[1, 2]), "field 'cells' is a list, expected an object of cells by id"),
        (lambda b: b.update(schema=9), "has schema 9, expected an object of schema 1"),
    ],
    ids=["list-cells", "other-schema"],
)
def test_a_baseline_of_the_wrong_shape_says_what_is_wrong(tmp_path, run, capsys, edit, said):
    baseline = build_baseline([run])[KEY]
    edit(baseline)
    base = tmp_path / "b.json"
    base.write_text(json.dumps(baseline))
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in run))
    assert main(["compare", str(results), "--baseline", str(base)]) == 2
    assert said in capsys.readouterr().err


def test_a_baseline_named_for_the_results_but_holding_another_fingerprint_does_not_send_the_reader_to_itself(
    tmp_path, run, capsys
):
    baseline = build_baseline([run])[KEY]
    baseline["fingerprint"] = syn.A100
    write_baseline(tmp_path / f"{syn.H100}_pr.json", baseline)
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in run))
    assert main(["compare", str(results), "--baseline", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "the expected file is" not in err and "its name is that of the" in err


GOOD_STEP = {"name": "00", "label": "a", "python": "/usr/bin/python3", "rev": None, "env": {}, "pip": None}


@pytest.mark.parametrize(
    "text, said",
    [
        (b"[]", "manifest schema 'list', expected 1"),
        (b"\x89PNG\x00\xff\xfe", "not a bisection's manifest ('utf-8' codec can't decode"),
        (b'{"schema": 1}', "field 'cwd' is null"),
        (None, "steps[1].label is null"),
        (b'{"schema": 1, "x": ' + b"[" * DEEP + b"]" * DEEP + b"}", "a value nested deeper"),
    ],
    ids=["a-list", "binary", "schema-only", "a-step-without-label", "deep"],
)
def test_bisect_resume_of_a_corrupt_manifest_is_exit_2_naming_the_field(tmp_path, capsys, text, said):
    out = tmp_path / "b"
    out.mkdir()
    if text is None:
        manifest = {
            "schema": 1,
            "cwd": str(tmp_path),
            "common_args": [],
            "pip_args": [],
            "rule": "gate",
            "processes": 3,
            "max_processes": 5,
            "steps": [GOOD_STEP, {k: v for k, v in GOOD_STEP.items() if k != "label"}],
            "probes": {},
        }
        text = json.dumps(manifest).encode()
    (out / "bisect.json").write_bytes(text)
    assert main(["bisect", "--resume", str(out)]) == 2
    err = capsys.readouterr().err
    assert said in err and "Traceback" not in err


CONTROL = "\x1b[31mRED\x1b[0m \x00 \u202eevil \u2028 \r\n"  # a colour, NUL, a bidi override, U+2028, CRLF
RAW = set("\x1b\x00\u202e\u2028\r")  # none may reach a person raw; "\n" only as a line of the output itself


def _with_control_characters(run) -> list[dict]:
    records = [dict(r) for r in run]
    bad = records[0]
    bad.update(status="failed", reason="inductor said " + CONTROL, model=bad["model"] + CONTROL)
    bad["variant"] = bad["variant"] + CONTROL
    bad["env"] = {**bad["env"], "torch": "2.11" + CONTROL, "gpu": bad["env"]["gpu"] + CONTROL}
    return records


def test_control_characters_are_shown_escaped_in_every_output_a_person_reads(tmp_path, run, capsys):
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in _with_control_characters(run)))
    base = write_baseline(tmp_path / "b.json", build_baseline([run])[KEY])
    db = tmp_path / "h.db"
    history.append(db, run)
    outputs = {name: tmp_path / name for name in ("compare.md", "report.md", "report.html")}
    assert main(["compare", str(results), "--baseline", str(base), "--markdown", str(outputs["compare.md"])]) == 1
    compare_out = capsys.readouterr().out
    assert main(["results", str(results)]) == 0
    results_out = capsys.readouterr().out
    argv = ["report", str(results), "--db", str(db), "--baseline", str(base)]
    assert main([*argv, "--html", str(outputs["report.html"]), "--markdown", str(outputs["report.md"])]) == 0
    texts = {"compare": compare_out, "results": results_out, **{k: p.read_text() for k, p in outputs.items()}}
    for name, text in texts.items():
        assert not RAW & set(text), f"{name}: {sorted(RAW & set(text))!r} raw"
        assert "x1b" in text and "u202eevil" in text, name  # Markdown escapes the backslash and bracket
    assert "inductor said \\x1b[31mRED\\x1b[0m \\x00 \\u202eevil \\u2028 \\r\\n" in results_out
    # One row a record: the \r\n no longer splits the failed cell's row.
    assert len(results_out.strip().splitlines()) == len(run) + 1


@pytest.mark.parametrize("link", ["to-a-file", "broken"])
def test_a_dir_that_is_a_symlink_to_a_file_or_a_broken_one_says_so(tmp_path, run, capsys, link):
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in run))
    (tmp_path / "file").write_text("x")
    (tmp_path / "d").symlink_to(tmp_path / ("file" if link == "to-a-file" else "nowhere"))
    assert main(["baseline", "update", str(results), "--dir", str(tmp_path / "d")]) == 2
    err = capsys.readouterr().err
    said = "is a file (a symbolic link to" if link == "to-a-file" else "is a broken symbolic link (to"
    assert f"{tmp_path / 'd'} {said}" in err and "File exists" not in err
    if link == "broken":  # and the plugin refuses it before the first cell, where it failed at the end
        with pytest.raises(ValueError, match="--perf-save-baseline=.*: is a broken symbolic link"):
            folders.check_outputs(str(results), str(tmp_path / "d"), None, None)


suite = tiny_suite.fixture()


def test_a_gpu_tier_run_on_a_cpu_box_ends_saying_nothing_was_measured_and_why(suite):
    out = suite.runpytest_inprocess("-m", "gpu", "-k", "train and inductor_default", "-p", "no:randomly")
    assert out.ret == 0 and "passed" not in out.stdout.str()  # no cell ran, and none failed
    out.stdout.fnmatch_lines(["perfgate: nothing was measured: all * selected cell(s) were skipped: no CUDA device*"])


def test_perfgates_own_warnings_print_as_one_plain_line(tmp_path, run, capsys):
    results = tmp_path / "r.jsonl"
    results.write_text("".join(json.dumps(r) + "\n" for r in run) + json.dumps(run[0])[:40])  # a torn last line
    assert main(["results", str(results)]) == 0
    err = capsys.readouterr().err
    assert f"perfgate: warning: {results}:{len(run) + 1}: an unfinished record" in err
    assert "UserWarning" not in err and "warnings.warn" not in err


def test_the_readmes_gate_output_folder_is_ignored_by_git():
    root = Path(tiny_suite.PERFGATE_ROOT)
    assert subprocess.run(["git", "check-ignore", "-q", "out/report.md"], cwd=root).returncode == 0
