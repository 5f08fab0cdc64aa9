"""Input a careless or hostile user hands the `perfgate` command (issue 36): names that would put a file where it
was not asked for, paths that are no file of records, outputs that cannot be written. Each is unusable input:
exit 2 with a message naming the path or field, no traceback, nothing half-written. docs/reliability.md lists
them."""

from __future__ import annotations

import json
import os

import pytest

import synthetic as syn
from perfgate.cli import main
from perfgate.judge.baseline import build_baseline, write_baseline

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


@pytest.mark.parametrize("field, value", [
    ("fingerprint", "../../escaped"), ("fingerprint", "/tmp/perfgate-escaped"), ("fingerprint", ".hidden"),
    ("tier", "../escaped"), ("tier", "a/b"), ("tier", "nightly\nx"),
], ids=["fingerprint-dotdot", "fingerprint-absolute", "fingerprint-hidden", "tier-dotdot", "tier-slash",
        "tier-newline"])
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


@pytest.mark.parametrize("cell", ["x" * 100_000, "a/b", "../x", "", " ", "cell\x00"],
                         ids=["100k-chars", "slash", "dotdot", "empty", "space", "nul"])
def test_a_cell_id_that_is_no_safe_name_is_refused_with_its_start(tmp_path, capsys, run, baseline_file, cell):
    records = json.loads(json.dumps(run))
    records[2]["cell"] = cell
    rc = main(["compare", _write(tmp_path / "r.jsonl", records), "--baseline", baseline_file])
    err = capsys.readouterr().err
    assert rc == 2 and "r.jsonl:3" in err and "is not a safe name" in err
    assert len(err) < 1000  # the 100k-character id is named by its start, not printed whole
