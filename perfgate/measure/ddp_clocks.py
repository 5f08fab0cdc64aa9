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
from perfgate.measure.clocks import DEVICE_ROUNDS, LABEL, profiled_rounds, union_ns
from perfgate.measure.record_builder_ddp import StepBreakdown
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


def breakdown(ranks: list[dict], timed_ms: dict[str, float]) -> StepBreakdown:
    """The compute clock (per round, the ranks' mean) and each rank's breakdown (medians over rounds, ms, 4
    decimals), from every rank's rank_rounds in rank order; GPU idle against the timed step ({side: ms})."""
    rounds = len(ranks[0]["eager"])
    compute = {side: [statistics.fmean(rank[side][i][0] for rank in ranks) for i in range(rounds)] for side in SIDES}
    parts_of: dict = {}
    for side in SIDES:
        parts_of[side] = []
        for rank in ranks:
            parts = dict(zip(PARTS, (statistics.median(r[k] for r in rank[side]) for k in range(len(PARTS)))))
            parts["gpu_idle_ms"] = max(0.0, timed_ms[side] - parts["compute_ms"] - parts["comm_exposed_ms"])
            parts_of[side].append({key: round(ms, 4) for key, ms in parts.items()})
    return StepBreakdown(BREAKDOWN, Rounds(compute["eager"], compute["compiled"], ranks[0]["steps"]), parts_of)


def measure(eager, compiled, device: torch.device, world: int, timed_ms: dict[str, float]) -> StepBreakdown:
    """Profile this rank's steps, then (a collective: every rank calls it) gather every rank's breakdown. A
    profiler failure on any rank leaves no breakdown, and the note says why."""
    if device.type != "cuda":
        return StepBreakdown(NO_CUDA)
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
        return StepBreakdown(f"the step breakdown failed on {failed[0]}")
    return breakdown([ranks for ranks, _ in gathered], timed_ms)
