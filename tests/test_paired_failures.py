"""A paired cell that lost something on the way never passes: a side that could not take its device rounds, a
base that failed after its rounds, a worker that hung as it ended; and a cell of this tree that failed exits 1,
whatever unsure the paired verdict adds (perfgate.ab.duet, perfgate.ab.pair_workers, perfgate.plugin.session_end)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from perfgate.ab import duet
from perfgate.ab.pair_workers import Worker, WorkerGone
from perfgate.ab.sides import Side
from perfgate.core import exits


def _measured(
    monkeypatch,
    b_slower: float = 1.0,
    b_device_fails: bool = False,
    a_finish: str = "ok",
    kernels_b: int = 100,
    b_finish: str = "ok",
    fault=None,
    workers_seen: dict | None = None,
) -> dict:
    """duet.measure's summary for one GPU cell over two fake workers whose wall and host rounds match, B's GPU
    step `b_slower` times A's; B's profiler failing every device block where `b_device_fails`; A's record after
    its rounds of status `a_finish`; B's step running `kernels_b` GPU kernels against A's 100; B's job planting
    `fault`. `workers_seen` gets the two fake workers, and what each was sent."""
    from perfgate.core.job import Job, RunOptions
    from perfgate.core.matrix import Cell

    class FakeWorker:
        def __init__(self, name: str):
            self.name, self.sent, self.finish_asked = name, [], False
            self.popen = type("Popen", (), {"pid": 1 if name == "a" else 2})()
            self.hello = {"hello": {"wall_sides": True, "holds": False, "relayout": True}}
            self.side = Side(name.upper(), ".")

        def send(self, message: dict) -> None:
            self.sent.append(message)

        def expect(self, key, limit_s, progress=None) -> dict:
            last = self.sent[-1]
            if "job" in last:
                return {"ready": {"eager_ms": 20.0, "compiled_ms": 10.0, "device_clock": True}}
            if last.get("op") == "finish":
                status = a_finish if self.name == "a" else b_finish
                kernels = kernels_b if self.name == "b" else 100
                return {
                    "record": {
                        "cell": "c",
                        "status": status,
                        "reason": "numerics: compiled off eager",
                        "compiled_kernels": kernels,
                    }
                }
            if key == "device":
                if b_device_fails and self.name == "b":
                    return {"device": None, "note": "device clock failed: CUPTI_ERROR_NOT_INITIALIZED"}
                f = b_slower if self.name == "b" else 1.0
                return {"device": {"eager": [20.0, 20.01, 19.99], "compiled": [10.0 * f, 10.01 * f, 9.99 * f]}}
            jitter = 1 + 0.001 * (len(self.sent) % 3)
            return {key: {"eager": 20.0 * jitter, "compiled": 10.0 * jitter}}

    workers = {"a": FakeWorker("a"), "b": FakeWorker("b")}
    if workers_seen is not None:
        workers_seen.update(workers)
    monkeypatch.setenv("PERFGATE_PAIRED_PIN", "off")
    monkeypatch.setenv("PERFGATE_PAIRED_PREPARE", "sequential")
    fake = type("Duet", (), {})()
    fake.sides, fake.first, fake.notes = (Side("A", "."), Side("B", ".")), "a", {}
    fake.worker = lambda side: workers[side.name.lower()]
    fake.start = lambda *sides: [workers[s.name.lower()] for s in sides]
    fake.renew = fake.spawn_spares = fake.greet_spares = lambda: None
    job = Job(
        Cell("mlp", "train", "inductor_default", "fp32", "gpu"), RunOptions(device="cuda", fault=fault), tf32=False
    )
    return duet.measure(fake, job, lambda _m: None)[2]


def _rule(summary: dict, key: str) -> dict:
    return next(r for r in summary["rules"] if r["rule"] == key)


@pytest.mark.parametrize(
    "b_device_fails, outcome",
    [(False, "regression"), (True, "unsure")],
    ids=["profiler-works-red", "profiler-fails-unsure"],
)
def test_a_device_clock_whose_rounds_a_side_could_not_take_is_unsure_never_left_out(
    monkeypatch, b_device_fails, outcome
):
    """B's GPU step 10 % slower. Where B's profiler failed every block, no device round pairs: the device rules
    were left out and the cell passed on its wall clock alone. They are unsure now, and the note says why."""
    summary = _measured(monkeypatch, b_slower=1.10, b_device_fails=b_device_fails)
    device = _rule(summary, "compiled_device_ms")
    assert summary["outcome"] == outcome and device["outcome"] == outcome
    if b_device_fails:
        assert device["pairs"] == 0 and "side B's device clock failed: CUPTI_ERROR_NOT_INITIALIZED" in summary["note"]
        assert summary["duets"] == 2  # a fresh process pair was tried before giving up


@pytest.mark.parametrize("is_cell, failed, noted", [(False, True, True), (True, True, False), (False, False, False)])
def test_a_failed_test_that_is_no_cell_is_noted_for_the_exit(is_cell, failed, noted):
    """The session's exit tells perfgate's own crash (3) from a failure beside it (1) by the tests that failed
    and are no cell; a cell's failure is its record's to tell."""
    from types import SimpleNamespace

    from perfgate.plugin import SESSION_KEY, pytest_runtest_makereport, selection

    perf = SimpleNamespace(other_failures=set(), relayed=lambda _id: None)
    cell = SimpleNamespace(id="c") if is_cell else None
    item = SimpleNamespace(
        nodeid="tests/test_x.py::test_y",
        config=SimpleNamespace(stash={SESSION_KEY: perf}),
        stash={selection.CELL_KEY: cell} if is_cell else {},
    )
    report = SimpleNamespace(failed=failed, skipped=False, user_properties=[])
    hook = pytest_runtest_makereport(item, SimpleNamespace(when="call"))
    next(hook)
    with pytest.raises(StopIteration):
        hook.send(report)
    assert perf.other_failures == ({"tests/test_x.py::test_y"} if noted else set())


def test_a_module_that_failed_to_collect_is_noted_for_the_exit(pytester):
    """Run on past a broken module (--continue-on-collection-errors), a session whose failed cells were all broken
    by perfgate's engine would have exited 3 for a collection error: it is a failed test that is no cell."""
    from perfgate.plugin import SESSION_KEY

    pytester.makepyfile(test_broken="import no_such_module_anywhere", test_fine="def test_fine():\n    pass\n")
    recorder = pytester.inline_run("--continue-on-collection-errors", "-p", "no:randomly")
    (finish,) = recorder.getcalls("pytest_sessionfinish")
    assert finish.session.config.stash[SESSION_KEY].other_failures == {"test_broken.py"}


