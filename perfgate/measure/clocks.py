"""The device and host clocks of a step, measured apart from the timed (wall) rounds.

The wall clock (CUDA events around back-to-back steps, perfgate.measure.timing) counts every stall of the host: a
compiled training step that takes the host as long to issue as the GPU to run (resnet50 train on an H100
lease: 39.4 ms of host time for 24.2 ms of kernels) moves with the host CPU of the machine. Two more clocks
separate the two:

- device ms per step: the union of the step's GPU activity intervals (kernels, memcpy, memset) as CUPTI
  reports them through torch.profiler, recording the GPU alone. The union, not the sum: kernels that overlap
  on several streams count once, so busy time can never exceed the wall. Profiled steps are never timed
  steps, so the profiler's host overhead stays out of the wall figures.
- host ms per step: the host clock from a synchronized, idle device to the step call's return. The GPU
  starts each step empty, so the host never waits on a full launch queue; a step that synchronizes inside
  (a .item(), GradScaler's inf check) does wait, and that wait is the step's own. A round's figure is the
  fastest of a few single steps: stalls of the host (seen on an H100 lease: one resnet50 train step took
  73.6 ms to issue where its neighbours took 29-39) only ever add, so the minimum is the step's own cost
  and the median of such minima over rounds is what a change to guards or Python work moves.

Both are measured in rounds that alternate eager and compiled, like the wall rounds, so each gives a
speedup with an interval. Imports torch (measuring side).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from typing import Callable, Iterator

import torch
from torch.profiler import ProfilerActivity, profile

from perfgate.core.record import error_line
from perfgate.measure.env import detach_cupti
from perfgate.measure.record_builder import DeviceClock
from perfgate.measure.timing import Rounds

# Rounds of each clock. Device time repeated to 0.1 % between rounds on an H100 (resnet50 train compiled:
# 24.17-24.20 ms), so few rounds give a narrow interval; host time has the host's stalls (single steps of
# the same compiled step: 28.9-73.6 ms), hence more rounds of single steps and the minimum within a round.
DEVICE_ROUNDS = 5
DEVICE_STEPS = 3  # steps per profiled round (a stream model: one pass over its batches)
# Host rounds. One round's eager/compiled ratio moved 5-25 % (sd) on H100 leases, and the host speedup's
# spread between processes matched its in-run error (ratio 0.5-1.5 on 10 of 12 PR cells, 2026-11-23/24):
# the spread was the rounds' sampling noise, so more rounds narrow it (41 halve the error of 11). But a host
# round is 5 single steps of each side, each from an idle GPU, and its floor of 11 rounds made the two clocks
# 1.7x the timed rounds over the PR tier (H100, 2026-11-26: 128 s against 76 s; upernet train 11.4 s of
# clocks for 2.0 s of timing). So the two clocks together get the seconds the timed rounds took: the host
# clock what the device clock will leave of them (device_seconds), never fewer than HOST_MIN_ROUNDS rounds nor
# more than HOST_ROUNDS. Its per-round figure is unchanged (older baselines stay comparable), its interval
# wider where fewer rounds fit, and the gate's host line widens with it: the host rule gives up power on
# cells whose timed rounds are short, the device rule none. The CPU tier keeps the minimum: its host figure
# proves the engine, not a gate, and CI's minutes are few.
HOST_MIN_ROUNDS = 5
HOST_ROUNDS = 41
HOST_STEPS = 5  # single steps per host round; the round's figure is the fastest
GPU_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LABEL = "perfgate-clock"
GAP = "perfgate-gap"  # profiled_rounds' spans between rounds (their work is no round's)
SIDES = ("eager", "compiled")
# A round's bounds on the GPU's timeline: torch.cuda._sleep's kernel, which no model launches, spinning
# MARK_CYCLES clock cycles (0.5 us at an H100's 1980 MHz, 3 us at its 345 MHz idle clock). The planted
# device_slow fault spins the same kernel inside the compiled step, for far longer (3 % of a 6.7 ms step:
# 200 us), and must count as the step's GPU time: a marker is a spin shorter than MARK_MAX_NS, and the fault
# refuses to plant a spin under twice that (faults.MIN_SPIN_MS).
MARKER = "spin_kernel"
MARK_CYCLES = 1000
MARK_MAX_NS = 20_000
# What the device clock costs beside its steps (device_seconds): PROFILER_S of CUPTI start and teardown, and
# its steps at PROFILED_STEP times their timed length (H100, 2026-11-26, the PR tier's 12 cells: 0.6 s for
# vit_b16 infer's 0.2 s of steps, 16.2 s for captioner train's 8.9 s).
PROFILER_S = 0.5
PROFILED_STEP = 1.5
# A side's kernels kept by name (kernel_ms): the PR tier's compiled steps launch 187-888 kernels a step
# (docs/measuring.md), many under one name; the dearest 40 names keep a record small and hold what a change
# that moves the device clock by a percent or more moves. Names are cut (a CUTLASS template's runs to ~300
# characters).
KERNELS_KEPT = 40
KERNEL_NAME_CHARS = 120
# The host clock's budget never falls below HOST_MIN_S: where a round is cheap (vit_b16 infer: 0.09 s), 1.5 s
# buys 16 rounds, not the 6 that its 1.8 s of timed rounds left it (its host line widened from 12 % to 25 %).
HOST_MIN_S = 1.5


def device_rounds(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    rounds: int = DEVICE_ROUNDS,
) -> Rounds:
    """GPU busy ms per step of each side, over `rounds` interleaved profiled rounds in one profiler session
    (one CUPTI start and teardown per cell)."""
    return device_block(eager, compiled, device, stream, rounds)[0]


def device_block(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    rounds: int = DEVICE_ROUNDS,
    before_round: Callable[[], object] | None = None,
) -> tuple[Rounds, dict[str, dict[str, float]]]:
    """device_rounds' Rounds, and where each side's GPU time went: {side: {kernel: ms per step}} (kernel_ms).
    `before_round`: run before each round, its GPU work outside every round (profiled_rounds)."""
    work, steps = profiled_rounds(eager, compiled, device, stream, rounds, before_round)
    busy = {label: union_ns([(start, end) for start, end, _ in inside]) / 1e6 for label, inside in work.items()}
    out = Rounds(
        [busy[f"{LABEL}:eager:{i}"] / steps for i in range(rounds)],
        [busy[f"{LABEL}:compiled:{i}"] / steps for i in range(rounds)],
        steps,
    )
    return out, kernel_ms(work, steps)


def kernel_ms(work: dict[str, list[tuple[int, int, str]]], steps: int, keep: int = KERNELS_KEPT) -> dict:
    """{side: {GPU activity name: ms per step}} of profiled rounds (work_between_markers' labels): each name's
    summed duration in a round, the median over the side's rounds, its `keep` dearest names. A paired cell's
    device change is then named by the kernels that moved, where the one figure says only that it moved."""
    per_round: dict[str, list[dict[str, float]]] = {side: [] for side in SIDES}
    for label, inside in work.items():
        totals: dict[str, float] = {}
        for start, end, name in inside:
            key = name[:KERNEL_NAME_CHARS]
            totals[key] = totals.get(key, 0.0) + (end - start) / 1e6 / steps
        per_round[label.split(":")[1]].append(totals)
    out = {}
    for side, tables in per_round.items():
        names = {name for table in tables for name in table}
        median = {name: statistics.median(table.get(name, 0.0) for table in tables) for name in names}
        dearest = sorted(median, key=median.__getitem__, reverse=True)[:keep]
        out[side] = {name: round(median[name], 5) for name in dearest}
    return out


def device_seconds(eager_ms: float, compiled_ms: float, stream: int = 1, rounds: int = DEVICE_ROUNDS) -> float:
    """The seconds the device clock is expected to take, from the timed ms per step of each side: its steps,
    plus what the profiler costs beside them (PROFILER_S, PROFILED_STEP)."""
    steps_s = rounds * whole_passes(DEVICE_STEPS, stream) * (eager_ms + compiled_ms) / 1e3
    return PROFILER_S + PROFILED_STEP * steps_s


def whole_passes(steps: int, stream: int = 1) -> int:
    """At least `steps` steps, as a whole number of passes over a stream's batches (a round of each clock)."""
    return stream * max(1, -(-steps // stream))


def round_labels(rounds: int) -> list[str]:
    """The profiled rounds' labels in the order profiled_rounds runs them: eager first in even rounds,
    compiled first in odd ones."""
    return [f"{LABEL}:{side}:{i}" for i in range(rounds) for side in (SIDES if i % 2 == 0 else tuple(reversed(SIDES)))]


@contextlib.contextmanager
def profiler(activities: list[ProfilerActivity]) -> Iterator[profile]:
    """A torch.profiler session that detaches CUPTI as it ends (perfgate.measure.env.detach_cupti): every
    profiler session of a measuring process opens here, so no wall round after one runs with CUPTI attached.
    CUPTI is finalized from a callback of a CUDA call after the session (NVIDIA's advice for cuptiFinalize), so
    one untimed launch here takes that cost, not the first step a clock times next."""
    detach_cupti()
    with profile(activities=activities) as prof:
        yield prof
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
        torch.cuda._sleep(1)
        torch.cuda.synchronize()


def profiled_rounds(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    rounds: int = DEVICE_ROUNDS,
    before_round: Callable[[], object] | None = None,
) -> tuple[dict[str, list[tuple[int, int, str]]], int]:
    """({round label: its GPU work, [(start ns, end ns, name)]}, steps per round) of `rounds` interleaved
    rounds of each side under one profiler that records the GPU alone. A marker kernel on the GPU's own
    timeline opens each round and closes the last (MARKER): a round ends in a synchronize, so its kernels
    all run between its marker and the next. Recording the host's operators too (the labelled ranges this
    clock used before) cost the profiler's teardown and event processing several seconds a cell
    (captioner train, H100, 2026-11-26: 21.5 s of device clock for ~8.5 s of steps). `before_round`, where given,
    runs before each round in a gap of its own (a GAP label between markers, whose work is dropped)."""
    steps = whole_passes(DEVICE_STEPS, stream)
    sides, labels = {"eager": eager, "compiled": compiled}, round_labels(rounds)
    spans = [x for label in labels for x in ((f"{GAP}:{label}", label) if before_round else (label,))]
    torch.cuda.synchronize(device)
    with torch.cuda.device(device), profiler([ProfilerActivity.CUDA]) as prof:  # markers go to `device`
        for span in spans:
            torch.cuda._sleep(MARK_CYCLES)
            if span.startswith(GAP):
                before_round()  # type: ignore[misc]
            else:
                fn = sides[span.split(":")[1]]
                for i in range(steps):
                    fn(i)
            torch.cuda.synchronize(device)
        torch.cuda._sleep(MARK_CYCLES)
        torch.cuda.synchronize(device)
    work = work_between_markers(prof.profiler.kineto_results.events(), spans)
    return {label: work[label] for label in labels}, steps


def work_between_markers(events, labels: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    """{label: [(start ns, end ns, name)] of the GPU activity (kernels, memcpy, memset) that started between
    the label's marker and the next}, `labels` in the order their rounds ran. Raises where the markers do not
    bound every round (the profiler missed kernels, or CUPTI is unavailable) or a round saw no GPU work: a
    zero would read as an infinitely fast side."""
    work = sorted(
        (event.start_ns(), event.end_ns(), event.name()) for event in events if _activity(event) in GPU_ACTIVITIES
    )
    markers = [i for i, (start, end, name) in enumerate(work) if MARKER in name and end - start < MARK_MAX_NS]
    if len(markers) != len(labels) + 1:
        raise RuntimeError(f"the profiler recorded {len(markers)} round markers for {len(labels)} rounds")
    out = {}
    for label, lo, hi in zip(labels, markers, markers[1:]):
        out[label] = work[lo + 1 : hi]
        if not out[label] and not label.startswith(GAP):  # a gap may run no GPU work
            raise RuntimeError(f"the profiler recorded no GPU activity in {label}")
    return out


def union_ns(intervals: list[tuple[int, int]]) -> int:
    """Total length covered by sorted (start, end) intervals: overlapping kernels count once."""
    total, cur_start, cur_end = 0, None, None
    for start, end in intervals:
        if cur_end is None or start > cur_end:
            if cur_end is not None:
                total += cur_end - cur_start
            cur_start, cur_end = start, end
        else:
            cur_end = max(cur_end, end)
    return total + (cur_end - cur_start if cur_end is not None else 0)


def _activity(event) -> str:
    # activity_type() names kineto's kinds ("kernel", "gpu_user_annotation", "cpu_op", ...); a torch
    # without it falls back to "any non-annotation event on the GPU".
    if hasattr(event, "activity_type"):
        return event.activity_type()
    return "kernel" if _on_gpu(event) and not event.is_user_annotation() else "other"


def _on_gpu(event) -> bool:
    return event.device_type() == torch.autograd.DeviceType.CUDA


def host_rounds(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    rounds: int = HOST_ROUNDS,
    seconds: float = float("inf"),
    min_rounds: int = HOST_MIN_ROUNDS,
) -> Rounds:
    """Host ms to issue one step, each side, over up to `rounds` interleaved rounds of single steps (fewer
    once `seconds` have passed, never fewer than `min_rounds`); a round's figure is its fastest step. A
    stream model's round covers each of its batches, whose lengths differ and so cost differently: there
    the round's median step stands in for its fastest."""
    steps = whole_passes(HOST_STEPS, stream)
    out = Rounds([], [], steps)
    order = [(eager, out.eager_ms), (compiled, out.compiled_ms)]
    started = time.perf_counter()
    for index in range(rounds):
        if index >= min_rounds and time.perf_counter() - started > seconds:
            break
        for fn, sink in order if index % 2 == 0 else reversed(order):
            times = [issue_ms(fn, i, device) for i in range(steps)]
            sink.append(min(times) if stream == 1 else statistics.median(times))
    return out


def issue_ms(step: Callable[[int], object], i: int, device: torch.device) -> float:
    """Host ms from an idle device to the return of `step(i)`; the device is drained again afterwards."""
    sync = device.type == "cuda"
    if sync:
        torch.cuda.synchronize(device)
    t0 = time.perf_counter()
    step(i)
    elapsed = (time.perf_counter() - t0) * 1e3
    if sync:
        torch.cuda.synchronize(device)
    return elapsed


def device_ms(step: Callable[[int], object], device: torch.device, stream: int = 1) -> float:
    """GPU busy ms per step of one side, from one profiled round (a planted fault's calibration)."""
    return device_rounds(step, step, device, stream, rounds=1).compiled_ms[0]


def host_ms(step: Callable[[int], object], device: torch.device, stream: int = 1) -> float:
    """Host ms to issue one step of one side: the median of two host rounds, each its fastest single step."""
    return statistics.median(host_rounds(step, step, device, stream, rounds=2, min_rounds=2).compiled_ms)


NO_DEVICE_CLOCK = (
    "no CUDA device: the device clock needs GPU kernel records; on the CPU the host runs the "
    "whole step, so host ms is the step's time"
)


def measure_device(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
) -> DeviceClock:
    """The device clock's rounds (the record's device clock, busy fractions and bound: merge_device_clock). A
    device clock that cannot be read (no CUDA, a profiler error) has none and a note that says why."""
    if device.type != "cuda":
        return DeviceClock(None, NO_DEVICE_CLOCK)
    try:
        return DeviceClock(device_rounds(eager, compiled, device, stream))
    except Exception as err:  # noqa: BLE001 - a profiler failure costs the device clock, not the cell
        return DeviceClock(None, f"device clock failed: {error_line(err)}")


def measure_host(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    seconds: float = 0.0,
) -> Rounds:
    """The host clock's rounds: within `seconds` (a GPU cell's budget: see HOST_ROUNDS), at least HOST_MIN_S
    of them and never fewer than HOST_MIN_ROUNDS; the CPU tier takes the minimum."""
    on_gpu = device.type == "cuda"
    return host_rounds(
        eager,
        compiled,
        device,
        stream,
        rounds=HOST_ROUNDS if on_gpu else HOST_MIN_ROUNDS,
        seconds=max(seconds, HOST_MIN_S),
    )


def summary(record: dict) -> str:
    """One progress line of a measured record's clocks."""
    text = f"wall speedup {record['speedup']:.3f}x [{record['speedup_lo']:.3f}, {record['speedup_hi']:.3f}]"
    if record["device_speedup"] is not None:
        text += (
            f", device {record['device_speedup']:.3f}x, compiled step {record['busy_compiled']:.0%} "
            f"GPU-busy ({record['bound']}-bound)"
        )
    return text
