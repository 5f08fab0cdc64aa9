"""Where a data-parallel step's time goes on each rank (perfgate.measure.ddp_rank calls it on CUDA ranks).

A rank's GPU-busy time is no device clock for DDP: it includes the all-reduce, and an all-reduce includes the
wait for the slower rank. So each rank profiles interleaved rounds of both sides (the clocks' profiled
rounds, never the timed ones) and splits its GPU work by kernel:

- compute ms per step: the union of the rank's own GPU work (every kernel, copy and set but NCCL's): what the
  compile changes, comparable with a one-device cell's device clock. Its eager / compiled ratio per round
  (the ranks' mean) is `compute_speedup`, with its interval.
- communication ms: the union of NCCL's kernels. Its exposed part is the time they run with no compute
  beside them (the union of all GPU work less compute's): the all-reduce the backward did not hide, and the
  wait for the slower rank.
- GPU idle ms: the timed step (the slowest rank's wall ms) less the rank's busy union: the GPU waiting on
  the host to issue work.

So a rank's wall step = compute + exposed communication + GPU idle. Over gloo (the CPU tier; one GPU shared
by both ranks) the all-reduce runs on the host and shows as idle. Imports torch (measuring side).
"""

from __future__ import annotations

import statistics

import torch
import torch.distributed as dist

from perfgate.core.record import error_line
from perfgate.measure.clocks import (
    DEVICE_ROUNDS,
    LABEL,
    profiled_rounds,
    store_clock,
    union_ns,
)
from perfgate.measure.timing import Rounds

COMM_KERNEL = "nccl"  # NCCL's kernels: ncclDevKernel_AllReduce_Sum_bf16_RING_LL (2.2x), ncclKernel_... before
SIDES = ("eager", "compiled")
PARTS = ("compute_ms", "comm_ms", "comm_exposed_ms")
NO_CUDA = (
    "no CUDA device: no device clock or step breakdown (on the CPU the host runs the whole step, "
    "the all-reduce included)"
)
BREAKDOWN = (
    "no device or host clock for a data-parallel cell (a rank's GPU-busy time includes its wait for "
    "the others' all-reduce): compute_speedup and the step breakdown instead (perfgate.measure.ddp_clocks)"
)


def split_ms(work: list[tuple[int, int, str]]) -> tuple[float, float, float]:
    """(compute, communication, exposed communication) ms of one range's sorted GPU work."""
    compute = union_ns([(start, end) for start, end, name in work if COMM_KERNEL not in name.lower()])
    comm = union_ns([(start, end) for start, end, name in work if COMM_KERNEL in name.lower()])
    busy = union_ns([(start, end) for start, end, _ in work])
    return compute / 1e6, comm / 1e6, (busy - compute) / 1e6


def rank_rounds(work: dict, rounds: int, steps: int) -> dict:
    """This rank's {"steps": steps, side: [(compute, comm, exposed) ms per step, one per round]}, from
    profiled_rounds' {round label: GPU work}."""
    out: dict = {"steps": steps}
    for side in SIDES:
        out[side] = [tuple(ms / steps for ms in split_ms(work[f"{LABEL}:{side}:{i}"])) for i in range(rounds)]
    return out


def store(record: dict, ranks: list[dict]) -> None:
    """The record's compute clock (per round, the ranks' mean) and each rank's breakdown (medians over
    rounds), from every rank's rank_rounds in rank order; GPU idle against the timed eager_ms / compiled_ms."""
    rounds = len(ranks[0]["eager"])
    compute = {side: [statistics.fmean(rank[side][i][0] for rank in ranks) for i in range(rounds)] for side in SIDES}
    store_clock(record, "compute", Rounds(compute["eager"], compute["compiled"], ranks[0]["steps"]))
    breakdown: dict = {}
    for side in SIDES:
        breakdown[side] = []
        for rank in ranks:
            parts = dict(zip(PARTS, (statistics.median(r[k] for r in rank[side]) for k in range(len(PARTS)))))
            parts["gpu_idle_ms"] = max(0.0, record[f"{side}_ms"] - parts["compute_ms"] - parts["comm_exposed_ms"])
            breakdown[side].append({key: round(ms, 4) for key, ms in parts.items()})
        for key in ("comm_ms", "comm_exposed_ms", "gpu_idle_ms"):
            record[f"{side}_{key}"] = round(statistics.fmean(parts[key] for parts in breakdown[side]), 4)
    record["ddp_step_ranks"] = breakdown


def measure_into(record: dict, eager, compiled, device: torch.device, world: int) -> None:
    """Profile this rank's steps, then (a collective: every rank calls it) gather every rank's breakdown into
    the record. A profiler failure on any rank leaves the fields null and says why in clocks_note."""
    if device.type != "cuda":
        record["clocks_note"] = NO_CUDA
        return
    mine, failure = None, None
    try:
        work, steps = profiled_rounds(eager, compiled, device, rounds=DEVICE_ROUNDS)
        mine = rank_rounds(work, DEVICE_ROUNDS, steps)
    except Exception as err:  # noqa: BLE001 - a profiler failure costs the breakdown, not the cell
        failure = error_line(err)
    gathered: list = [None] * world
    dist.all_gather_object(gathered, (mine, failure))
    failed = [f"rank {rank}: {why}" for rank, (_, why) in enumerate(gathered) if why]
    if failed:
        record["clocks_note"] = f"the step breakdown failed on {failed[0]}"
        return
    store(record, [ranks for ranks, _ in gathered])
    record["clocks_note"] = BREAKDOWN
