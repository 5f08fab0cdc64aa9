"""The device and host clocks' arithmetic on synthetic profiler events, and the planted clock faults."""

from __future__ import annotations

import os

import pytest
import torch

from perfgate.core import fault
from perfgate.core.clocks import HOST
from perfgate.core.matrix import Cell
from perfgate.core.record import bound_of, new_record
from perfgate.measure import clocks, faults, record_builder
from perfgate.measure.clocks import union_ns
from perfgate.measure.timing import Rounds


class Event:
    """The slice of torch's _KinetoEvent that clocks reads."""

    def __init__(self, name, start_ns, end_ns, kind):
        self._name, self._start, self._end, self._kind = name, start_ns, end_ns, kind

    def name(self):
        return self._name

    def start_ns(self):
        return self._start

    def end_ns(self):
        return self._end

    def activity_type(self):
        return self._kind

    def device_type(self):
        gpu = self._kind in ("kernel", "gpu_memcpy", "gpu_memset", "gpu_user_annotation")
        return torch.autograd.DeviceType.CUDA if gpu else torch.autograd.DeviceType.CPU


def test_union_counts_overlapping_kernels_once():
    assert union_ns([(0, 10), (5, 15), (20, 30)]) == 25
    assert union_ns([(0, 10), (2, 3), (10, 12)]) == 12
    assert union_ns([]) == 0


def test_rounds_are_the_gpu_work_between_their_markers_in_the_order_they_ran():
    events = [
        Event("cudaLaunchKernel", 0, 50_000, "cuda_runtime"),  # the host's side of a launch: not GPU work
        Event("at::cuda::(anonymous namespace)::spin_kernel(long)", 0, 1_000, "kernel"),
        Event("k1", 100_000, 300_000, "kernel"),
        Event("k2", 200_000, 400_000, "kernel"),  # overlaps k1 (a second stream): 0.3 ms in all
        Event("memcpy", 500_000, 600_000, "gpu_memcpy"),
        # inductor's own record_function shows on the GPU as an annotation spanning the gaps: not busy time
        Event("## Call CompiledFxGraph ##", 100_000, 900_000, "gpu_user_annotation"),
        Event("at::cuda::(anonymous namespace)::spin_kernel(long)", 2_000_000, 2_001_000, "kernel"),
        Event("k3", 2_100_000, 2_150_000, "kernel"),
        Event("at::cuda::(anonymous namespace)::spin_kernel(long)", 3_000_000, 3_001_000, "kernel"),
    ]
    work = clocks.work_between_markers(events, ["perfgate-clock:eager:0", "perfgate-clock:compiled:0"])
    assert [name for _, _, name in work["perfgate-clock:eager:0"]] == ["k1", "k2", "memcpy"]
    assert [name for _, _, name in work["perfgate-clock:compiled:0"]] == ["k3"]


def test_a_planted_spin_inside_a_round_is_its_work_not_a_marker():
    """device_slow spins the markers' kernel inside the compiled step: its spins are GPU time of the round."""
    spin = "at::cuda::(anonymous namespace)::spin_kernel(long)"
    events = [
        Event(spin, 0, 1_000, "kernel"),
        Event("k1", 10_000, 20_000, "kernel"),
        Event(spin, 1_000_000, 1_001_000, "kernel"),
        Event("k2", 1_010_000, 1_020_000, "kernel"),
        Event(spin, 1_020_000, 1_220_000, "kernel"),  # the plant: 200 us
        Event(spin, 2_000_000, 2_001_000, "kernel"),
    ]
    work = clocks.work_between_markers(events, ["perfgate-clock:eager:0", "perfgate-clock:compiled:0"])
    assert [name for _, _, name in work["perfgate-clock:compiled:0"]] == ["k2", spin]


def test_a_device_plant_too_short_to_tell_from_a_marker_is_refused():
    step = lambda _i: None  # noqa: E731
    with pytest.raises(ValueError, match=r"device_slow:3 plants 30.0 us a step, under the 40 us"):
        faults.slowed(step, fault.Fault("device_slow", 3.0), torch.device("cuda"), lambda clock: 1.0)


def test_round_labels_follow_the_alternating_order():
    assert clocks.round_labels(2) == [
        "perfgate-clock:eager:0",
        "perfgate-clock:compiled:0",
        "perfgate-clock:compiled:1",
        "perfgate-clock:eager:1",
    ]


