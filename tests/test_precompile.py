"""--perf-precompile's children on the tiny CPU model: they fill the kept cache a cell then reads, and however
they end (no start, past their time, interrupted), their cells say why."""

import dataclasses
import json
import os
import signal
import time

import pytest

torch = pytest.importorskip("torch")
from tiny_mlp import ENV, OPTIONS, REGISTRY  # noqa: E402

from perfgate.core.matrix import Cell  # noqa: E402
from perfgate.core.record_reading import first_call_cache  # noqa: E402
from perfgate.measure import launch, precompile  # noqa: E402
from perfgate.measure.cell import run_cell  # noqa: E402

TINY = "tiny_mlp:REGISTRY"


def _precompile(tmp_path, shares, cache_dir, registry: str = TINY, limit_s: float = 120):
    """precompile.run on the CPU, its lines written to tmp_path/pre.json."""
    return precompile.run(
        shares,
        cache_dir=cache_dir,
        registry=registry,
        devices=[],
        tf32=False,
        out=tmp_path / "pre.json",
        limit_s=limit_s,
    )


def test_a_precompiled_cell_finds_its_compile_in_the_kept_cache(tmp_path):
    """--perf-precompile's children fill the cache; the cell's own first call then hits it, and says so."""
    cell = Cell("mlp", "infer", "inductor_default", "fp32", "cpu")
    cache = str(tmp_path / "cache")
    lines = _precompile(tmp_path, [[cell], [Cell("mlp", "infer", "aot_eager", "fp32", "cpu")]], cache)
    assert [(line["cell"], line["status"]) for line in lines] == [
        (cell.id, "ok"),
        ("cpu-mlp-infer-aot_eager-fp32", "ok"),
    ]
    assert lines[0]["misses"] > 0 and lines[0]["first_call_s"] > 0  # it compiled, cold
    assert json.loads((tmp_path / "pre.json").read_text()) == lines
    record = run_cell(REGISTRY["mlp"], cell, dataclasses.replace(OPTIONS, cache_dir=cache), ENV)
    assert record["status"] == "ok" and record["compile_cache_hits"] > 0 and record["compile_cache_misses"] == 0
    assert first_call_cache(record) == "warm"


def test_a_precompile_child_that_cannot_start_fails_its_cells_with_the_reason(tmp_path):
    cell = Cell("mlp", "infer", "inductor_default", "fp32", "cpu")
    (line,) = _precompile(tmp_path, [[cell]], str(tmp_path), registry="no_such_zoo:REGISTRY")
    assert line["status"] == "failed" and "No module named 'no_such_zoo'" in line["reason"]


def test_a_precompile_forgets_the_launch_configs_written_since_it_began(tmp_path):
    """However its processes end, the picks written while they ran go (a pick dated after the start stands in
    for one a process timed) and older ones stay."""
    old, new = tmp_path / "amp_bf16" / "old.best_config", tmp_path / "amp_bf16" / "new.best_config"
    new.parent.mkdir(parents=True)
    for path, when in ((old, 1_000.0), (new, time.time() + 3_600)):
        path.write_text("{}")
        os.utime(path, (when, when))
    _precompile(
        tmp_path,
        [[Cell("mlp", "infer", "inductor_default", "fp32", "cpu")]],
        str(tmp_path),
        registry="no_such_zoo:REGISTRY",
    )
    assert old.exists() and not new.exists()
    # and its mark of a precompile under way goes with it: left, the next run would take it for a killed one's
    assert list((tmp_path / precompile.RUNNING).iterdir()) == []


def test_a_precompile_child_past_its_time_is_killed_and_its_cells_say_so(tmp_path):
    cell = Cell("mlp", "infer", "inductor_default", "fp32", "cpu")
    (line,) = _precompile(tmp_path, [[cell]], str(tmp_path), limit_s=0.2)  # still importing torch
    assert line == {"cell": cell.id, "status": "failed", "reason": "not compiled: timed out after 0.2 s (not started)"}


