"""Isolated cells: each cell runs in a child process under a time limit, so that a hung compile, a segfault, an
OOM that kills the process or a CUDA error that poisons the context fails that cell alone, and the session goes
on with the next.

The child is warm: one process (perfgate.measure.child) imports torch, the compiler stack and the zoo once and
takes the session's cells one after another while they succeed. A cell that fails ends it (the child exits
after its record; this side ends it at once rather than wait for its exit), a cell that hangs or crashes
ends it (its group is killed), and the next cell gets a fresh one, started when that cell comes: started at
once, its imports could overlap a CPU cell timed in pytest's own process. A new interpreter importing torch,
transformers and timm cost 6-20 s a cell on an H100 lease (2026-11-25); the session starts its process once,
early (`prestart`), so that even the first cell's start overlaps what comes before it (collection, a
precompile). Imports no torch, nor does its Job (perfgate.core.job).

On the time limit the child's whole group is killed (inductor's compile workers too), and the last checkpoint
the cell streamed becomes a failed record: "timed out after 900 s while compiling (inductor_default)".
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from perfgate.core.job import Job
from perfgate.core.record import new_record
from perfgate.measure import record_builder
from perfgate.measure.child import takes_another
from perfgate.measure.launch import Proc, first_gpu, kill_groups, spawn, stage_of, supervise

LABEL = "the cell's process"


class CellProcess:
    """The warm child of an isolated session: started on demand (or early, by `prestart`), replaced after a
    cell that failed, hung or crashed, ended by `close`."""

    def __init__(self, registry: str | None = None, device: str = "", gpus: int = 0):
        self.registry = registry
        self.scratch = tempfile.TemporaryDirectory(prefix="perfgate-cells-")
        self.proc: Proc | None = None
        self.started = 0  # processes started so far (each gets a directory of its own)
        self.gpus = gpus  # GPUs this process sees: the child sees the one it runs on first (launch.first_gpu)
        self.environ = first_gpu(device, gpus)[1]  # the child's, for the session's own GPU (an xdist worker's)

    def prestart(self, environ: dict[str, str] | None = None) -> None:
        """Start the process now, so that its imports overlap whatever the session does before its first cell;
        one started with another environment (another GPU first) is ended first."""
        environ = self.environ if environ is None else environ
        if self.proc is not None and self.proc.poll() is None and environ != self.environ:
            kill_groups(self.proc)
            self.proc = None
        self.environ = environ
        if self.proc is None or self.proc.poll() is not None:
            self.started += 1
            self.proc = spawn(Path(self.scratch.name) / str(self.started), LABEL, **environ)

    def run(
        self,
        job: Job,
        progress: Callable[[str], None] = lambda _m: None,
        record_compiled: Callable[[float], None] | None = None,
    ) -> dict:
        """Run the cell of `job` in the warm process and return its record; never raises for what the child
        does. The record's stages gain `process_start`: from handing the job over to the child taking it (a
        fresh process's interpreter start and imports; ~0 s for a warm one), and its wall_s with it."""
        submitted, clock = time.time(), time.monotonic()
        device, environ = first_gpu(job.options.device, self.gpus)
        job = replace(job, options=replace(job.options, device=device))
        self.prestart(environ or None)  # a job that needs no GPU order (a CPU cell) takes the child there is
        events = self.proc.send(job.to_json())
        failure = supervise(
            [self.proc],
            limit_s=job.limit_s,
            events=events,
            cell_id=job.cell.id,
            progress=progress,
            record_compiled=record_compiled,
            finished=lambda: events.record is not None,
            started=clock,
        )
        events.read(progress, record_compiled)
        if failure is not None or events.record is None:
            kill_groups(self.proc)  # hung or half-dead: the next cell gets a fresh process
            self.proc = None
            record = (
                dict(events.checkpoint) if events.checkpoint else new_record(job.cell, {}, job.run_id, process="worker")
            )
            reason = failure or f"{LABEL} ended while {stage_of(events.last_stage, job.cell.id)}"
            record_builder.mark_worker_lost(record, reason, job.run_id, time.monotonic() - clock)
            return record
        record = events.record
        if not takes_another(record):
            # The child exits after this record. Still tearing down (a CUDA context, a 1.5B model's memory),
            # it would be handed the next job and die under it: on 4 x H200 1c60ab9c (2026-11-28) the cell after
            # each of two failures was lost so, "ended while starting the process, with nothing to report".
            kill_groups(self.proc)
            self.proc = None
        record_builder.merge_process_start(record, max(0.0, (events.started_at or submitted) - submitted))
        return record

    def close(self) -> None:
        if self.proc is not None:
            kill_groups(self.proc)
            self.proc = None
        self.scratch.cleanup()
