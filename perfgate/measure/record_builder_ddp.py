"""A data-parallel cell's own record fields (perfgate.core.record_ddp_fields), set here and nowhere else: rank 0's
record, merged from what perfgate.measure.ddp_rank and perfgate.measure.ddp_clocks measure. The fields a
data-parallel cell shares with a one-device cell go through perfgate.measure.record_builder. Imports no torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import TYPE_CHECKING

from perfgate.core.clocks import COMPUTE
from perfgate.measure.record_builder import SIDES, merge_clock

if TYPE_CHECKING:
    from perfgate.measure.timing import Rounds

# The breakdown's parts whose mean over the ranks the record keeps per side ({side}_comm_ms, ...).
MEAN_PARTS = ("comm_ms", "comm_exposed_ms", "gpu_idle_ms")


@dataclass(frozen=True)
class StepBreakdown:
    """Where a data-parallel step's time goes (perfgate.measure.ddp_clocks): the compute clock's rounds (the
    ranks' mean per round), each rank's parts per side ({side: [{part: ms}], rank order}), and the clocks
    note; no rounds and no parts where the breakdown could not be taken (the note says why)."""

    note: str
    compute: Rounds | None = None
    ranks: dict | None = None


def merge_world(record: dict, world: int) -> None:
    """perfgate.measure.ddp_rank.run_rank (and a lost cell's record): the ranks the cell runs on."""
    record["world_size"] = world


def mark_ranks_lost(record: dict, reason: str, world: int, wall_s: float) -> None:
    """perfgate.measure.ddp: rank 0 ended without a record; its last checkpoint (or a new record) failed with
    `reason`, and the wall seconds the launcher saw."""
    record.update(status="failed", reason=reason, world_size=world, wall_s=round(wall_s, 2))


def merge_slowest_compile(record: dict, compile_s: float) -> None:
    """Stage "compile": the first compiled call's seconds on the slowest rank (ms precision)."""
    record["compile_s"] = round(compile_s, 3)


def merge_param_spread(record: dict, spread: float) -> None:
    """Stage "numerics": max |parameter - the ranks' mean| after the numerics steps (0: the ranks agree)."""
    record["ranks_param_diff"] = spread


def merge_ddp_graphs(record: dict, graph_count: int, buckets: list[int]) -> None:
    """Stage "extras": compiled DDP's graphs, and the buckets DDPOptimizer split each at (`buckets`: one count
    per graph it split; none: it split nothing)."""
    record.update(
        graph_count=graph_count,
        ddp_buckets=sum(buckets) if buckets else None,
        ddp_splits=sum(buckets) - len(buckets) if buckets else 0,
    )


def merge_one_device_graphs(record: dict, graph_breaks: int, break_reasons: list) -> None:
    """Stage "scaling": the model's own graph breaks, from the same step compiled on one device."""
    record.update(graph_breaks=graph_breaks, break_reasons=break_reasons)


def merge_wrapper_breaks(record: dict, breaks: int) -> None:
    """Stage "scaling": the graph breaks DDP's forward wrapper adds to the model's own."""
    record["ddp_wrapper_breaks"] = breaks


def merge_rank_peaks(record: dict, peaks: list[tuple[float | None, float | None]]) -> None:
    """Every rank's (eager, compiled) peak memory, MB, rank order: the lists, and the highest as the cell's."""
    record["peak_mem_eager_mb_ranks"] = [p[0] for p in peaks]
    record["peak_mem_compiled_mb_ranks"] = [p[1] for p in peaks]
    # Each side's highest over the ranks that measured it: a rank lost before its compiled side has an eager
    # peak and no compiled one (a max over both at once would meet None).
    eager = [p[0] for p in peaks if p[0] is not None]
    compiled = [p[1] for p in peaks if p[1] is not None]
    record["peak_mem_eager_mb"] = max(eager) if eager else None
    record["peak_mem_compiled_mb"] = max(compiled) if compiled else None


def merge_scaling(record: dict, rounds: Rounds, world: int) -> None:
    """Stage "scaling": the one-device step times (each side's upper median round, ms) and the scaling each
    side's DDP step reaches against them (world x one-device ms / DDP ms; `world`: 1.0 would be perfect)."""
    record["single_eager_ms"] = round(sorted(rounds.eager_ms)[len(rounds.eager_ms) // 2], 4)
    record["single_compiled_ms"] = round(sorted(rounds.compiled_ms)[len(rounds.compiled_ms) // 2], 4)
    record["single_eager_round_ms"] = [round(x, 4) for x in rounds.eager_ms]
    record["single_compiled_round_ms"] = [round(x, 4) for x in rounds.compiled_ms]
    for side in SIDES:
        record[f"scaling_{side}"] = round(world * record[f"single_{side}_ms"] / record[f"{side}_ms"], 4)


def merge_ranks_throughput(record: dict, world: int) -> None:
    """Stage "extras": the throughput of all ranks together, from one rank's (merge_throughput's)."""
    for side in SIDES:
        record[f"throughput_{side}"] = round(world * record[f"throughput_{side}"], 1)


def merge_step_breakdown(record: dict, breakdown: StepBreakdown) -> None:
    """Stage "device_clock": the compute clock, each side's parts as the ranks' mean (ms, 4 decimals), every
    rank's breakdown, and the clocks note."""
    if breakdown.compute is not None and breakdown.ranks is not None:
        merge_clock(record, COMPUTE, breakdown.compute)
        for side in SIDES:
            for key in MEAN_PARTS:
                record[f"{side}_{key}"] = round(statistics.fmean(parts[key] for parts in breakdown.ranks[side]), 4)
        record["ddp_step_ranks"] = breakdown.ranks
    record["clocks_note"] = breakdown.note