def test_at_the_limit_every_child_left_is_killed_at_once_and_says_so(tmp_path, monkeypatch):
    """Not a second's grace per child after the first: the children share one limit, and one kill ends them all."""
    cells = [Cell("mlp", phase, "inductor_default", "fp32", "cpu") for phase in ("infer", "train")]
    kills, real_kill = [], launch.kill_groups

    def kill(*procs):
        kills.append(len(procs))
        real_kill(*procs)

    monkeypatch.setattr(precompile, "kill_groups", kill)
    lines = _precompile(tmp_path, [[c] for c in cells], str(tmp_path), limit_s=0.2)
    assert [line["reason"] for line in lines] == ["not compiled: timed out after 0.2 s (not started)"] * 2
    assert kills == [2]


def test_an_interrupted_precompile_kills_its_children_and_keeps_its_lines(tmp_path, monkeypatch):
    """Ctrl-C (or a CI step's timeout) while the children compile: none is left running in its own session,
    and the cells they did not reach say why in the .precompile.json."""
    cell, children = Cell("mlp", "infer", "inductor_default", "fp32", "cpu"), []
    real_spawn = precompile.spawn

    def keep(*args, **kwargs):
        children.append(real_spawn(*args, **kwargs))
        return children[-1]

    def interrupted(_seconds):  # the supervision loop's wait between two looks at the children
        raise KeyboardInterrupt

    monkeypatch.setattr(precompile, "spawn", keep)
    monkeypatch.setattr(launch.time, "sleep", interrupted)
    with pytest.raises(KeyboardInterrupt):
        _precompile(tmp_path, [[cell]], str(tmp_path))
    (child,) = children
    assert child.poll() == -signal.SIGKILL
    assert json.loads((tmp_path / "pre.json").read_text()) == [
        {"cell": cell.id, "status": "failed", "reason": "not compiled: interrupted (not started)"}
    ]


def test_a_stopped_precompile_says_how_long_the_cell_in_hand_had_compiled(tmp_path):
    """A compile cut at the limit is a measurement too: at least that long (the known issue's figure)."""
    done, cut, later = (Cell("mlp", phase, "inductor_default", "fp32", "cpu") for phase in ("infer", "train", "ddp"))
    now = time.time()
    lines = tmp_path / "0.jsonl"
    lines.write_text(
        "".join(
            json.dumps(line) + "\n"
            for line in (
                {"cell": done.id, "started_at": now - 20.0},
                {"cell": done.id, "status": "ok", "wall_s": 8.0},
                {"cell": cut.id, "started_at": now - 12.0},
            )
        )
    )
    assert precompile._lines([done, cut, later], lines, "timed out after 20 s", stopped=True) == [
        {"cell": done.id, "status": "ok", "wall_s": 8.0},
        {
            "cell": cut.id,
            "status": "failed",
            "reason": "not compiled: timed out after 20 s",
            "stopped_after_s": pytest.approx(12.0, abs=1.0),
        },
        {"cell": later.id, "status": "failed", "reason": "not compiled: timed out after 20 s (not started)"},
    ]


def test_an_interrupt_kills_every_child_before_waiting_for_any(monkeypatch):
    """A killed GPU process may take seconds to end: waiting on each before killing the next adds them up."""
    events = []

    class Child:
        def __init__(self, pid):
            self.pid = pid

        def poll(self):
            return None

        def wait(self):
            events.append(("wait", self.pid))

    monkeypatch.setattr(launch.os, "killpg", lambda pid, sig: events.append(("kill", pid)))
    launch.kill_groups(Child(1), Child(2), Child(3))
    assert events == [("kill", 1), ("kill", 2), ("kill", 3), ("wait", 1), ("wait", 2), ("wait", 3)]


def test_a_kept_cache_holds_one_inductor_cache_per_precision(tmp_path):
    """torch 2.11's AOTAutograd cache keys autocast on/off, not its dtype: amp_bf16 and amp_fp16 must never
    share one, or a cell runs the other precision's graph. Triton kernels (keyed by source) stay shared."""
    import os

    from perfgate.measure.compile_cache import compile_cache

    seen = {}
    for precision in ("amp_bf16", "amp_fp16"):
        with compile_cache(str(tmp_path), precision):
            seen[precision] = (os.environ["TORCHINDUCTOR_CACHE_DIR"], os.environ["TRITON_CACHE_DIR"])
    assert seen["amp_bf16"][0] == str(tmp_path / "amp_bf16") != seen["amp_fp16"][0]
    assert seen["amp_bf16"][1] == seen["amp_fp16"][1] == str(tmp_path / "triton")
