"""How fast the host CPU runs now: a fixed piece of interpreter work timed on the measuring thread (wall and
CPU ms), so a cell's record says how fast its host was while its timed rounds ran.

Why: on H100 leases of 2026-11-26 the same machine ran host-bound steps up to 2.4x slower minutes apart
(segformer_b2 infer's eager host clock 48.8 against 20.2 ms, the fastest of 5 single steps, so not the
scheduler's pauses), in both directions, on cold and warm runs; gpt2 infer's compiled step slowed more than
its eager one and its wall speedup fell 7 % against the baseline while the device clock stayed put (lease BQ,
a false alarm: docs/time-to-verdict.md). Nothing in a record measured the host itself, so the gate could not
tell a slower host from a change that adds host work.

The probe's figure is the wall time of the work (the median of its reps): it moves with a slower core (its
clock, a neighbour on its sibling hyperthread, a shared cache) and with a core shared with other processes.
The measuring thread's CPU time for the same work (CLOCK_THREAD_CPUTIME_ID) is kept beside it: where the wall
time grew and the CPU time did not, the thread waited (the scheduler, or the GIL held by another thread of the
process) rather than ran slower. Imports no torch.

What it is for: the reader's triage line (perfgate.judge.triage). The gate does not act on it: on one quiet
H100 (lease BR, 2026-11-26) it read 1.33-3.56 ms from cell to cell, and under 16 busy processes it barely
moved while the cells' host clocks doubled (docs/time-to-verdict.md).
"""

from __future__ import annotations

import statistics
import time

from perfgate.measure.record_builder import HostProbe

# Reps of the work per probe; the first WARM_REPS are dropped: CPython 3.11's adaptive interpreter and a core
# waking from idle made the first reps 1.5-1.8x the later ones (this container, 2026-11-26: 1.49, 1.45 then
# 0.83-0.86 ms).
REPS = 7
WARM_REPS = 2
ITERATIONS = 8000  # 1.7-3.4 ms a rep on this project's 2-core CI container (2026-11-26)


def _work(n: int = ITERATIONS) -> int:
    """Dict lookups, small-int arithmetic, str formatting and calls: the kind of work a host-bound step's
    Python (guards, wrappers, launches' argument handling) does."""
    table: dict[int, int] = {}
    acc = 0
    for i in range(n):
        key = i & 255
        table[key] = table.get(key, 0) + i
        acc += len(str(i)) + table[key] % 7
    return acc


def probe() -> tuple[float, float]:
    """(wall ms, CPU ms) of one rep of the work: the medians of the reps after the warm ones."""
    wall, cpu = [], []
    for _ in range(REPS):
        w0, c0 = time.perf_counter_ns(), time.thread_time_ns()
        _work()
        wall.append((time.perf_counter_ns() - w0) / 1e6)
        cpu.append((time.thread_time_ns() - c0) / 1e6)
    return statistics.median(wall[WARM_REPS:]), statistics.median(cpu[WARM_REPS:])


class HostSpeed:
    """Probes taken at points of a cell (before its timed rounds, after its clocks), their wall and CPU
    figures folded into the medians the record keeps."""

    def __init__(self) -> None:
        self.wall: list[float] = []
        self.cpu: list[float] = []

    def sample(self) -> None:
        wall, cpu = probe()
        self.wall.append(wall)
        self.cpu.append(cpu)

    def result(self) -> HostProbe | None:
        """The medians of the probes' wall and CPU ms (perfgate.measure.record_builder.merge_host_speed), or
        None where no probe was taken."""
        if not self.wall:
            return None
        return HostProbe(statistics.median(self.wall), statistics.median(self.cpu))
