"""A data-parallel cell (the "ddp" phase): cell.world rank processes, one per GPU (NCCL) or all on the
CPU (gloo), each measuring its share (perfgate.measure.ddp_rank); this module starts them through the one
launcher (perfgate.measure.launch) and returns rank 0's record. It imports no torch.

The ranks meet through a file store in the cell's temporary directory (no port to race for). Rank 0 reports
progress, checkpoints and its record through its event file, as an isolated cell does; every rank's stderr is
kept. A rank that dies fails the cell at once, naming the rank and what it was doing (the others would wait in
their next all-reduce until the process group's timeout); a cell past its time limit fails likewise. Either
way every rank's process group is killed: no rank outlives the cell, and each also asks Linux to kill it if
this process dies.
"""

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Callable

from perfgate.core.job import Job
from perfgate.core.matrix import VARIANTS
from perfgate.core.record import new_record
from perfgate.measure import record_builder, record_builder_ddp
from perfgate.measure.launch import import_path, kill_groups, spawn, supervise

EXIT_GRACE_S = 30.0  # how long the other ranks may take to exit once rank 0 has reported its record


def rank_device(device: str, rank: int) -> str:
    """Rank r's device: cuda:r on CUDA (one GPU each), the CPU otherwise."""
    return f"cuda:{rank}" if device.startswith("cuda") else "cpu"


def run(
    spec,
    cell,
    options,
    env: dict,
    progress: Callable[[str], None],
    record_compiled: Callable[[float], None] | None = None,
    checkpoint: Callable[[dict], None] | None = None,
    world: int | None = None,
    tf32: bool | None = None,
) -> dict:
    """Run the cell on `world` ranks (None: the cell's own, cell.world) and return rank 0's record; never
    raises for what a rank does."""
    world = cell.world if world is None else world
    limit_s = spec.time_limit_s or VARIANTS[cell.variant].time_limit_s
    started, submitted = time.monotonic(), time.time()
    job = Job(
        cell=cell,
        options=options,
        tf32=bool(env.get("tf32")) if tf32 is None else tf32,
        env=env,
        limit_s=limit_s,
        world=world,
        sys_path=tuple(import_path()),
    )
    with tempfile.TemporaryDirectory(prefix="perfgate-ddp-") as tmp:
        ranks, events = start_ranks(Path(tmp), job, options.device)
        try:
            failure = supervise(
                ranks,
                limit_s=limit_s,
                events=events,
                cell_id=cell.id,
                progress=progress,
                record_compiled=record_compiled,
                checkpoint=checkpoint,
                finished=_finished(ranks, events),
                started=started,
            )
        finally:
            kill_groups(*ranks)
        events.read(progress, record_compiled)
        if failure is None and events.record is not None:
            return with_process_start(events.record, (events.started_at or submitted) - submitted)
        record = dict(events.checkpoint) if events.checkpoint else new_record(cell, env, process="ranks")
        reason = failure or "rank 0 ended without a record"
        record_builder_ddp.mark_ranks_lost(record, reason, world, time.monotonic() - started)
        return record


def with_process_start(record: dict, start_s: float) -> dict:
    """Rank 0's record with the ranks' start (interpreters, imports, the process group) as its first stage."""
    record_builder.merge_process_start(record, max(0.0, start_s))
    return record


def start_ranks(directory: Path, job: Job, device: str) -> tuple[list, object]:
    """The cell's rank processes, each handed the job (and no more), and rank 0's events."""
    environ = {"NCCL_NVLS_ENABLE": os.environ.get("NCCL_NVLS_ENABLE", "0")}  # NVLink multicast stays off
    if not device.startswith("cuda"):  # the ranks share the CPU: one thread pool each would fight for cores
        environ["OMP_NUM_THREADS"] = os.environ.get("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // job.world)))
    ranks = [spawn(directory, f"rank {rank} of {job.world}", rank=rank, **environ) for rank in range(job.world)]
    events = [rank.send(job.to_json(), last=True) for rank in ranks]
    return ranks, events[0]


def _finished(ranks, events) -> Callable[[], bool]:
    """Every rank ended well; or rank 0 reported its record and ended, and a rank slow to leave its process
    group has had EXIT_GRACE_S (it is killed then, not after the cell's whole limit)."""
    reported_at: list[float] = []

    def finished() -> bool:
        if all(rank.poll() == 0 for rank in ranks):
            return True
        if events.record is not None and ranks[0].poll() == 0:
            reported_at.append(time.monotonic())
            return time.monotonic() - reported_at[0] >= EXIT_GRACE_S
        return False

    return finished
