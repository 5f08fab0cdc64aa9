"""A data-parallel cell (the "ddp" phase): matrix.DDP_WORLD rank processes, one per GPU (NCCL) or all on the
CPU (gloo), each measuring its share (perfgate.measure.ddp_rank); this module starts them and returns rank 0's
record. It imports no torch.

The ranks meet through a file store in the cell's temporary directory (no port to race for). Rank 0 reports
progress, checkpoints and its record through an event file, as an isolated cell does (perfgate.measure.isolate);
every rank's stderr is kept. A rank that dies fails the cell at once, naming the rank and what it was doing
(the others would wait in their next all-reduce until the process group's timeout); a cell past its time limit
fails likewise. Either way every rank's process group is killed: no rank outlives the cell, and each also asks
Linux to kill it if this process dies.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

from perfgate.core.matrix import DDP_WORLD, VARIANTS
from perfgate.core.record import new_record
from perfgate.measure.children import (HEARTBEAT_S, POLL_S, Events, child_environ, death, import_path,
                                       kill_groups, stage_of, stderr_tail)

EXIT_GRACE_S = 30.0  # how long the other ranks may take to exit once rank 0 has reported its record
# A rank's process: python RANK_ARGS JOB_DIR RANK (baselines/runs/probes/ddp_one_gpu.py starts its own).
RANK_ARGS = ("-m", "perfgate.measure.ddp_rank")


def rank_device(device: str, rank: int) -> str:
    """Rank r's device: cuda:r on CUDA (one GPU each), the CPU otherwise."""
    return f"cuda:{rank}" if device.startswith("cuda") else "cpu"


def run(spec, cell, options, env: dict, progress: Callable[[str], None],
        record_compiled: Callable[[float], None] | None = None,
        checkpoint: Callable[[dict], None] | None = None, world: int = DDP_WORLD) -> dict:
    """Run the cell on `world` ranks and return its record; never raises for what a rank does."""
    limit_s = spec.time_limit_s or VARIANTS[cell.variant].time_limit_s
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="perfgate-ddp-") as tmp:
        job_dir = Path(tmp)
        job = {"cell": dataclasses.asdict(cell), "options": dataclasses.asdict(options), "env": env,
               "world": world, "limit_s": limit_s, "sys_path": import_path()}
        (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
        ranks = _start(job_dir, world, options.device)
        events = Events(job_dir / "events.jsonl")
        try:
            failure = _wait(ranks, events, job_dir, cell, limit_s, started, progress, record_compiled, checkpoint)
        finally:
            kill_groups(*ranks)
        events.read(progress, record_compiled)
        if failure is None and events.record is not None:
            return events.record
        record = dict(events.checkpoint) if events.checkpoint else new_record(cell, env)
        record.update(status="failed", reason=failure or "rank 0 ended without a record",
                      world_size=world, wall_s=round(time.monotonic() - started, 2))
        return record


def _start(job_dir: Path, world: int, device: str) -> list[subprocess.Popen]:
    env = child_environ()
    env.setdefault("NCCL_NVLS_ENABLE", "0")  # NVLink multicast stays off (it can take a shared host's GPUs down)
    if not device.startswith("cuda"):  # the ranks share the CPU: one thread pool each would fight for cores
        env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // world)))
    ranks = []
    for rank in range(world):
        with (job_dir / f"stderr-{rank}.txt").open("w", encoding="utf-8") as stderr:
            ranks.append(subprocess.Popen([sys.executable, *RANK_ARGS, str(job_dir), str(rank)],
                                          env=env, stdin=subprocess.DEVNULL, stdout=stderr, stderr=stderr,
                                          start_new_session=True))
    return ranks


def _wait(ranks, events: Events, job_dir: Path, cell, limit_s: float, started: float, progress,
          record_compiled, checkpoint) -> str | None:
    """Poll until every rank ends; the reason the cell failed, or None."""
    stage_seen, stage_since, told, kept, recorded_at = events.last_stage, started, started, None, None
    while True:
        time.sleep(POLL_S)
        events.read(progress, record_compiled)
        if checkpoint is not None and events.checkpoint is not None and events.checkpoint is not kept:
            kept = events.checkpoint
            checkpoint(kept)
        now = time.monotonic()
        stage = stage_of(events.last_stage, cell.id)
        dead = [(rank, p.returncode) for rank, p in enumerate(ranks) if p.poll() not in (None, 0)]
        if dead:
            rank, code = dead[0]
            tail = stderr_tail(job_dir / f"stderr-{rank}.txt")
            print("\n".join(tail), file=sys.stderr)
            last = f"; its last words: {tail[-1][:300]}" if tail else ""
            return f"rank {rank} of {len(ranks)} died ({death(code)}) while {stage}{last}"
        if all(p.poll() == 0 for p in ranks):
            return None
        if events.record is not None and ranks[0].poll() == 0:  # the cell is measured; a rank slow to
            recorded_at = recorded_at or now                    # leave its process group is killed after
            if now - recorded_at >= EXIT_GRACE_S:               # a grace period, not the cell's whole limit
                return None
        if now - started >= limit_s:
            return f"timed out after {limit_s:g} s while {stage}"
        if events.last_stage != stage_seen:
            stage_seen, stage_since, told = events.last_stage, now, now
        elif now - told >= HEARTBEAT_S:
            told = now
            progress(f"{cell.id}: still {stage} after {now - stage_since:.0f} s (cell limit {limit_s:g} s)")
