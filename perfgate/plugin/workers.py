"""pytest-xdist and timing: which workers' timings can be trusted, their progress on the controller's
terminal, and the one results file the user named.

Timing workers must not share what they time on. Two workers on one GPU interleave their kernels; two
workers on the CPU tier each start torch with every core's threads and slow each other's steps (seen on
the 2-core CI box: gpt2 train 4.48x under -n 2 against 1.26x alone). Their records are kept, marked
`unfit` with the reason, and kept out of baselines and the gate (perfgate.judge.baseline, perfgate.judge.gate).
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from perfgate.core.records_file import append_record, load_records


def unfit_reason(device_kind: str, workers: int, gpus: int) -> str:
    """Why a cell timed by one of `workers` xdist workers cannot be trusted; "" when it can."""
    if workers <= 1:
        return ""
    if device_kind == "cpu":
        return (
            f"timed by one of {workers} xdist workers sharing {os.cpu_count()} CPU cores: each slows the others' steps"
        )
    if workers > gpus:
        return f"timed by one of {workers} xdist workers on {gpus} GPU(s): workers shared a GPU"
    return ""


def finished_line(record: dict) -> str:
    """One line for a finished cell, as the controller prints it: "<cell>: ok, 1.263x [1.21, 1.30] wall"."""
    if record.get("status") != "ok":
        return f"{record['cell']}: {record.get('status')}: {record.get('reason')}"
    lo, hi = record.get("speedup_lo"), record.get("speedup_hi")
    interval = f" [{lo:.3f}, {hi:.3f}]" if lo and hi else ""
    unfit = f"; unfit: {record['unfit']}" if record.get("unfit") else ""
    return f"{record['cell']}: ok, {record['speedup']:.3f}x{interval} wall, compile {record['compile_s']:.1f} s{unfit}"


class ProgressRelay:
    """Registered on the xdist controller: prints each worker's finished-cell line with k/N, elapsed and an
    ETA as its report arrives (a worker's own terminal output never reaches the user)."""

    KEY = "perfgate"  # the user_properties key a worker's line travels under

    def __init__(self, write_line, workers: int = 1, clock=time.monotonic):
        self.write_line, self.workers, self.progress, self.clock = write_line, workers, None, clock
        # Elapsed counts from the session's start, not from the first line: that came a whole cell later
        # ("[1/24] elapsed 0:00" after a 63 s cell, 4 x H200 1c60ab9c, 2026-11-28).
        self.started = clock()

    def pytest_runtest_logreport(self, report) -> None:
        from perfgate.plan.costs import Progress

        node = getattr(report, "node", None)
        worker = getattr(getattr(node, "gateway", None), "id", None)
        for key, done in getattr(report, "user_properties", ()):
            if key != self.KEY:
                continue
            if self.progress is None:  # every worker collects the whole plan; its first line carries it
                self.progress = Progress(done["planned"], done["planned_s"], self.workers, self.clock, self.started)
            count = self.progress.finish(done["cell"], done["wall_s"], done["expected_s"], done.get("gpus", 0))
            self.write_line(f"{count}: {worker + ' ' if worker else ''}{done['line']}")


def worker_files(results_path: Path) -> list[Path]:
    """The files this session's xdist workers streamed to: <stem>.gwN.jsonl beside the named file."""
    ours = re.compile(rf"{re.escape(results_path.stem)}\.gw\d+\.jsonl")
    return sorted(p for p in results_path.parent.glob(f"{results_path.stem}.gw*.jsonl") if ours.fullmatch(p.name))


def merge_into(results_path: Path, run_id: str) -> list[dict]:
    """Append this run's final records (one per cell) from the worker files to the file the user named, so
    it exists under xdist as it does without; the worker files stay, with every checkpoint."""
    records = [r for r in load_records(worker_files(results_path)) if r.get("run_id") == run_id]
    for record in records:
        append_record(results_path, record)
    return records
