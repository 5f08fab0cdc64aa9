"""Run one cell on one device, as a sequence of stages (perfgate.measure.pipeline): build, reference, eager's
numerics steps and warm-up, the first compiled call, numerics, the compiled side's warm-up, the timed rounds,
the device and host clocks, what else a record carries, and the compile again with warm caches.

The engine knows no model: everything model-specific comes from the ModelSpec. A cell never raises: a failure
becomes status "failed" with a reason, and whatever was measured before it stays in the record. A
data-parallel cell runs its ranks as processes of their own (perfgate.measure.ddp).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable

import torch

from perfgate.core.clocks import HOST
from perfgate.core.job import RunOptions
from perfgate.core.matrix import VARIANTS, Cell
from perfgate.measure import cache_artifacts, clocks, introspect, neighbours, record_builder, reference, why
from perfgate.measure import counts as step_counts
from perfgate.measure.compile_cache import cache_kind, compile_cache
from perfgate.measure.datasheet import datasheet_tflops
from perfgate.measure.host_speed import HostSpeed
from perfgate.measure.pipeline import (
    CellRun,
    StageClock,
    announcer,
    build_eager,
    capture_eager,
    first_compiled_call,
    guarded,
    judge_numerics,
    load_reference,
    prepare,
    raise_if_wrong,
    start_record,
    timed_rounds,
    warm_compiled,
    warm_eager,
)
from perfgate.measure.steps import Side, build_model, compiled_side, sync


def run_cell(
    spec,
    cell: Cell,
    options: RunOptions,
    env: dict,
    progress: Callable[[str], None] = lambda _msg: None,
    record_compiled: Callable[[float], None] | None = None,
    checkpoint: Callable[[dict], None] | None = None,
    process: str = "pytest",
    serve: Callable | None = None,
    hold: Callable[[str], None] | None = None,
) -> dict:
    """Measure one cell and return its record. `checkpoint`, if given, receives the record as it stands at
    each stage (status "failed", reason "did not finish ..."): a process killed mid-cell (a CI timeout, a
    hung compile) then leaves what it had measured, and the final record supersedes it. `process`: where
    this runs (perfgate.core.record.PROCESSES), which the record keeps. `serve(run, eager_ms, compiled_ms)`: a
    paired comparison's side (perfgate.measure.duet), which serves its timed rounds to the coordinator and
    returns them (wall, host, device or None), or None to time the cell as usual. `hold(point)`: a paired side
    whose first compiled call takes its turn (perfgate.measure.duet), waited on at "compile" (before that call)
    and, for a cell of one timed batch, at "compiled" (after it); a stream's later shapes compile in its
    warm-up, so its turn lasts to its warm state."""
    if cell.phase == "ddp":  # its ranks are processes of their own
        from perfgate.measure import ddp

        return ddp.run(spec, cell, options, env, progress, record_compiled, checkpoint)
    record = start_record(spec, cell, env, process)
    clock = StageClock(record)
    clock.announce = announcer(progress, checkpoint, record, lambda: clock)
    device = torch.device(options.device)
    run = CellRun(spec, cell, options, record, clock, device)
    saved: list[bytes | None] = [None]  # this cell's cache artifacts, where --perf-warm-compile artifacts saves

    def stages() -> None:
        why_dir = Path(options.profile_dir) / cell.id if options.profile_dir else None
        record_builder.merge_compile_cache(record, cache_kind(options.cache_dir))
        with (
            compile_cache(options.cache_dir, cell.precision),
            why.compile_logs(why_dir and why_dir / "compile.log"),
            cache_artifacts.fresh_recording(),
        ):
            saved[0] = _measure(run, record_compiled, why_dir, serve, hold)

    guarded(record, clock, stages)
    if saved[0] is not None:  # after clean-up: this process's models are freed while the child builds its own
        clock.enter(
            "artifacts", f"{cell.id}: compiling from {len(saved[0])} bytes of cache artifacts in a fresh process"
        )
        # never raises: a note says what failed
        compiled = cache_artifacts.measure_in_child(saved[0], cell, options, tf32=bool(env.get("tf32")))
        record_builder.merge_cache_artifacts(record, compiled)
        clock.stop()
    return record


def _measure(
    run: CellRun, record_compiled, why_dir: Path | None, serve: Callable | None = None, hold: Callable | None = None
) -> bytes | None:
    """The single-device stages into run.record; returns the saved cache artifacts when the options ask."""
    spec, cell, options, record, device = run.spec, run.cell, run.options, run.record, run.device
    prepare(run)
    key = reference.key(spec, cell, run.size, options.seed, run.host_batches[:2], device)
    load_reference(run, lambda: reference.compute(spec, cell, run.size, run.state, run.host_batches[:2], device), key)
    build_eager(
        run, lambda r: Side(spec, build_model(spec, r.size, r.state, device), cell.phase, cell.precision, device)
    )
    capture_eager(run)
    warm_eager(run)
    record_builder.merge_peak(record, "eager", run.memory.peak_mb())
    _held(run, hold, "compile")
    first_compiled_call(
        run,
        lambda r: compiled_side(spec, cell, r.size, r.state, device, options.fault),
        f"{cell.id}: compiling ({cell.variant})",
    )
    if len(run.timed) == 1:  # every kernel has run once, its launch configs picked
        _held(run, hold, "compiled")
    judge_numerics(run)
    eager_ms, compiled_ms = warm_compiled(run)

    watch = neighbours.Watch() if device.type == "cuda" else None  # other processes on the GPU, around the clocks
    host = HostSpeed()  # how fast the host ran around the timed rounds and the clocks (~20 ms a probe)
    if watch:
        watch.sample()
    host.sample()
    started = time.perf_counter()
    if serve is not None:
        run.clock.enter("timing", f"{cell.id}: ready; serving paired rounds")
        served = serve(run, eager_ms, compiled_ms)
    if serve is None or served is None:
        timed_rounds(run, min(eager_ms, compiled_ms), record_compiled)
        _clocks(run, time.perf_counter() - started)
    else:
        _store_served(run, *served)
    host.sample()
    record_builder.merge_host_speed(record, host.result())
    # Stage "counts": a few steps a side counted, after the clocks (perfgate.measure.counts).
    record_builder.merge_counts(record, step_counts.measure(run))

    run.clock.enter("extras", f"{cell.id}: {clocks.summary(record)}, compile {record['compile_s']:.1f} s")
    if watch:
        watch.sample()
        record_builder.merge_neighbours(record, watch.found, neighbours.unfit_reason(watch.found))
    counts = introspect.compile_counts()
    record_builder.merge_recompiles(record, counts["frames"] - run.first_counts["frames"], counts["recompile_reasons"])
    record_builder.merge_scaler_skips(record, run.eager.scaler_skips(), run.compiled.scaler_skips())
    store_throughput(spec, run.size, cell, record, lambda: run.eager_step(0), device)
    if why_dir is not None:
        record_builder.merge_why(
            record,
            str(why_dir),
            str(why_dir / "compile.log"),
            str(why.trace(run.eager_step, why_dir / "trace-eager.json", device)),
            str(why.trace(run.compiled_step, why_dir / "trace-compiled.json", device)),
        )
    saved = None
    if options.warm_compile == "artifacts":  # before the warm compile below: what the cold compile left
        artifacts = cache_artifacts.save()
        record_builder.merge_saved_artifacts(record, artifacts)
        saved = artifacts.data
    if options.warm_compile != "off":
        _warm_compile(run)
    raise_if_wrong(record, numerics_judged=options.numerics)
    return saved


def _held(run: CellRun, hold: Callable[[str], None] | None, point: str) -> None:
    """Stage "held": wait for the coordinator's word at `point`, which gives each side's first compiled call the
    GPU to itself in turn (perfgate.ab.pair_prepare)."""
    if hold is None:
        return
    run.clock.enter("held", f"{run.id}: held at {point!r} for its turn")
    hold(point)


def _clocks(run: CellRun, timing_s: float) -> None:
    """Stages "host_clock" then "device_clock": together they take about what the timed rounds took (the host
    clock gets what the device clock will leave of that, clocks.device_seconds, never fewer than
    clocks.HOST_MIN_ROUNDS rounds). The host clock goes first, before the cell's own profiler session, as it
    did before the rebuild: taken after a profiler session that recorded the host's operators, the same code
    read host times 25-33 % longer (gpt2 infer, H100, lease AW, 2026-11-25: eager 11.24 against 8.42 ms,
    compiled 4.63 against 3.70 ms)."""
    stream = len(run.timed)
    run.clock.enter("host_clock", f"{run.id}: host clock")
    device_s = clocks.device_seconds(run.record["eager_ms"], run.record["compiled_ms"], stream)
    host = clocks.measure_host(run.eager_step, run.compiled_step, run.device, stream, seconds=timing_s - device_s)
    record_builder.merge_clock(run.record, HOST, host)
    run.clock.enter("device_clock", f"{run.id}: device clock")
    on_device = clocks.measure_device(run.eager_step, run.compiled_step, run.device, stream)
    record_builder.merge_device_clock(run.record, on_device)


def _store_served(run: CellRun, wall, host, on_device) -> None:
    """A paired side's clocks from the rounds it served: the same fields its own rounds would have filled."""
    record_builder.merge_timing(run.record, wall)
    record_builder.merge_clock(run.record, HOST, host)
    if on_device is None:
        note = clocks.NO_DEVICE_CLOCK if run.device.type != "cuda" else "device clock failed"
        record_builder.merge_device_clock(run.record, record_builder.DeviceClock(None, note))
    else:
        record_builder.merge_device_clock(run.record, record_builder.DeviceClock(on_device))