@pytest.mark.parametrize("planted, a_runs", [("device_slow:1.5", "shadow_device_slow"), ("graph_break", None)])
def test_side_a_of_a_planted_pair_measures_as_b_does_and_plants_nothing(monkeypatch, planted, a_runs):
    """B's device plant sizes itself with a profiler session; A ran none, and on gpt2 train B's wall read +6-8 %
    for a plant of 1.5 % GPU time (H200s, 2026-11-29). A now runs the fault's shadow; a fault that measures
    nothing first leaves A with none."""
    from perfgate.core.fault import parse

    seen: dict = {}
    _measured(monkeypatch, fault=parse(planted), workers_seen=seen)
    (job_a,) = [m["job"] for m in seen["a"].sent if "job" in m][:1]
    (job_b,) = [m["job"] for m in seen["b"].sent if "job" in m][:1]
    assert (job_a["options"]["fault"] or {}).get("kind") == a_runs
    assert job_b["options"]["fault"]["kind"] == planted.split(":")[0]


def test_a_base_that_fails_after_its_rounds_leaves_the_cell_unsure(monkeypatch):
    """Side A's checks after its rounds failed (numerics): nothing is left to compare B with, and B's grown
    kernel count goes unjudged, so the cell is unsure, naming side A, never ok on the clocks alone."""
    summary = _measured(monkeypatch, a_finish="failed", kernels_b=130)
    assert summary["outcome"] == "unsure" and summary["error"] == "side A failed: numerics: compiled off eager"
    red = _measured(monkeypatch, a_finish="failed", b_slower=1.10)  # a clock's red, shown in both pairs, stands
    assert red["outcome"] == "regression" and red["duets"] == 2 and "error" not in red
    assert _measured(monkeypatch, kernels_b=130)["outcome"] == "regression"  # against a base that held: its kernels


