"""A data-parallel step's breakdown (perfgate.measure.ddp_clocks) on synthetic profiler events: compute apart
from NCCL's kernels, the exposed part of the communication, and GPU idle against the timed step."""

from __future__ import annotations

import pytest
import torch
from test_clocks import Event

from perfgate.measure import ddp_clocks, record_builder_ddp
from perfgate.measure.clocks import round_labels, work_between_markers
from perfgate.measure.ddp_clocks import rank_rounds, split_ms

MS = 1_000_000  # ns


def store(record: dict, ranks: list[dict]) -> None:
    """The ranks' breakdown against the record's timed step, merged into it as ddp_rank merges it."""
    timed = {side: record[f"{side}_ms"] for side in ("eager", "compiled")}
    record_builder_ddp.merge_step_breakdown(record, ddp_clocks.breakdown(ranks, timed))


def test_compute_excludes_nccl_and_exposed_communication_is_what_no_compute_hides():
    work = [
        (0, 4 * MS, "ampere_bf16_gemm"),
        (3 * MS, 6 * MS, "ncclDevKernel_AllReduce_Sum_bf16_RING_LL"),  # 1 ms beside the gemm, 2 ms alone
        (7 * MS, 8 * MS, "Memcpy DtoD (Device -> Device)"),
        (7 * MS, 9 * MS, "ncclKernel_AllReduce_RING_LL_Sum_float"),
    ]  # 1 ms beside the copy, 1 ms alone
    compute, comm, exposed = split_ms(sorted(work))
    assert (compute, comm, exposed) == pytest.approx((5.0, 5.0, 3.0))


def test_a_step_without_communication_exposes_none():
    assert split_ms([(0, 2 * MS, "k"), (1 * MS, 3 * MS, "k2")]) == pytest.approx((3.0, 0.0, 0.0))


def _round_events(compute_ms: dict, alone_ms: float) -> list[Event]:
    """Round 0 of each side, each opened by its marker kernel: 2 steps, each `compute_ms[side]` of kernels
    and then `alone_ms` of an all-reduce with nothing beside it; a last marker closes the round."""
    events = [Event("spin_kernel", 200 * MS, 200 * MS + 1, "kernel")]
    for side, start in (("eager", 0), ("compiled", 100 * MS)):
        events.append(Event("at::cuda::spin_kernel(long)", start, start + 1, "kernel"))
        t = start + 1
        for _ in range(2):
            c = compute_ms[side]
            events.append(Event("gemm", t, t + int(c * MS), "kernel"))
            events.append(Event("ncclDevKernel_AllReduce", t + int(c * MS), t + int((c + alone_ms) * MS), "kernel"))
            t += int((c + alone_ms + 1) * MS)
    return events


def test_a_rank_s_rounds_are_per_step_and_per_side():
    events = _round_events({"eager": 8.0, "compiled": 4.0}, 2.0)
    out = rank_rounds(work_between_markers(events, round_labels(1)), rounds=1, steps=2)
    assert out["steps"] == 2
    assert out["eager"][0] == pytest.approx((8.0, 2.0, 2.0))
    assert out["compiled"][0] == pytest.approx((4.0, 2.0, 2.0))


def test_store_gives_the_compute_clock_and_each_rank_s_parts_that_add_up_to_the_wall_step():
    ranks = [
        {"steps": 3, "eager": [(10.0, 4.0, 1.0)] * 3, "compiled": [(5.0, 4.0, 3.0), (5.2, 4.0, 3.0), (4.8, 4.0, 3.0)]},
        {"steps": 3, "eager": [(10.2, 4.0, 2.0)] * 3, "compiled": [(5.0, 4.0, 5.0)] * 3},
    ]
    record = {"eager_ms": 14.0, "compiled_ms": 12.0}
    store(record, ranks)
    assert record["eager_compute_ms"] == pytest.approx(10.1)
    assert record["compiled_compute_ms"] == pytest.approx(5.0)
    assert record["compute_speedup"] == pytest.approx(2.02)
    assert record["compute_speedup_lo"] <= record["compute_speedup"] <= record["compute_speedup_hi"]
    rank1 = record["ddp_step_ranks"]["compiled"][1]
    assert rank1 == {"compute_ms": 5.0, "comm_ms": 4.0, "comm_exposed_ms": 5.0, "gpu_idle_ms": 2.0}
    assert record["compiled_comm_exposed_ms"] == pytest.approx(4.0)  # the ranks' mean: (3 + 5) / 2
    assert record["compiled_gpu_idle_ms"] == pytest.approx(3.0)  # (12 - 5 - 3, 12 - 5 - 5)
    assert record["eager_gpu_idle_ms"] == pytest.approx((3.0 + 1.8) / 2)


def test_idle_never_reads_below_zero_when_the_profiled_step_ran_longer_than_the_timed_one():
    record = {"eager_ms": 5.0, "compiled_ms": 5.0}
    store(record, [{"steps": 1, "eager": [(6.0, 0.0, 0.0)], "compiled": [(4.0, 2.0, 2.0)]}])
    assert record["eager_gpu_idle_ms"] == 0.0


def test_without_cuda_the_breakdown_is_null_and_the_note_says_why():
    record: dict = {}
    steps = ddp_clocks.measure(None, None, torch.device("cpu"), world=2, timed_ms={})
    record_builder_ddp.merge_step_breakdown(record, steps)
    assert record == {"clocks_note": ddp_clocks.NO_CUDA}
