"""A GPU cell's process sees its own GPU as cuda:0 (perfgate.measure.launch.first_gpu): inductor's cache keys a
compiled graph by its device index, so without this a graph that the precompile compiled on cuda:2 is compiled
again by the xdist worker that runs its cell on cuda:0 (4 x H200 349f3a2e, 2026-11-28). Imports no torch."""

from __future__ import annotations

import json

import pytest

from perfgate.core.job import Job, RunOptions
from perfgate.core.matrix import Cell
from perfgate.measure import isolate
from perfgate.measure.launch import first_gpu


@pytest.mark.parametrize(
    ("device", "gpus", "visible", "expected"),
    [
        ("cuda:2", 4, None, ("cuda:0", "2,0,1,3")),
        ("cuda:0", 4, None, ("cuda:0", "0,1,2,3")),
        ("cuda:1", 2, "5,7", ("cuda:0", "7,5")),  # the parent's own list, reordered
        ("cuda:1", 2, "GPU-aa, GPU-bb", ("cuda:0", "GPU-bb,GPU-aa")),
        ("cuda:0", 1, None, ("cuda:0", None)),  # one GPU: nothing to reorder
        ("cuda", 4, None, ("cuda", None)),
        ("cpu", 4, None, ("cpu", None)),
        ("cuda:3", 4, "0,1", ("cuda:3", None)),  # not visible: left for torch to refuse by name
    ],
    ids=["third-of-4", "first-of-4", "listed", "uuids", "one-gpu", "no-index", "cpu", "not-visible"],
)
def test_a_gpu_cells_process_sees_its_gpu_first(device, gpus, visible, expected, monkeypatch):
    if visible is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    named, order = expected
    assert first_gpu(device, gpus) == (named, {} if order is None else {"CUDA_VISIBLE_DEVICES": order})


class _Events:
    record = checkpoint = started_at = None
    last_stage = "starting the process"

    def read(self, *_args) -> None:
        pass


class _Proc:
    def __init__(self, environ: dict, sent: list):
        self.environ, self.sent = environ, sent

    def poll(self):
        return None

    def send(self, text: str, last: bool = False) -> _Events:
        self.sent.append(json.loads(text))
        return _Events()


def test_the_cell_process_hands_its_child_the_job_on_cuda_0_with_its_gpu_first(monkeypatch):
    """xdist worker gw2 of a 4-GPU runner: its child starts early with GPU 2 listed first, and the cell it is
    handed runs on cuda:0 there; a job for another GPU gets a child with that GPU first."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    started, sent = [], []
    monkeypatch.setattr(
        isolate, "spawn", lambda _dir, _label, **environ: started.append(environ) or _Proc(environ, sent)
    )
    monkeypatch.setattr(isolate, "supervise", lambda *_a, **_k: "stopped by the test")
    monkeypatch.setattr(isolate, "kill_groups", lambda *_procs: None)
    cells = isolate.CellProcess(None, "cuda:2", 4)
    cells.prestart()
    job = Job(Cell("mlp", "infer", "inductor_default", "fp32", "gpu"), RunOptions(device="cuda:2"), tf32=False)
    record = cells.run(job)
    assert record["status"] == "failed"  # the test's supervise stopped it: the record says so, nothing raised
    assert started == [{"CUDA_VISIBLE_DEVICES": "2,0,1,3"}]  # prestarted, and the job taken by that child
    assert sent[-1]["options"]["device"] == "cuda:0"
    cells.run(Job(job.cell, RunOptions(device="cuda:1"), tf32=False))
    assert started[1:] == [{"CUDA_VISIBLE_DEVICES": "1,0,2,3"}] and sent[-1]["options"]["device"] == "cuda:0"
    cpu = Cell("mlp", "infer", "inductor_default", "fp32", "cpu")
    cells.run(Job(cpu, RunOptions(device="cpu"), tf32=False))  # --perf-isolate all: a CPU cell needs no order
    assert started[2:] == [{"CUDA_VISIBLE_DEVICES": "1,0,2,3"}] and sent[-1]["options"]["device"] == "cpu"
    cells.close()


def test_a_live_child_of_another_gpu_order_is_ended_before_the_next_starts(monkeypatch):
    started, killed = [], []
    monkeypatch.setattr(isolate, "spawn", lambda _dir, _label, **environ: started.append(environ) or _Proc(environ, []))
    monkeypatch.setattr(isolate, "kill_groups", lambda *procs: killed.extend(p.environ for p in procs))
    cells = isolate.CellProcess(None, "cuda:2", 4)
    cells.prestart()
    cells.prestart()  # the same order: the live child is kept
    cells.prestart({"CUDA_VISIBLE_DEVICES": "1,0,2,3"})
    assert killed == [started[0]] and started[1:] == [{"CUDA_VISIBLE_DEVICES": "1,0,2,3"}]
    cells.close()


def test_each_precompile_process_compiles_on_cuda_0_of_its_own_gpu_order(tmp_path, monkeypatch):
    """Two shares on a 2-GPU runner: share 1 on GPU 0, share 2 on GPU 1, each seen as cuda:0 in its process."""
    from perfgate.measure import precompile

    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    started, sent = [], []

    def spawn(directory, _label, **environ):
        started.append(environ)
        proc = _Proc(environ, sent)
        proc.stderr = directory / "stderr"
        return proc

    monkeypatch.setattr(precompile, "spawn", spawn)
    monkeypatch.setattr(precompile, "supervise", lambda *_a, **_k: None)
    monkeypatch.setattr(precompile, "kill_groups", lambda *_procs: None)
    cells = [Cell(model, "infer", "inductor_default", "fp32", "gpu") for model in ("gpt2", "vit_b16")]
    precompile.run(
        [[cells[0]], [cells[1]]],
        cache_dir=str(tmp_path),
        registry="fixtures.zoo:REGISTRY",
        devices=["cuda:0", "cuda:1"],
        tf32=False,
        out=tmp_path / "pre.json",
        limit_s=1.0,
    )
    assert started == [{"CUDA_VISIBLE_DEVICES": "0,1"}, {"CUDA_VISIBLE_DEVICES": "1,0"}]
    assert [job["options"]["device"] for job in sent] == ["cuda:0", "cuda:0"]


def test_a_cpu_cell_runs_in_the_live_child_that_lists_its_gpu_first(monkeypatch):
    class Done(_Events):
        def __init__(self):
            self.record = {"status": "ok", "stages": {}, "wall_s": 1.0}

    started, sent = [], []

    def spawn(_dir, _label, **environ):
        started.append(environ)
        proc = _Proc(environ, sent)
        proc.send = lambda text, last=False: sent.append(json.loads(text)) or Done()
        return proc

    monkeypatch.setattr(isolate, "spawn", spawn)
    monkeypatch.setattr(isolate, "supervise", lambda *_a, **_k: None)
    monkeypatch.setattr(isolate, "kill_groups", lambda *_procs: None)
    cells = isolate.CellProcess(None, "cuda:1", 2)
    cpu = Cell("mlp", "infer", "inductor_default", "fp32", "cpu")
    gpu = Cell("mlp", "infer", "inductor_default", "fp32", "gpu")
    assert cells.run(Job(cpu, RunOptions(device="cpu"), tf32=False))["status"] == "ok"
    assert cells.run(Job(gpu, RunOptions(device="cuda:1"), tf32=False))["status"] == "ok"
    assert started == [{"CUDA_VISIBLE_DEVICES": "1,0"}]  # one child took both
    assert [job["options"]["device"] for job in sent] == ["cpu", "cuda:0"]
    cells.close()
