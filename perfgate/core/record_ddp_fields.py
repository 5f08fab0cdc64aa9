"""The record fields of a data-parallel cell (the "ddp" phase; null elsewhere), in their place in the one table,
perfgate.core.record.FIELDS, which splices them in. Their timed figures are the slowest rank's: each timed region's
ms is the maximum over the ranks, so every rank takes the same warm-up and round decisions. Imports no torch.
"""

from __future__ import annotations

from perfgate.core.clocks import COMPUTE
from perfgate.core.record_field import Field, clock_fields

DDP_FIELDS: tuple[Field, ...] = (
    Field("world_size", int, "ranks", "> 0", doc="processes (GPUs) of a data-parallel cell"),
    Field(
        "ddp_buckets",
        int,
        "count",
        ">= 0",
        fold="max",
        doc="gradient buckets DDPOptimizer split the "
        "compiled graphs at (null: it did not split: no_optimization, python_reducer)",
    ),
    Field(
        "ddp_splits",
        int,
        "count",
        ">= 0",
        fold="max",
        doc="graphs added by those splits (buckets - graphs "
        "split): kept apart from graph_breaks, which counts the model's own",
    ),
    Field(
        "ddp_wrapper_breaks",
        int,
        "count",
        ">= 0",
        fold="max",
        doc="graph breaks inside DDP's own forward wrapper (the compiled DDP step's breaks less the model's alone)",
    ),
    Field(
        "ranks_param_diff",
        float,
        "",
        ">= 0",
        doc="after the numerics steps: the largest |parameter - the "
        "ranks' mean| over every element (0: every rank holds the same parameters)",
    ),
    Field(
        "peak_mem_eager_mb_ranks",
        list,
        "MiB",
        default=[],
        doc="each rank's eager peak (peak_mem_eager_mb: their maximum)",
    ),
    Field("peak_mem_compiled_mb_ranks", list, "MiB", default=[]),
    Field(
        "single_eager_ms",
        float,
        "ms",
        "> 0",
        doc="one device, no DDP, the same per-rank batch: the median of its rounds, each the slowest rank's",
    ),
    Field("single_compiled_ms", float, "ms", "> 0"),
    # The rounds those medians come from: a one-device step that read slower than the DDP step it is part of
    # (gpt2 compiled, 2 x H200, 2026-11-27: 35.10 against 31.89 ms) is told from a slow spell by its spread.
    Field("single_eager_round_ms", list, "ms", "rounds", default=[], doc="the one-device rounds, ms per step"),
    Field("single_compiled_round_ms", list, "ms", "rounds", default=[]),
    Field(
        "scaling_eager",
        float,
        "x",
        "> 0",
        fold="median",
        doc="throughput on world_size ranks / on one "
        "device: world_size * single_eager_ms / eager_ms (ideal: world_size; above it the record check fails "
        "the cell, perfgate.core.validate; scaling / world_size is the efficiency the reports show)",
    ),
    Field("scaling_compiled", float, "x", "> 0", fold="median"),
    # Where a data-parallel step's time goes (perfgate.measure.ddp_clocks; CUDA only), from profiled rounds
    # apart from the timed ones: compute (each rank's GPU work but NCCL's kernels) as a clock of its own, and
    # per rank communication (NCCL's kernels), its exposed part (no compute beside it: the all-reduce not
    # hidden, the wait for the slower rank) and GPU idle (the timed step less the busy union). The compute
    # clock is gated as the device clock is; the rest is not.
    *clock_fields(
        COMPUTE,
        "median of the per-round compute ratios: a data-parallel cell's device clock",
        "the ranks' mean, one per round",
    ),
    Field("eager_comm_ms", float, "ms", ">= 0", fold="median", doc="the ranks' mean (each rank's: ddp_step_ranks)"),
    Field("compiled_comm_ms", float, "ms", ">= 0", fold="median"),
    Field("eager_comm_exposed_ms", float, "ms", ">= 0", fold="median"),
    Field("compiled_comm_exposed_ms", float, "ms", ">= 0", fold="median"),
    Field("eager_gpu_idle_ms", float, "ms", ">= 0", fold="median"),
    Field("compiled_gpu_idle_ms", float, "ms", ">= 0", fold="median"),
    Field(
        "ddp_step_ranks",
        dict,
        check="object",
        default={},
        doc="{eager, compiled: [{compute_ms, comm_ms, comm_exposed_ms, gpu_idle_ms} per rank]}",
    ),
)