def test_missing_markers_or_an_empty_round_raise_rather_than_read_as_zero():
    marker = lambda t: Event("spin_kernel", t, t + 1, "kernel")  # noqa: E731
    labels = ["perfgate-clock:eager:0", "perfgate-clock:compiled:0"]
    with pytest.raises(RuntimeError, match="2 round markers for 2 rounds"):
        clocks.work_between_markers([marker(0), Event("k", 5, 6, "kernel"), marker(10)], labels)
    with pytest.raises(RuntimeError, match="no GPU activity in perfgate-clock:compiled:0"):
        clocks.work_between_markers([marker(0), Event("k", 5, 6, "kernel"), marker(10), marker(20)], labels)


def test_a_gap_between_rounds_may_run_no_gpu_work():
    """A paired side's new memory layout runs between its device rounds, in a span of its own (clocks.GAP): it
    launches no kernel, and its span is no round's."""
    marker = lambda t: Event("spin_kernel", t, t + 1, "kernel")  # noqa: E731
    spans = [f"{clocks.GAP}:perfgate-clock:eager:0", "perfgate-clock:eager:0"]
    work = clocks.work_between_markers([marker(0), marker(10), Event("k", 15, 16, "kernel"), marker(20)], spans)
    assert work[spans[0]] == [] and [name for _, _, name in work[spans[1]]] == ["k"]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="a memory layout is the GPU's: no CUDA device here")
def test_a_relayout_moves_the_next_steps_tensors():
    from perfgate.measure.layout import Relayout

    device = torch.device("cuda")
    relayout, seen = Relayout(device), set()
    for _ in range(4):
        relayout()
        seen.add(torch.empty(64 << 20, dtype=torch.uint8, device=device).data_ptr())
    assert len(seen) > 1


def test_clock_speedup_pairs_rounds():
    rounds = Rounds([10.0, 10.2, 9.9, 10.1, 10.0], [5.0, 5.0, 5.0, 5.1, 5.0], 3)
    interval = rounds.speedup()
    assert interval.median == pytest.approx(2.0)
    assert interval.lo <= interval.median <= interval.hi


def test_bound_of_busy_fraction():
    assert bound_of(0.61) == "host"
    assert bound_of(0.97) == "device"
    assert bound_of(None) is None


def test_cpu_clocks_fill_host_and_say_why_device_is_absent():
    record = new_record(Cell("m", "train", "inductor_default", "fp32", "cpu"), {})
    slow = lambda _i: sum(range(20_000))  # noqa: E731 - a step with host work
    fast = lambda _i: sum(range(2_000))  # noqa: E731
    record_builder.merge_device_clock(record, clocks.measure_device(slow, fast, torch.device("cpu")))
    record_builder.merge_clock(record, HOST, clocks.measure_host(slow, fast, torch.device("cpu"), seconds=60.0))
    assert record["host_speedup"] > 2
    assert len(record["eager_host_round_ms"]) == clocks.HOST_MIN_ROUNDS  # the CPU keeps the minimum
    assert record["device_speedup"] is None and record["busy_compiled"] is None and record["bound"] is None
    assert "no CUDA device" in record["clocks_note"]


def test_host_rounds_stop_at_their_time_budget_but_never_below_the_minimum():
    step = lambda _i: None  # noqa: E731 - a step with no work: a round takes microseconds
    assert len(clocks.host_rounds(step, step, torch.device("cpu"), rounds=41).compiled_ms) == 41
    assert (
        len(clocks.host_rounds(step, step, torch.device("cpu"), rounds=41, seconds=0.0).compiled_ms)
        == clocks.HOST_MIN_ROUNDS
    )
    assert len(clocks.host_rounds(step, step, torch.device("cpu"), rounds=3, seconds=0.0).compiled_ms) == 3


@pytest.mark.parametrize("text, kind, arg", [("device_slow", "device_slow", 3.0), ("host_slow:20", "host_slow", 20.0)])
def test_clock_faults_parse_with_defaults(text, kind, arg):
    assert fault.parse(text) == fault.Fault(kind, arg)


@pytest.mark.parametrize("text", ["host_slow:nan", "device_slow:-3", "host_slow:inf"])
def test_clock_faults_refuse_bad_percentages(text):
    with pytest.raises(ValueError, match="finite number"):
        fault.parse(text)


def test_host_slow_busy_waits_a_share_of_the_calibrated_host_time():
    step = lambda _i: None  # noqa: E731
    slowed = faults.slowed(step, fault.Fault("host_slow", 50.0), torch.device("cpu"), lambda clock: 20.0)
    assert clocks.issue_ms(slowed, 0, torch.device("cpu")) >= 10.0 - 0.5
    untouched = faults.slowed(step, None, torch.device("cpu"), lambda clock: 20.0)
    assert untouched is step