def store_throughput(spec, size, cell, record: dict, eager_step, device) -> None:
    """Stage "extras": each side's throughput, then an eager step's FLOPs and each side's MFU."""
    record_builder.merge_throughput(record, spec.unit, size.batch * size.units_per_sample)
    flops = introspect.flops_per_step(eager_step)
    rate = datasheet_tflops(record["env"].get("gpu"), cell.precision, record["env"].get("tf32"))
    record_builder.merge_flops(record, flops, rate)


def _warm_compile(run: CellRun) -> None:
    """Stage "warm_compile": the same compile again in a fresh dynamo with the on-disk caches (FX graph,
    AOTAutograd, autotune) warm and the in-memory ones cleared: what the next process on this machine pays.
    Where the first call already found every lookup in a kept cache, it was that warm compile: its time is
    the figure, and the cell saves the seconds (3-10 s a cell on an H100)."""
    record = run.record
    if record["compile_cache_hits"] and not record["compile_cache_misses"]:
        record_builder.merge_warm_compile(record, record["compile_s"])
        return
    from torch._inductor.utils import clear_caches

    run.clock.enter("warm_compile", f"{run.id}: compiling again with warm caches")
    introspect.reset_compiler()
    clear_caches()
    run.compiled.compile(VARIANTS[run.cell.variant], run.options.fault)
    t0 = time.perf_counter()
    run.compiled.step(run.batches[0])
    sync(run.device)
    record_builder.merge_warm_compile(record, time.perf_counter() - t0)
