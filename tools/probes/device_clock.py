"""Does the device clock that profiles the GPU alone (markers between rounds) read what the one that recorded
the host's operators too (labelled ranges) read, and what does each cost? Runs pytest in this process with
the cell's clocks instrumented: after the production clocks (host, then the GPU-only device clock), each cell
takes 11 host rounds, the old labelled device clock (its stages timed), 11 host rounds again and the new
device clock again; one JSON line a cell into OUT.

  python tools/probes/device_clock.py OUT.jsonl PYTEST_ARGS...

Where the old clock's after-effect on the host clock shows: host rounds after it against those after the new.
"""

from __future__ import annotations

import json
import statistics
import sys
import time


def old_device_rounds(eager, compiled, device, stream, rounds=5):
    """The device clock as it was at ae37314: CPU and CUDA activity, a labelled range a round; its stages
    timed (s)."""
    import bisect

    import torch
    from torch.profiler import ProfilerActivity, profile, record_function

    from perfgate.measure.clocks import DEVICE_STEPS, GPU_ACTIVITIES, LABEL, _activity, union_ns, whole_passes

    steps = whole_passes(DEVICE_STEPS, stream)
    order = [("eager", eager), ("compiled", compiled)]
    parts = {}
    t = time.perf_counter()
    torch.cuda.synchronize(device)
    prof = profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
    prof.__enter__()
    parts["enter"], t = time.perf_counter() - t, time.perf_counter()
    for index in range(rounds):
        for name, fn in order if index % 2 == 0 else reversed(order):
            with record_function(f"{LABEL}:{name}:{index}"):
                for i in range(steps):
                    fn(i)
                torch.cuda.synchronize(device)
    parts["steps"], t = time.perf_counter() - t, time.perf_counter()
    prof.__exit__(None, None, None)
    parts["exit"], t = time.perf_counter() - t, time.perf_counter()
    events = prof.profiler.kineto_results.events()
    parts["events"], t = time.perf_counter() - t, time.perf_counter()
    ranges, intervals = {}, []
    for event in events:
        if _activity(event) in GPU_ACTIVITIES:
            intervals.append((event.start_ns(), event.end_ns()))
        elif event.name().startswith(LABEL) and event.device_type() != torch.autograd.DeviceType.CUDA:
            ranges[event.name()] = (event.start_ns(), event.end_ns())
    intervals.sort()
    starts = [s for s, _ in intervals]
    busy = {}
    for label, (lo, hi) in ranges.items():
        busy[label] = union_ns(intervals[bisect.bisect_left(starts, lo) : bisect.bisect_right(starts, hi)]) / 1e6
    parts["process"] = time.perf_counter() - t
    parts["n_events"] = len(events)
    ms = {side: [busy[f"{LABEL}:{side}:{i}"] / steps for i in range(rounds)] for side in ("eager", "compiled")}
    return ms, parts


def summary(ms: dict) -> dict:
    return {
        "eager_ms": round(statistics.median(ms["eager"]), 4),
        "compiled_ms": round(statistics.median(ms["compiled"]), 4),
        "speedup": round(statistics.median(e / c for e, c in zip(ms["eager"], ms["compiled"])), 4),
    }


def instrument(out_path: str) -> None:
    from perfgate.measure import cell, clocks

    real = cell._clocks

    def probed(run, timing_s):
        stream = len(run.timed)
        real(run, timing_s)
        host_s = run.clock.seconds.get("host_clock", 0.0)
        device_s = time.perf_counter() - run.clock.since
        rec = run.record
        line = {
            "id": run.id,
            "timing_s": round(timing_s, 3),
            "host_s": round(host_s, 3),
            "device_s": round(device_s, 3),
            "device_estimate_s": round(clocks.device_seconds(rec["eager_ms"], rec["compiled_ms"], stream), 3),
            "host_rounds": len(rec.get("eager_host_round_ms") or []),
            "new": {k: rec.get(f"{k.split('_')[0]}_device_ms") for k in ("eager_ms", "compiled_ms")}
            | {"speedup": rec.get("device_speedup"), "note": rec.get("clocks_note")},
            "host": {"eager_ms": rec.get("eager_host_ms"), "compiled_ms": rec.get("compiled_host_ms")},
        }
        args = (run.eager_step, run.compiled_step, run.device, stream)
        try:
            h = clocks.host_rounds(*args, rounds=11, min_rounds=11)
            line["host_after_new"] = summary({"eager": h.eager_ms, "compiled": h.compiled_ms})
            t = time.perf_counter()
            ms, parts = old_device_rounds(*args)
            line["old"] = (
                summary(ms) | {"s": round(time.perf_counter() - t, 3)} | {k: round(v, 3) for k, v in parts.items()}
            )
            h = clocks.host_rounds(*args, rounds=11, min_rounds=11)
            line["host_after_old"] = summary({"eager": h.eager_ms, "compiled": h.compiled_ms})
            t = time.perf_counter()
            r = clocks.device_rounds(*args)
            line["new2"] = summary({"eager": r.eager_ms, "compiled": r.compiled_ms}) | {
                "s": round(time.perf_counter() - t, 3)
            }
        except Exception as err:  # noqa: BLE001 - a probe's failure is its finding
            line["error"] = f"{type(err).__name__}: {err}"
        with open(out_path, "a") as sink:
            sink.write(json.dumps(line) + "\n")
        run.clock.enter("device_clock")  # the probe's own seconds stay out of the host clock's stage

    cell._clocks = probed


if __name__ == "__main__":
    import pytest

    instrument(sys.argv[1])
    sys.exit(pytest.main(sys.argv[2:]))
