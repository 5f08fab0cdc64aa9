"""Input a careless or hostile user hands the `perfgate` command (issue 36): names that would put a file where it
was not asked for, paths that are no file of records, outputs that cannot be written. Each is unusable input:
exit 2 with a message naming the path or field, no traceback, nothing half-written. docs/reliability.md lists
them."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.judge.baseline import build_baseline, write_baseline

import synthetic as syn

KEY = (syn.H100, "pr")
QUIET = {"noise": 0.005, "run_noise": 0.002}


@pytest.fixture(scope="module")
def run():
    return syn.run(5, **QUIET)


@pytest.fixture
def baseline_file(tmp_path, run):
    return str(write_baseline(tmp_path / "base.json", build_baseline([run])[KEY]))


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _files(root) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


@pytest.mark.parametrize(
    "field, value",
    [
        ("fingerprint", "../../escaped"),
        ("fingerprint", "/tmp/perfgate-escaped"),
        ("fingerprint", ".hidden"),
        ("tier", "../escaped"),
        ("tier", "a/b"),
        ("tier", "nightly\nx"),
    ],
    ids=[
        "fingerprint-dotdot",
        "fingerprint-absolute",
        "fingerprint-hidden",
        "tier-dotdot",
        "tier-slash",
        "tier-newline",
    ],
)
def test_a_record_name_that_would_put_a_baseline_outside_dir_is_refused(tmp_path, capsys, run, field, value):
    records = json.loads(json.dumps(run))
    for record in records:
        if field == "fingerprint":
            record["env"]["fingerprint"] = value
        else:
            record["tier"] = value
    (tmp_path / "deep" / "er").mkdir(parents=True)
    results = _write(tmp_path / "r.jsonl", records)
    before = _files(tmp_path)
    assert main(["baseline", "update", results, "--dir", str(tmp_path / "deep" / "er" / "b")]) == 2
    err = capsys.readouterr().err
    assert f"{'env.fingerprint' if field == 'fingerprint' else 'tier'}: {value[:60]!r}" in err
    assert "is not a safe name" in err and "r.jsonl:1" in err
    assert _files(tmp_path) == before and not os.path.exists("/tmp/perfgate-escaped_pr.json")


@pytest.mark.parametrize(
    "cell",
    ["x" * 100_000, "a/b", "../x", "", " ", "cell\x00"],
    ids=["100k-chars", "slash", "dotdot", "empty", "space", "nul"],
)
def test_a_cell_id_that_is_no_safe_name_is_refused_with_its_start(tmp_path, capsys, run, baseline_file, cell):
    records = json.loads(json.dumps(run))
    records[2]["cell"] = cell
    rc = main(["compare", _write(tmp_path / "r.jsonl", records), "--baseline", baseline_file])
    err = capsys.readouterr().err
    assert rc == 2 and "r.jsonl:3" in err and "is not a safe name" in err
    assert len(err) < 1000  # the 100k-character id is named by its start, not printed whole


# ---------------------------------------------------------------------------------------------- perfgate ab


@pytest.mark.parametrize(
    "how, named",
    [
        ("--out", "--processes 0: a side needs 2 processes at least"),
        ("--resume", "--processes 0: a side needs 2 processes at least"),
        ("--judge", "give no sides, --resume, --processes"),
    ],
    ids=["new-run", "resume", "judge"],
)
def test_ab_with_0_processes_is_refused_before_anything_runs(tmp_path, capsys, how, named):
    pytest_args = [] if how == "--judge" else ["--", "perftests"]
    assert main(["ab", how, str(tmp_path / "ab"), "--processes", "0", *pytest_args]) == 2
    assert named in capsys.readouterr().err
    assert not (tmp_path / "ab").exists()


def _ab_run(tmp_path, run) -> Path:
    """A finished A/B run's directory, 2 processes a side, each results file one synthetic run."""
    from perfgate.ab.process_env import ABEnvironment
    from perfgate.ab.process_manifest import process_turns, save_manifest

    out = tmp_path / "ab"
    runs = process_turns(2)
    for entry in runs:
        entry["state"], entry["rc"], entry["cold"] = "done", 0, entry["rep"] == 1
        (out / entry["results"]).parent.mkdir(parents=True, exist_ok=True)
        _write(out / entry["results"], run)
    sides = {label: {**ABEnvironment(label, "python").to_json(), "versions": {}, "tests": 1} for label in "AB"}
    save_manifest(out, {"schema": 1, "sides": sides, "runs": runs, "processes": 2, "common_args": []})
    return out


