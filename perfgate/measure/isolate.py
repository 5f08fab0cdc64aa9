"""One cell in its own child process, under a time limit: a hung compile, a segfault, an OOM that kills the
process or a CUDA error that poisons the context fails that cell, and the session goes on with the next.

The parent imports no torch here. It writes the cell's job (the registry's import path and the model's name:
a spec holds lambdas and cannot be pickled), starts `python -m perfgate.measure.isolate JOB_DIR` in its own process
group, and polls the child's event file every POLL_S: progress lines are relayed, compiled round times fed
to pytest-benchmark, and each checkpoint kept. The child streams its checkpoints to the results file itself,
as an in-process cell does. On the time limit the whole group is killed (inductor's compile workers too) and
the last checkpoint becomes a failed record: "timed out after 900 s while compiling (inductor_default)".

The child runs in its own process group, so a signal that ends the parent does not reach it: a pytest
stopped by `timeout` (SIGTERM) once left its child compiling and timing on the GPU beside the next run (seen
on an H100 lease). So the parent turns SIGTERM into an interrupt while a child runs (its `finally` kills the
group), and the child asks Linux to kill it when the parent dies by any means (PR_SET_PDEATHSIG).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

from perfgate.core.record import new_record
from perfgate.core.records_file import append_record
from perfgate.measure.children import (HEARTBEAT_S, POLL_S, Events, child_environ, death, die_with_parent,
                                       import_path, kill_groups, stage_of, stderr_tail)



@dataclasses.dataclass(frozen=True)
class Job:
    """What the child needs to run the cell as the parent would have, as JSON."""

    cell: dict                  # Cell fields
    registry: str               # "module:attribute" of the model registry
    options: dict               # RunOptions fields, the plan and fault as dicts
    tf32: bool
    results_path: str
    run_id: str | None
    sys_path: list[str]


def job_for(cell, options, tf32: bool, results_path, run_id: str | None) -> Job:
    fields = dataclasses.asdict(options)  # the plan and the fault become dicts
    return Job(cell=dataclasses.asdict(cell), registry=options.registry, options=fields, tf32=tf32,
               results_path=str(results_path), run_id=run_id,
               sys_path=import_path())


def _failed(job: Job, events: Events, reason: str, cell) -> dict:
    record = dict(events.checkpoint) if events.checkpoint else new_record(cell, {}, job.run_id)
    record.update(status="failed", reason=reason, run_id=job.run_id)
    return record


class Terminated(KeyboardInterrupt):
    """SIGTERM while an isolated cell runs: an interrupt, so the child's group is killed on the way out and
    pytest ends the session as after Ctrl-C (what was measured is already in the results file)."""


@contextlib.contextmanager
def _sigterm_interrupts():
    """SIGTERM raises Terminated here, where the default would end the process with its child orphaned.
    Only in the main thread with the default handler in place: a handler someone set is theirs."""
    if threading.current_thread() is not threading.main_thread() \
            or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return

    def interrupt(_signum, _frame):
        raise Terminated("SIGTERM")
    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_isolated(cell, job: Job, limit_s: float, progress: Callable[[str], None] = lambda _m: None,
                 record_compiled: Callable[[float], None] | None = None) -> dict:
    """Run the cell in a child process and return its record; never raises for what the child does."""
    with tempfile.TemporaryDirectory(prefix="perfgate-cell-") as tmp:
        job_dir = Path(tmp)
        (job_dir / "job.json").write_text(json.dumps(dataclasses.asdict(job)), encoding="utf-8")
        events, stderr_path = Events(job_dir / "events.jsonl"), job_dir / "stderr.txt"
        env = child_environ()
        started = time.monotonic()
        with stderr_path.open("w", encoding="utf-8") as stderr, _sigterm_interrupts():
            child = subprocess.Popen([sys.executable, "-m", "perfgate.measure.isolate", str(job_dir)], env=env,
                                     stdin=subprocess.DEVNULL, stderr=stderr, start_new_session=True)
            try:
                stage_seen, stage_since, told = events.last_stage, started, started
                while child.poll() is None and time.monotonic() - started < limit_s:
                    time.sleep(POLL_S)
                    events.read(progress, record_compiled)
                    now = time.monotonic()
                    if events.last_stage != stage_seen:
                        stage_seen, stage_since, told = events.last_stage, now, now
                    elif now - told >= HEARTBEAT_S:
                        told = now
                        progress(f"{cell.id}: still {stage_of(stage_seen, cell.id)} after {now - stage_since:.0f} s "
                                 f"(cell limit {limit_s:g} s, {now - started:.0f} s used)")
            finally:
                timed_out = child.poll() is None
                kill_groups(child)  # past the limit, or interrupted (Ctrl-C): leave no orphan compiling
        events.read(progress, record_compiled)
        stage = stage_of(events.last_stage, cell.id)
        if timed_out:
            return _failed(job, events, f"timed out after {limit_s:g} s while {stage}", cell)
        if events.record is not None:
            return events.record
        tail = stderr_tail(stderr_path)
        print("\n".join(tail), file=sys.stderr)  # the child's last words, beside the failed test
        last = f"; its last words: {tail[-1][:300]}" if tail else ""
        return _failed(job, events, f"the cell's process died ({death(child.returncode)}) while {stage}{last}",
                       cell)


def _child(job_dir: Path) -> None:
    """In the child: run the cell as PerfSession would in-process, reporting through the event file."""
    die_with_parent()
    job = Job(**json.loads((job_dir / "job.json").read_text(encoding="utf-8")))
    sys.path[:] = job.sys_path
    import importlib

    from perfgate.core import zoo
    from perfgate.measure.cell import RunOptions, run_cell
    from perfgate.measure.devices import start_cell
    from perfgate.measure.env import environment
    from perfgate.core.matrix import Cell

    # Imported before the cell starts, as a long session has them by its second cell: the first compile
    # must not count importing the compiler stack (seconds) as compile time.
    importlib.import_module("torch._inductor.compile_fx")
    cell = Cell(**job.cell)
    spec = zoo.load(job.registry)[cell.model]
    options = RunOptions.from_json(job.options)
    device = start_cell(options.device, job.tf32)
    events = (job_dir / "events.jsonl").open("a", encoding="utf-8")

    def emit(event: dict) -> None:
        events.write(json.dumps(event) + "\n")
        events.flush()

    def checkpoint(partial: dict) -> None:
        append_record(job.results_path, {**partial, "run_id": job.run_id})
        emit({"checkpoint": partial})

    record = run_cell(spec, cell, options, environment(device, job.tf32), lambda m: emit({"progress": m}),
                      lambda ms: emit({"compiled_ms": ms}), checkpoint)
    emit({"record": record})


if __name__ == "__main__":
    _child(Path(sys.argv[1]))
