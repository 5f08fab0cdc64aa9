"""Reading results files: whole lines are records, a torn tail is forgiven, anything else is named."""

from __future__ import annotations

import json

import pytest

from perfgate.record import RecordFileError, load_records


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_a_torn_last_line_keeps_every_whole_record(tmp_path):
    whole = [json.dumps({"cell": f"c{i}", "status": "ok"}) for i in range(3)]
    path = _write(tmp_path / "r.jsonl", "\n".join(whole) + '\n{"cell": "c3", "sta')
    with pytest.warns(UserWarning, match=r"r.jsonl:4: an unfinished last line"):
        records = load_records([path])
    assert [r["cell"] for r in records] == ["c0", "c1", "c2"]


def test_a_bad_line_in_the_middle_names_file_and_line(tmp_path):
    path = _write(tmp_path / "r.jsonl", '{"cell": "a", "status": "skipped"}\nnot json\n{"cell": "b", "status": "skipped"}\n')
    with pytest.raises(RecordFileError, match=r"r.jsonl:2: not a JSON record"):
        load_records([path])


def test_a_bad_last_line_that_was_finished_is_not_forgiven(tmp_path):
    path = _write(tmp_path / "r.jsonl", '{"cell": "a", "status": "skipped"}\n{"cell": \n')
    with pytest.raises(RecordFileError, match=r"r.jsonl:2"):
        load_records([path])
