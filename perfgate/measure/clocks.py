"""The device and host clocks of a step, measured apart from the timed (wall) rounds.

The wall clock (CUDA events around back-to-back steps, perfgate.measure.timing) counts every stall of the host: a
compiled training step that takes the host as long to issue as the GPU to run (resnet50 train on an H100
lease: 39.4 ms of host time for 24.2 ms of kernels) moves with the host CPU of the machine. Two more clocks
separate the two:

- device ms per step: the union of the step's GPU activity intervals (kernels, memcpy, memset) as CUPTI
  reports them through torch.profiler. The union, not the sum: kernels that overlap on several streams
  count once, so busy time can never exceed the wall. Profiled steps are never timed steps, so the
  profiler's host overhead stays out of the wall figures.
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

import bisect
import statistics
import time
from typing import Callable

import torch
from torch.profiler import ProfilerActivity, profile, record_function

from perfgate.core.record import bound_of, error_line
from perfgate.measure.timing import Rounds

# Rounds of each clock. Device time repeated to 0.1 % between rounds on an H100 (resnet50 train compiled:
# 24.17-24.20 ms), so few rounds give a narrow interval; host time has the host's stalls (single steps of
# the same compiled step: 28.9-73.6 ms), hence more rounds of single steps and the minimum within a round.
DEVICE_ROUNDS = 5
DEVICE_STEPS = 3  # steps per profiled round (a stream model: one pass over its batches)
# Host rounds. One round's eager/compiled ratio moved 5-25 % (sd) on H100 leases, and the host speedup's
# spread between processes matched its in-run error (ratio 0.5-1.5 on 10 of 12 PR cells, 2026-11-23/24):
# the spread was the rounds' sampling noise, so more rounds narrow it (41 halve the error of 11). But a host
# round is 5 single steps of each side, each from an idle GPU, and 41 of them cost twice a cell's timed rounds
# (gpt2 train, H100, 2026-11-25: clocks 19 s, timed rounds 8 s). So the host clock gets the seconds the timed
# rounds took less what the device clock took (schema 8 on), never fewer than HOST_MIN_ROUNDS rounds nor more
# than HOST_ROUNDS: its per-round figure is unchanged (older baselines stay comparable), its interval wider
# where fewer rounds fit, and the gate's host line widens with it. The CPU tier keeps the minimum: its host
# figure proves the engine, not a gate, and CI's minutes are few.
HOST_MIN_ROUNDS = 11
HOST_ROUNDS = 41
HOST_STEPS = 5  # single steps per host round; the round's figure is the fastest
GPU_ACTIVITIES = frozenset({"kernel", "gpu_memcpy", "gpu_memset"})
LABEL = "perfgate-clock"


def device_rounds(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    rounds: int = DEVICE_ROUNDS,
) -> Rounds:
    """GPU busy ms per step of each side, over `rounds` interleaved profiled rounds in one profiler session
    (one CUPTI start and teardown per cell)."""
    events, steps = profiled_rounds(eager, compiled, device, stream, rounds)
    busy = busy_ms_by_range(events, round_labels(rounds))
    return Rounds(
        [busy[f"{LABEL}:eager:{i}"] / steps for i in range(rounds)],
        [busy[f"{LABEL}:compiled:{i}"] / steps for i in range(rounds)],
        steps,
    )


def device_seconds(eager_ms: float, compiled_ms: float, stream: int = 1, rounds: int = DEVICE_ROUNDS) -> float:
    """The seconds the device clock's steps take, from the timed ms per step of each side (its profiler's
    start and teardown not counted): what the host clock, which runs first, leaves it."""
    return rounds * whole_passes(DEVICE_STEPS, stream) * (eager_ms + compiled_ms) / 1e3


def whole_passes(steps: int, stream: int = 1) -> int:
    """At least `steps` steps, as a whole number of passes over a stream's batches (a round of each clock)."""
    return stream * max(1, -(-steps // stream))


def round_labels(rounds: int) -> list[str]:
    """The labelled host ranges of profiled_rounds, eager's and compiled's of each round."""
    return [f"{LABEL}:{side}:{i}" for i in range(rounds) for side in ("eager", "compiled")]


def profiled_rounds(
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    rounds: int = DEVICE_ROUNDS,
) -> tuple[list, int]:
    """(the profiler's events, steps per round) of `rounds` interleaved rounds of each side under one
    profiler. Each round is a range labelled round_labels' way that ends in a synchronize, so every kernel
    it launched starts and ends inside it; kernels are assigned to rounds by their start time."""
    steps = whole_passes(DEVICE_STEPS, stream)
    order = [("eager", eager), ("compiled", compiled)]
    torch.cuda.synchronize(device)
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for index in range(rounds):
            for name, fn in order if index % 2 == 0 else reversed(order):
                with record_function(f"{LABEL}:{name}:{index}"):
                    for i in range(steps):
                        fn(i)
                    torch.cuda.synchronize(device)
    return prof.profiler.kineto_results.events(), steps


def busy_ms_by_range(events, labels: list[str]) -> dict[str, float]:
    """{label: ms the GPU was busy inside that labelled host range}."""
    return {
        label: union_ns([(start, end) for start, end, _ in inside]) / 1e6
        for label, inside in gpu_work_by_range(events, labels).items()
    }


def gpu_work_by_range(events, labels: list[str]) -> dict[str, list[tuple[int, int, str]]]:
    """{label: [(start ns, end ns, name)] of the GPU activity (kernels, memcpy, memset) that started inside
    that labelled host range, sorted}. Raises if a range saw no GPU work (the profiler missed the kernels,
    e.g. CUPTI unavailable): a zero would read as an infinitely fast side."""
    ranges, intervals, wanted = {}, [], set(labels)
    for event in events:
        if _activity(event) in GPU_ACTIVITIES:
            intervals.append((event.start_ns(), event.end_ns(), event.name()))
        elif event.name() in wanted and not _on_gpu(event):
            ranges[event.name()] = (event.start_ns(), event.end_ns())
    missing = [label for label in labels if label not in ranges]
    if missing:
        raise RuntimeError(f"the profiler recorded no range for {missing[0]}")
    intervals.sort()
    starts = [start for start, _, _ in intervals]
    work = {}
    for label in labels:
        lo, hi = ranges[label]
        work[label] = intervals[bisect.bisect_left(starts, lo) : bisect.bisect_right(starts, hi)]
        if not work[label]:
            raise RuntimeError(f"the profiler recorded no GPU activity in {label}")
    return work


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
    record: dict,
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
) -> None:
    """Fill the record's device clock, busy fractions and bound. A device clock that cannot be read (no CUDA,
    a profiler error) leaves its fields null and says why in clocks_note."""
    if device.type != "cuda":
        record["clocks_note"] = NO_DEVICE_CLOCK
        return
    try:
        rounds = device_rounds(eager, compiled, device, stream)
    except Exception as err:  # noqa: BLE001 - a profiler failure costs the device clock, not the cell
        record["clocks_note"] = f"device clock failed: {error_line(err)}"
        return
    store_clock(record, "device", rounds)
    for side in ("eager", "compiled"):
        record[f"busy_{side}"] = round(record[f"{side}_device_ms"] / record[f"{side}_ms"], 4)
    record["bound_eager"], record["bound"] = bound_of(record["busy_eager"]), bound_of(record["busy_compiled"])


def measure_host(
    record: dict,
    eager: Callable[[int], object],
    compiled: Callable[[int], object],
    device: torch.device,
    stream: int = 1,
    seconds: float = 0.0,
) -> None:
    """Fill the record's host clock: rounds within `seconds` (a GPU cell's budget: see HOST_ROUNDS), never
    fewer than HOST_MIN_ROUNDS; the CPU tier takes the minimum."""
    on_gpu = device.type == "cuda"
    store_clock(
        record,
        "host",
        host_rounds(
            eager, compiled, device, stream, rounds=HOST_ROUNDS if on_gpu else HOST_MIN_ROUNDS, seconds=seconds
        ),
    )


def store_clock(record: dict, clock: str, rounds: Rounds) -> None:
    """A clock's round ms, medians and speedup interval as the record's {side}_{clock}_... fields."""
    interval = rounds.speedup()
    record.update(
        {
            f"eager_{clock}_round_ms": [round(x, 4) for x in rounds.eager_ms],
            f"compiled_{clock}_round_ms": [round(x, 4) for x in rounds.compiled_ms],
            f"eager_{clock}_ms": round(statistics.median(rounds.eager_ms), 4),
            f"compiled_{clock}_ms": round(statistics.median(rounds.compiled_ms), 4),
            f"{clock}_speedup": round(interval.median, 4),
            f"{clock}_speedup_lo": round(interval.lo, 4),
            f"{clock}_speedup_hi": round(interval.hi, 4),
        }
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
