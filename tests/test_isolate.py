"""The isolated cells' processes: a GPU cell's process measures that cell alone (its profiler leaves the
process's host times long) and the next GPU cell's process is already started; CPU cells share one process."""

from types import SimpleNamespace

import pytest

from perfgate.core.matrix import Cell
from perfgate.measure import isolate
from perfgate.measure.job import Job, RunOptions


class FakeProc:
    def __init__(self, name: str):
        self.name, self.jobs, self.alive = name, 0, True

    def send(self, job_json: str, last: bool = False):
        """The job's events: a checkpoint per stage, the record last, each progress line read as it comes."""
        self.jobs += 1
        stages = ("build", "timing", "host_clock", "device_clock", "extras")
        events = SimpleNamespace(record=None, started_at=None, checkpoint=None, last_stage=None)

        def read(progress=lambda _m: None, _record_compiled=None):
            for n, stage in enumerate(stages):
                progress(stage)
                events.checkpoint = {"stages": dict.fromkeys(stages[: n + 1], 1.0)}
                SPAWNED_AT.append((stage, len(STARTED)))
            events.record = {"status": "ok", "wall_s": 1.0, "stages": {}}

        events.read = read
        return events

    def poll(self):
        return None if self.alive else 0


STARTED: list[FakeProc] = []
SPAWNED_AT: list[tuple[str, int]] = []  # (stage, processes started by then), as the events are read


@pytest.fixture
def processes(monkeypatch):
    started = STARTED
    started.clear()
    SPAWNED_AT.clear()

    def fake_spawn(directory, label):
        started.append(FakeProc(f"p{len(started) + 1}"))
        return started[-1]

    monkeypatch.setattr(isolate, "spawn", fake_spawn)
    monkeypatch.setattr(isolate, "supervise", lambda procs, events, progress, **_k: events.read(progress))
    monkeypatch.setattr(isolate, "kill_groups", lambda *procs: [setattr(p, "alive", False) for p in procs])
    return started


def job(device: str) -> Job:
    cell = Cell("gpt2", "infer", "inductor_default", "amp_bf16", "gpu" if device == "cuda" else "cpu")
    return Job(cell=cell, options=RunOptions(device=device), tf32=True)


def test_each_gpu_cell_gets_a_process_of_its_own_started_while_the_previous_cell_ran(processes):
    cells = isolate.CellProcess()
    for _ in range(3):
        assert cells.run(job("cuda"))["status"] == "ok"
    # p1 ran cell 1 and p2 started after its host clock; p2 ran cell 2 and started p3; p3 ran 3 and started p4.
    assert [p.jobs for p in processes] == [1, 1, 1, 0]
    assert cells.proc is None and cells.standby is processes[3]
    # Never during a running cell's timing or host clock: the standby starts at the stage after the device
    # clock's checkpoint (the first cell's: 1 process until extras, 2 from then).
    assert SPAWNED_AT[:5] == [("build", 1), ("timing", 1), ("host_clock", 1), ("device_clock", 1), ("extras", 2)]
    cells.close()
    assert not any(p.alive for p in processes)


def test_cpu_cells_share_one_warm_process(processes):
    cells = isolate.CellProcess()
    for _ in range(3):
        cells.run(job("cpu"))
    assert [p.jobs for p in processes] == [3]
    cells.close()
