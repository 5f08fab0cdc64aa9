"""A process that runs jobs: `python -m perfgate.measure.child DIR [--rank R]` (perfgate.measure.launch starts it).

It imports torch, the compiler stack and the zoo once, then reads jobs from stdin, one JSON line each
({"n": n, "job": Job}), and reports on job n through DIR/events-n.jsonl:

- measure: the cell, as the pytest process would run it (perfgate.measure.cell.run_cell), its checkpoints
  streamed to the results file as well; a data-parallel rank (--rank) runs its share (ddp_rank.run_rank).
  After a cell that failed, the process ends rather than take the next: a CUDA error can poison its context,
  an OOM fragment its allocator, and the next cell gets a fresh process.
- precompile: the cell's compile into the kept cache and its reference into the reference cache.
- artifacts: a compile from the cell's cache artifacts, in this fresh process with empty caches.

A warm process (an isolated session's cells) takes job after job until its stdin closes; the others get one
job, or one list, and stdin closes after it.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path


class Reporter:
    """Job n's event file: progress lines, compiled round times, checkpoints, the record or result."""

    def __init__(self, path: Path | None):
        self.file = path.open("a", encoding="utf-8") if path is not None else None

    def emit(self, event: dict) -> None:
        if self.file is not None:
            self.file.write(json.dumps(event) + "\n")
            self.file.flush()

    def close(self) -> None:
        if self.file is not None:
            self.file.close()


def run_job(job, reporter: Reporter, rank: int | None, envs: dict, directory: Path) -> bool:
    """Run one job; whether this process may take another."""
    from perfgate.core.records_file import append_record
    from perfgate.measure import cache_artifacts, precompile, record_builder
    from perfgate.measure.cell import run_cell

    sys.path[:] = list(job.sys_path) or sys.path
    if job.purpose == "artifacts":
        reporter.emit({"result": cache_artifacts.first_call(job)})
        return False
    if job.purpose == "precompile":
        precompile.compile_into(job)
        return True
    # A rank (--rank) runs its share whatever its world: the one-rank probe's (world 1) would go to run_cell
    # instead, which starts the cell's own cell.world ranks in turn (2 on one visible GPU: rank 1 dies).
    if rank is not None:
        from perfgate.measure import ddp_rank

        ddp_rank.run_rank(job, rank, reporter.emit, directory)
        return False
    spec, env = cell_setup(job, envs)

    def checkpoint(partial: dict) -> None:
        if job.results_path:
            append_record(job.results_path, record_builder.in_run(partial, job.run_id, job.remeasure))
        reporter.emit({"checkpoint": partial})

    record = run_cell(
        spec,
        job.cell,
        job.options,
        env,
        lambda m: reporter.emit({"progress": m}),
        lambda ms: reporter.emit({"compiled_ms": ms}),
        checkpoint,
        process="worker",
    )
    reporter.emit({"record": record})
    return takes_another(record)


def takes_another(record: dict) -> bool:
    """Whether the process that measured `record` takes the next cell: not after a failed one (the docstring
    above says why). perfgate.measure.isolate reads the same rule, so as not to hand a job to a process that
    is exiting."""
    return record["status"] == "ok"


def cell_setup(job, envs: dict) -> tuple[object, dict]:
    """(the cell's ModelSpec, the environment record its record carries) for a job this process measures: its
    device started with the job's fp32 policy, and the environment read once per device (`envs`)."""
    from perfgate.core import zoo
    from perfgate.measure.devices import start_cell
    from perfgate.measure.env import environment

    spec = zoo.load(job.options.registry)[job.cell.model]
    device = start_cell(job.options.device, job.tf32)
    return spec, job.env or envs.setdefault(str(device), environment(device, job.tf32))


def main(argv: list[str]) -> int:
    from perfgate.core.children import die_with_parent

    die_with_parent()
    directory = Path(argv[0])
    rank = int(argv[2]) if len(argv) > 2 and argv[1] == "--rank" else None
    import importlib

    from perfgate.core.job import Job

    # Imported before the first job, as a long session has them by its second cell: a first compile must not
    # count importing the compiler stack (seconds) as compile time.
    importlib.import_module("torch._inductor.compile_fx")
    envs: dict = {}  # the environment record of each device, read once per process
    for line in sys.stdin:
        message = json.loads(line)
        # Rank 0 reports for a data-parallel cell; the others' stderr is kept by the launcher.
        path = directory / f"events-{message['n']}.jsonl" if not rank else None
        reporter = Reporter(path)
        reporter.emit({"started": time.time()})
        try:
            more = run_job(Job.from_json(json.dumps(message["job"])), reporter, rank, envs, directory)
        finally:
            reporter.close()
        if not more:
            break
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