@pytest.mark.parametrize(
    "planted, device, clock",
    [("device_slow:1.5", "cuda", "device"), ("device_slow:1.5", "cpu", "host"), ("host_slow:15", "cpu", "host")],
)
def test_a_sized_faults_shadow_measures_as_it_does_and_plants_nothing(monkeypatch, planted, device, clock):
    """Side A of a planted pair runs the fault's shadow: B's device_slow ran a profiler session to size itself
    and A none, so the two processes' histories differed by more than the plant (gpt2 train's wall +6-8 % for a
    0.34 ms spin on 22.6 ms, H200s 2026-11-29)."""
    step = lambda _i: None  # noqa: E731
    asked: list[str] = []
    spins: list[str] = []
    monkeypatch.setattr(faults, "cycles_per_ms", lambda: spins.append("calibrated") or 1.0e6)
    shadow = fault.parse(planted).shadow()
    assert shadow is not None and shadow.kind == "shadow_" + planted.split(":")[0]
    assert faults.slowed(step, shadow, torch.device(device), lambda c: asked.append(c) or 20.0) is step
    assert asked == [clock] and spins == (["calibrated"] if device == "cuda" else [])  # as the fault measures
    assert fault.parse("graph_break").shadow() is None and fault.parse("numerics").shadow() is None


def test_a_shadow_never_fails_where_its_fault_would_plant_too_short_a_spin(monkeypatch):
    """Sized on A's own step, a shadow can come in under the spin the device clock tells from its markers where
    B's plant did not: it plants nothing, so it must not fail A (a planted pair would read unsure). A slow:MS
    fault's shadow times the spin's cycle rate, as its fault does on a GPU."""
    step = lambda _i: None  # noqa: E731
    spins: list[str] = []
    monkeypatch.setattr(faults, "cycles_per_ms", lambda: spins.append("calibrated") or 1.0e6)
    shadow = fault.Fault("device_slow", 3.0).shadow()
    assert faults.slowed(step, shadow, torch.device("cuda"), lambda clock: 1.0) is step  # 30 us: under the 40
    assert faults.slowed(step, fault.parse("slow:1").shadow(), torch.device("cuda"), lambda clock: 1.0) is step
    assert spins == ["calibrated", "calibrated"]


def test_an_engine_before_shadows_plants_nothing_for_one():
    """A base revision's engine, handed a shadow it does not know, must not plant or fail: slowed's kinds
    are a closed list, and an unknown kind leaves the step as it was."""
    step = lambda _i: None  # noqa: E731
    unknown = fault.Fault("shadow_of_something_newer", 1.0)
    assert faults.slowed(step, unknown, torch.device("cpu"), lambda clock: 20.0) is step


def test_the_device_clocks_seconds_are_its_steps_of_both_sides():
    """The host clock runs first and leaves the device clock what it will take: 5 rounds of 3 steps (a stream
    of 8: one pass of 8) of each side, as profiled steps, and the profiler's own start and teardown."""
    steps_s = 5 * 3 * 30.0 / 1e3
    assert clocks.device_seconds(20.0, 10.0) == pytest.approx(clocks.PROFILER_S + clocks.PROFILED_STEP * steps_s)
    steps_s = 5 * 8 * 220.0 / 1e3
    assert clocks.device_seconds(130.0, 90.0, stream=8) == pytest.approx(
        clocks.PROFILER_S + clocks.PROFILED_STEP * steps_s
    )


def test_every_profiler_session_detaches_cupti_unless_the_environment_says_otherwise(monkeypatch):
    """Kineto leaves CUPTI attached unless TEARDOWN_CUPTI=1, and the wall rounds after a session would run
    slower for it (perfgate.measure.env.detach_cupti); a user's or torch's own setting is kept."""
    from perfgate.measure import counts

    monkeypatch.setenv("TEARDOWN_CUPTI", "0")
    monkeypatch.delenv("TEARDOWN_CUPTI")  # absent here, and restored after (a delenv of an absent one would not be)
    counts.profiled(lambda _i: torch.ones(2) * 2, 1, torch.device("cpu"))
    assert os.environ["TEARDOWN_CUPTI"] == "1"
    monkeypatch.setenv("TEARDOWN_CUPTI", "0")  # torch's, for CUDA graphs on a CUDA that cannot take CUPTI again
    with clocks.profiler([torch.profiler.ProfilerActivity.CPU]):
        pass
    assert os.environ["TEARDOWN_CUPTI"] == "0"