def test_this_trees_cell_that_fails_its_checks_after_its_rounds_is_red_not_pass(monkeypatch):
    """B's own numerics failed after rounds whose clocks read ok: its cell fails (exit 1), and the paired
    verdict, which the PR comment shows, read PASS on the clocks alone."""
    summary = _measured(monkeypatch, b_finish="failed")
    assert summary["outcome"] == "regression" and summary["error"] == "side B failed: numerics: compiled off eager"


def test_a_worker_whose_output_closed_but_whose_process_hangs_is_gone(tmp_path, monkeypatch):
    """A side that closed its output and then hung (a CUDA teardown) is that side's worker gone, the cell
    unsure; before, the wait's TimeoutExpired escaped as a failure of this tree's cell."""
    read, write = os.pipe()
    os.close(write)

    class Hung:
        stdout = os.fdopen(read, "rb")
        returncode = None

        def wait(self, timeout):
            raise subprocess.TimeoutExpired("worker", timeout)

    worker = object.__new__(Worker)
    worker.side, worker.stderr_path, worker.buffer, worker.popen = (
        Side("A", "."),
        Path(tmp_path / "A.stderr"),
        b"",
        Hung(),
    )
    worker.stderr_path.write_text("")
    with pytest.raises(WorkerGone, match="side A's process closed its output and did not exit in 30 s"):
        worker.expect("device", 5.0)
    Hung.stdout.close()


OWN_FAILURE = {"cell": "a", "status": "failed", "reason": "numerics: compiled off eager"}
ENGINE_BROKE = {"cell": "b", "status": "failed", "reason": "perfgate's paired engine failed: KeyError: 'rounds'"}
CUT = {"cell": "c", "status": "failed", "reason": "did not finish: the process ended during 'timing'"}
KNOWN_ISSUE = {"cell": "d", "status": "failed", "reason": "timed out", "known_issue": "max-autotune train: too slow"}


@pytest.mark.parametrize(
    "session_status, gate_exit, records, expected",
    [
        (1, exits.UNUSABLE, [OWN_FAILURE], exits.REGRESSION),  # the paired verdict called the crashed cell unsure
        (0, exits.UNUSABLE, [], exits.UNUSABLE),
        (0, exits.PASS, [], exits.PASS),
        (2, exits.PASS, [], 2),  # interrupted: pytest's own status stands
        (1, exits.UNUSABLE, [ENGINE_BROKE], exits.BUG),  # perfgate's own code broke: no verdict on the PR
        (1, exits.PASS, [ENGINE_BROKE, OWN_FAILURE], exits.REGRESSION),
        (2, exits.UNUSABLE, [ENGINE_BROKE, CUT], exits.BUG),  # interrupted, one cell cut: perfgate's crash stands
        (1, exits.UNUSABLE, [ENGINE_BROKE, "another test"], exits.REGRESSION),  # a non-perf test failed too
        (1, exits.UNUSABLE, [ENGINE_BROKE, KNOWN_ISSUE], exits.BUG),  # an xfailed cell is no new failure
    ],
    ids=[
        "failed-cell-stays-1",
        "unsure-2",
        "pass-0",
        "interrupted-2",
        "engine-broke-3",
        "engine-broke-and-red-1",
        "engine-broke-and-cut-3",
        "engine-broke-and-a-test-failed-1",
        "engine-broke-and-a-known-issue-3",
    ],
)
def test_a_session_whose_cell_failed_exits_1_whatever_unsure_was_added(session_status, gate_exit, records, expected):
    """Without a baseline, a crashed B cell is also an unsure paired cell ("side B failed"): the run exited 2,
    and a CI that reruns on 2 reran a crash that will repeat. A failed cell is a regression; one that perfgate's
    own paired engine failed to run is a crash in perfgate (3), never read as the PR's regression."""
    from perfgate.plugin.session_end import _exit_with

    others = {"tests/test_x.py::test_y"} if "another test" in records else set()  # a failed test that is no cell
    records = [r for r in records if r != "another test"]
    session = type("Session", (), {"exitstatus": session_status})()
    _exit_with(session, gate_exit, None, records, others)
    assert session.exitstatus == expected