@pytest.mark.parametrize(
    "spoil, named",
    [
        (lambda m: [m], "a JSON object expected, not list"),
        (lambda m: {**m, "sides": {"A": m["sides"]["A"]}}, "'sides' must hold A and B"),
        (lambda m: {**m, "runs": {"A-1": 1}}, "'runs' (a list)"),
        (lambda m: {**m, "runs": [{**m["runs"][0], "rep": "one"}]}, "needs a name, a side"),
        (lambda m: {**m, "runs": [{**m["runs"][0], "results": "../../elsewhere.jsonl"}]}, "is not a relative path"),
        (lambda m: {**m, "runs": [{**m["runs"][0], "log": "/etc/passwd"}]}, "is not a relative path"),
    ],
    ids=["a-list", "one-side", "runs-not-a-list", "rep-not-a-number", "results-outside", "log-absolute"],
)
def test_an_ab_manifest_of_the_wrong_shape_is_refused_by_path(tmp_path, capsys, run, spoil, named):
    out = _ab_run(tmp_path, run)
    manifest = json.loads((out / "manifest.json").read_text())
    (out / "manifest.json").write_text(json.dumps(spoil(manifest)))
    assert main(["ab", "--judge", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"{out / 'manifest.json'}: not an A/B run's manifest" in err and named in err


@pytest.mark.parametrize(
    "content", [b"\x89PNG\r\n\x1a\n\x00\xff", "é".encode("latin-1") + b"\n"], ids=["binary", "latin-1"]
)
def test_ab_judge_of_a_binary_results_file_names_the_process_and_file(tmp_path, capsys, run, content):
    out = _ab_run(tmp_path, run)
    (out / "results" / "B-2.jsonl").write_bytes(content)
    assert main(["ab", "--judge", str(out)]) == 2
    err = capsys.readouterr().err
    assert "process B-2" in err and "B-2.jsonl is not UTF-8 text" in err


# ---------------------------------------------------------------------------------------------- outputs


def _blocked(tmp_path, how: str, monkeypatch, name: str = "") -> tuple[str, str]:
    """(the path to give, the file that cannot be written there: `name` inside it for a --dir), blocked as
    `how` says (the tests run as root, which no file mode stops)."""
    if how == "parent-is-a-file":
        (tmp_path / "file").write_text("x")
        return str(tmp_path / "file" / "out"), str(tmp_path / "file" / "out" / name).rstrip("/")
    target = tmp_path / "out"
    blocked = target / name if name else target
    if how == "a-directory-in-the-way":
        blocked.mkdir(parents=True)
        (blocked / "keep").write_text("x")
        return str(target), str(blocked)
    import errno

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)  # the disk fills as the file is flushed
    blocked.parent.mkdir(parents=True, exist_ok=True)
    blocked.write_text("the previous output")
    return str(target), str(blocked)


@pytest.mark.parametrize("how", ["parent-is-a-file", "a-directory-in-the-way", "disk-full"])
@pytest.mark.parametrize(
    "command", ["baseline-update", "report-html", "report-markdown", "compare-markdown", "compare-json"]
)
def test_an_output_that_cannot_be_written_exits_2_naming_it_and_leaves_nothing_half_written(
    tmp_path, capsys, monkeypatch, run, baseline_file, command, how
):
    results = _write(tmp_path / "r.jsonl", run)
    before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    name = f"{KEY[0]}_{KEY[1]}.json" if command == "baseline-update" else ""
    target, blocked = _blocked(tmp_path, how, monkeypatch, name)
    before.update({p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()})
    argv = {
        "baseline-update": ["baseline", "update", results, "--dir", target],
        "report-html": ["report", results, "--html", target],
        "report-markdown": ["report", results, "--markdown", target],
        "compare-markdown": ["compare", results, "--baseline", baseline_file, "--markdown", target],
        "compare-json": ["compare", results, "--baseline", baseline_file, "--json", target],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"cannot write {blocked}" in err and "Traceback" not in err
    after = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # no 0-byte page, no temp file, the previous output as it was


# ---------------------------------------------------------------------------------------------- inputs


def _unusable(tmp_path, kind: str, monkeypatch) -> Path:
    """A path given as a results file that is none, as `kind` says."""
    path = tmp_path / "r.jsonl"
    if kind == "a-directory":
        path.mkdir()
    elif kind == "binary":
        path.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\xff\xfe")
    elif kind == "latin-1":
        path.write_bytes('{"cell": "caf\u00e9"}\n'.encode("latin-1"))
    else:  # no read permission; the tests run as root, which reads anything, so the refusal is planted
        path.write_text("{}\n")
        real_open = Path.open

        def refuse(self, *args, **kwargs):
            if self == path:
                raise PermissionError(13, "Permission denied", str(self))
            return real_open(self, *args, **kwargs)

        monkeypatch.setattr(Path, "open", refuse)
    return path


@pytest.mark.parametrize(
    "kind, named",
    [
        ("a-directory", "is not a file"),
        ("binary", "is not UTF-8 text"),
        ("latin-1", "is not UTF-8 text"),
        ("unreadable", "Permission denied"),
    ],
)
@pytest.mark.parametrize("command", ["compare", "baseline-update", "report", "results", "history-add"])
def test_a_results_path_that_is_no_file_of_records_exits_2_naming_it(
    tmp_path, capsys, monkeypatch, baseline_file, command, kind, named
):
    path = str(_unusable(tmp_path, kind, monkeypatch))
    argv = {
        "compare": ["compare", path, "--baseline", baseline_file],
        "baseline-update": ["baseline", "update", path, "--dir", str(tmp_path / "b")],
        "report": ["report", path, "--html", str(tmp_path / "r.html")],
        "results": ["results", path],
        "history-add": ["history", "add", path, "--db", str(tmp_path / "h.sqlite")],
    }[command]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"results file {path} " in err and named in err and "Traceback" not in err
    assert not any(p.exists() for p in (tmp_path / "b", tmp_path / "r.html", tmp_path / "h.sqlite"))


@pytest.mark.parametrize("kind", ["binary", "unreadable"])
def test_a_baseline_that_cannot_be_read_exits_2_naming_it(tmp_path, capsys, monkeypatch, run, kind):
    results = _write(tmp_path / "results.jsonl", run)
    baseline = tmp_path / "r.jsonl"  # _unusable's name; a baseline file may have any name
    baseline.unlink(missing_ok=True)
    _unusable(tmp_path, kind, monkeypatch)
    if kind == "unreadable":  # read_text goes through open(), not Path.open
        monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: Path.open(self))
    assert main(["compare", results, "--baseline", str(baseline)]) == 2
    err = capsys.readouterr().err
    assert f"baseline {baseline}" in err and "Traceback" not in err


# ---------------------------------------------------------------------------------------------- nothing measured


def _skipped(record, env=True):
    return {**record, "status": "skipped", "reason": "no CUDA device", "env": record["env"] if env else {}}


@pytest.mark.parametrize(
    "edit, code, named",
    [
        (
            lambda rs: [_skipped(r) for r in rs],
            2,
            "nothing was measured: all 10 selected cell(s) were skipped: no CUDA device (10 cells)",
        ),
        (
            lambda rs: rs[:3] + [_skipped(r, env=False) for r in rs[3:]],
            2,
            "7 selected cell(s) were not measured and carry no environment",
        ),
        (lambda rs: rs[:9] + [_skipped(rs[9])], 1, "ok in the baseline, skipped now: no CUDA device"),
        (lambda rs: rs[:9], 0, ""),  # a narrowed run: the cell it did not select is missing, and allowed
    ],
    ids=["every-cell-skipped", "skipped-without-environment", "one-skipped-of-a-known-environment", "narrowed"],
)
def test_what_a_run_that_did_not_measure_its_cells_gets(tmp_path, capsys, run, baseline_file, edit, code, named):
    md, js = tmp_path / "g.md", tmp_path / "g.json"
    rc = main(
        [
            "compare",
            _write(tmp_path / "r.jsonl", edit(run)),
            "--baseline",
            baseline_file,
            "--markdown",
            str(md),
            "--json",
            str(js),
        ]
    )
    captured = capsys.readouterr()
    assert rc == code and named in captured.out + captured.err
    assert json.loads(js.read_text())["exit_code"] == code and named.replace("_", "\\_") in md.read_text()


def test_a_baseline_with_no_cells_cannot_gate(tmp_path, capsys, run):
    empty = write_baseline(tmp_path / "b.json", {**build_baseline([run])[KEY], "cells": {}})
    assert main(["compare", _write(tmp_path / "r.jsonl", run), "--baseline", str(empty)]) == 2
    assert f"baseline {empty} holds no cells" in capsys.readouterr().err


def test_an_ab_run_whose_sides_measured_nothing_cannot_pass(tmp_path, capsys, run):
    out = _ab_run(tmp_path, [_skipped(r) for r in run])
    assert main(["ab", "--judge", str(out)]) == 2
    assert "nothing was measured: all 40 selected cell(s) were skipped" in capsys.readouterr().out


@pytest.mark.parametrize(
    "fingerprint, tier, marks",
    [
        ("cpu-x86-64_torch2.14", "nightly", "cpu"),
        (syn.H100, "pr", "gpu and pr"),
        (syn.H100, "nightly", "gpu and nightly"),
    ],
    ids=["cpu", "gpu-pr", "gpu-nightly"],
)
def test_the_hint_for_a_missing_baseline_names_its_directory_and_the_records_own_tier(
    tmp_path, capsys, run, fingerprint, tier, marks
):
    records = [dict(r, env=dict(r["env"], fingerprint=fingerprint), tier=tier) for r in run]
    where = tmp_path / "my baselines"
    where.mkdir()
    assert main(["compare", _write(tmp_path / "r.jsonl", records), "--baseline", str(where)]) == 2
    err = capsys.readouterr().err
    assert f"pytest perftests -m \"{marks}\" --perf-save-baseline '{where}'" in err
    assert f"perfgate baseline update RESULTS... --dir '{where}'" in err


@pytest.mark.parametrize("env", [True, False], ids=["with-environment", "without-environment"])
def test_baseline_update_of_a_run_that_measured_nothing_says_so_and_writes_nothing(tmp_path, capsys, run, env):
    results = _write(tmp_path / "r.jsonl", [_skipped(r, env=env) for r in run])
    assert main(["baseline", "update", results, "--dir", str(tmp_path / "b")]) == 2
    assert "nothing was measured: all 10 selected cell(s) were skipped" in capsys.readouterr().err
    assert not (tmp_path / "b").exists()
