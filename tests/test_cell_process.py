"""The isolated session's warm child (perfgate.measure.isolate.CellProcess): which cells share a process. Imports
no torch: the child is a fake that reports the record it is given."""

from __future__ import annotations

import pytest

from perfgate.core.job import Job, RunOptions
from perfgate.core.matrix import Cell
from perfgate.measure import isolate


class _Reported:
    checkpoint = started_at = None
    last_stage = "timing"

    def __init__(self, status: str):
        self.record = {"status": status, "stages": {}, "wall_s": 1.0}

    def read(self, *_args) -> None:
        pass


class _Child:
    """A child that reports each job's record and is still alive after it: an exiting child takes a while (its
    CUDA context, its models' memory), and poll() reads None until it is gone."""

    def __init__(self, statuses: list[str]):
        self.statuses = statuses  # the records of the session's jobs, in turn, whichever child takes them

    def poll(self):
        return None

    def send(self, _text: str, last: bool = False) -> _Reported:
        return _Reported(self.statuses.pop(0))


@pytest.mark.parametrize(
    ("statuses", "children", "ended"),
    [(["ok", "ok", "ok"], 1, 0), (["failed", "ok", "ok"], 2, 1), (["ok", "failed", "failed"], 2, 2)],
    ids=["all-ok", "first-failed", "two-failed"],
)
def test_a_failed_cell_ends_its_child_and_the_next_cell_gets_a_fresh_one(statuses, children, ended, monkeypatch):
    """On 4 x H200 1c60ab9c (2026-11-28) the cell after a failed one was handed to the exiting child and lost."""
    started, killed = [], []

    def spawn(_dir, _label, **_environ):
        started.append(_Child(statuses))
        return started[-1]

    monkeypatch.setattr(isolate, "spawn", spawn)
    monkeypatch.setattr(isolate, "supervise", lambda *_a, **_k: None)
    monkeypatch.setattr(isolate, "kill_groups", lambda *procs: killed.extend(procs))
    cells = isolate.CellProcess(None, "cpu", 0)
    job = Job(Cell("mlp", "infer", "inductor_default", "fp32", "cpu"), RunOptions(device="cpu"), tf32=False)
    expected = list(statuses)  # a copy: the children pop the list as they take its jobs
    assert [cells.run(job)["status"] for _ in range(3)] == expected
    assert len(started) == children  # a fresh child for the cell after a failure, the same one after a success
    assert len(killed) == ended  # each child that failed a cell, ended at once
    cells.close()
    assert killed[-1] is started[-1]  # the last child: ended by its failure, or with the session
