"""The one place a cell's record (perfgate.core.record.FIELDS) has its fields set while it is measured: the stages
and probes compute and return small results, and the stage that ran them hands each to a function here named
for what it merges. So a field's rounding and units are written once, and a reader who wants to know where a
field comes from reads one module (a data-parallel rank's own fields: perfgate.measure.record_builder_ddp).
tests/test_layers.py fails on a write to a record anywhere else.

Every field already has its key from perfgate.core.record.new_record, so the order of the merges never moves a
key in the written JSON. Imports no torch: it only merges values.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from perfgate.core.clocks import DEVICE, WALL, Clock
from perfgate.core.record import UNFINISHED, bound_of

if TYPE_CHECKING:
    from perfgate.measure.timing import Rounds

SIDES = ("eager", "compiled")


# ---------------------------------------------------------------------------------------------- results


@dataclass(frozen=True)
class HostProbe:
    """The host probe's medians over a cell's probes, ms (perfgate.measure.host_speed)."""

    wall_ms: float
    cpu_ms: float


@dataclass(frozen=True)
class DeviceClock:
    """The device clock's profiled rounds, or None and the note that says why there are none
    (perfgate.measure.clocks.measure_device)."""

    rounds: Rounds | None
    note: str | None = None


@dataclass(frozen=True)
class StepCounts:
    """Stage "counts": each count's total over `steps` steps, by record field (None: its counter failed), and
    the counters' failures in one line (perfgate.measure.counts.measure)."""

    steps: int
    totals: dict[str, float | None]
    note: str


@dataclass(frozen=True)
class SavedArtifacts:
    """This cell's cache artifacts (perfgate.measure.cache_artifacts.save), or None and a note why."""

    data: bytes | None
    note: str | None = None


@dataclass(frozen=True)
class ArtifactsCompile:
    """The first compiled call in a fresh process from the cache artifacts (seconds, cache hits), and a note
    where it failed or compiled cold (perfgate.measure.cache_artifacts.measure_in_child)."""

    seconds: float | None = None
    hits: int | None = None
    note: str | None = None


# ---------------------------------------------------------------------------------------------- the run


def merge_start(record: dict, started_at: datetime, speedup_threshold: float | None) -> None:
    """perfgate.measure.pipeline.start_record: when the cell started, and its model's own gate threshold."""
    record["started_at"] = started_at.isoformat(timespec="seconds")
    if speedup_threshold is not None:
        record["gate"] = {"speedup_threshold": speedup_threshold}


def merge_stages(record: dict, seconds: dict[str, float], wall_s: float) -> None:
    """StageClock.stop: each stage's seconds (ms precision) and the cell's wall seconds, their sum."""
    record["stages"] = {stage: round(s, 3) for stage, s in seconds.items()}
    record["wall_s"] = round(wall_s, 2)


def checkpoint_of(record: dict, wall_s: float, stages: dict[str, float], unfinished: str) -> dict:
    """A stage's checkpoint (perfgate.measure.pipeline.announcer): a copy of the record as it stands, its reason
    saying where a process killed now stopped (`unfinished`) while the cell is still measuring."""
    partial = dict(record, wall_s=round(wall_s, 2), stages=stages)
    if record["reason"] == UNFINISHED:  # a finished record (artifacts stage) stays as is
        partial["reason"] = f"{UNFINISHED}: {unfinished}"
    return partial


def mark_ok(record: dict) -> None:
    """perfgate.measure.pipeline.guarded: the stages ran through."""
    record["status"], record["reason"] = "ok", ""


def mark_failed(record: dict, reason: str) -> None:
    """perfgate.measure.pipeline.guarded: a stage raised, or the cell must not pass; failed, and why."""
    record["status"], record["reason"] = "failed", reason


def mark_worker_lost(record: dict, reason: str, run_id: str | None, wall_s: float) -> None:
    """perfgate.measure.isolate: a child that ended without a record; its last checkpoint (or a new record)
    failed with `reason`, and the wall seconds its parent saw."""
    record.update(status="failed", run_id=run_id, reason=reason)
    record["wall_s"] = round(wall_s, 2)


def merge_process_start(record: dict, start_s: float) -> None:
    """A child's record (perfgate.measure.isolate, perfgate.measure.ddp): its process's start as its first
    stage, and in its wall seconds."""
    record["stages"] = {"process_start": round(start_s, 3), **(record.get("stages") or {})}
    record["wall_s"] = round(record["wall_s"] + start_s, 2)


def in_run(record: dict, run_id: str | None, remeasure: str = "") -> dict:
    """A copy of a (partial or final) record as this run's results file keeps it: the run that measured it and,
    for a cell measured again, which round (perfgate.core.records_file.CONFIRM). The session, an isolated
    child's checkpoints and the paired base side's file stamp their lines here."""
    return {**record, "run_id": run_id, "remeasure": remeasure}


def in_session(record: dict, run_id: str | None, unfit: str, remeasure: str, known_issue: str) -> dict:
    """A copy of a cell's final record as the pytest session files it (perfgate.plugin.session): its run and
    round, why this session's timings may not be trusted (`unfit`: the xdist workers' sharing, and the cell's
    own GPU neighbours), and the zoo's known issue that covers the cell, if any."""
    return {**in_run(record, run_id, remeasure), "unfit": unfit, "known_issue": known_issue}


def merge_paired(record: dict, summary: dict) -> None:
    """perfgate.plugin.against: side B's record carries the paired comparison's summary."""
    record["paired"] = summary


# ---------------------------------------------------------------------------------------------- stages


def merge_batch(record: dict, batch: int) -> None:
    """Stage "build": the batch the cell runs (perfgate.measure.pipeline.prepare)."""
    record["batch"] = batch


def merge_recompiles_allowed(record: dict, allowed: int) -> None:
    """Stage "build": the recompiles the cell's shape strategy allows (perfgate.measure.steps.cell_batches)."""
    record["recompiles_allowed"] = allowed


def merge_reference_cache(record: dict, note: str) -> None:
    """Stage "reference": where the reference came from ("hit", "stored", skipped and why)."""
    record["reference_cache"] = note


def merge_compile_cache(record: dict, kind: str) -> None:
    """perfgate.measure.compile_cache.cache_kind: "fresh" or "persistent"."""
    record["compile_cache"] = kind


def merge_compile(record: dict, compile_s: float, peak_mb: float | None) -> None:
    """Stage "compile": the first compiled call's seconds (ms precision) and the peak memory it took."""
    record["compile_s"] = round(compile_s, 3)
    record["peak_mem_compile_mb"] = peak_mb


def merge_first_call(
    record: dict, graph_count: int, graph_breaks: int, break_reasons: list, cache_hits: int, cache_misses: int
) -> None:
    """Stage "compile": what dynamo made of the first call, and what it found in the compile cache."""
    record.update(graph_count=graph_count, graph_breaks=graph_breaks, break_reasons=break_reasons)
    record.update(compile_cache_hits=cache_hits, compile_cache_misses=cache_misses)


def merge_numerics(record: dict, verdict: str, detail: dict) -> None:
    """Stage "numerics": the verdict (pass, fail, skipped) and its detail (perfgate.measure.numerics)."""
    record["numerics"], record["numerics_detail"] = verdict, detail


def merge_peak(record: dict, side: str, peak_mb: float | None) -> None:
    """Stage "warmup": a side's peak device memory over its warm steps (perfgate.measure.memory)."""
    record[f"peak_mem_{side}_mb"] = peak_mb


def merge_warmup(record: dict, steps: int) -> None:
    """Stage "warmup": the steps the slower side took to run steady."""
    record["warmup_steps"] = steps


def merge_timing(record: dict, rounds: Rounds) -> None:
    """Stage "timing": the interleaved rounds as the wall clock's fields, and how they were taken."""
    record.update(steps_per_round=rounds.steps, rounds=len(rounds.ratios))
    merge_clock(record, WALL, rounds)


def merge_clock(record: dict, clock: Clock, rounds: Rounds) -> None:
    """A clock's rounds (wall, host, device, a rank's compute) as its fields (perfgate.core.clocks.Clock): each
    side's round ms and their median, and the eager / compiled ratio with its 95 % interval (4 decimals)."""
    interval = rounds.speedup()
    record.update(
        {
            clock.eager_rounds: [round(x, 4) for x in rounds.eager_ms],
            clock.compiled_rounds: [round(x, 4) for x in rounds.compiled_ms],
            clock.eager_ms: round(statistics.median(rounds.eager_ms), 4),
            clock.compiled_ms: round(statistics.median(rounds.compiled_ms), 4),
            clock.ratio: round(interval.median, 4),
            f"{clock.ratio}_lo": round(interval.lo, 4),
            f"{clock.ratio}_hi": round(interval.hi, 4),
        }
    )


def merge_device_clock(record: dict, result: DeviceClock) -> None:
    """Stage "device_clock": the device clock, each side's GPU-busy fraction and bound; or clocks_note."""
    if result.rounds is None:
        record["clocks_note"] = result.note
        return
    merge_clock(record, DEVICE, result.rounds)
    for side in SIDES:
        record[f"busy_{side}"] = round(record[f"{side}_device_ms"] / record[f"{side}_ms"], 4)
    record["bound_eager"], record["bound"] = bound_of(record["busy_eager"]), bound_of(record["busy_compiled"])


def merge_host_speed(record: dict, probe: HostProbe | None) -> None:
    """The host probe around the timed rounds (perfgate.measure.host_speed); None: never sampled."""
    if probe is not None:
        record["host_probe_ms"] = round(probe.wall_ms, 4)
        record["host_probe_cpu_ms"] = round(probe.cpu_ms, 4)


def merge_scaler_skips(record: dict, eager: int | None, compiled: int | None) -> None:
    """Stage "extras": the optimizer steps each side's GradScaler skipped (None: no scaler)."""
    record.update(eager_scaler_skips=eager, compiled_scaler_skips=compiled)


def merge_counts(record: dict, counts: StepCounts) -> None:
    """Stage "counts": each count per step (2 decimals; null where its counter failed), the steps, the note."""
    for field, total in counts.totals.items():
        record[field] = None if total is None else round(total / counts.steps, 2)
    record.update(counts_steps=counts.steps, counts_note=counts.note)


# ---------------------------------------------------------------------------------------------- extras


def merge_neighbours(record: dict, found: list[dict] | None, unfit: str) -> None:
    """Stage "extras": other processes on the cell's GPU (perfgate.measure.neighbours), and the cell unfit."""
    record["gpu_neighbours"], record["unfit"] = found, unfit


def merge_recompiles(record: dict, recompiles: int, reasons: list[str]) -> None:
    """Stage "extras": recompiles after the first call, and dynamo's reasons."""
    record["recompiles"] = recompiles
    record["recompile_reasons"] = reasons


def merge_throughput(record: dict, unit: str, units_per_step: float) -> None:
    """Stage "extras": units (samples, tokens, ...) per second of each side's timed step (1 decimal)."""
    record["throughput_unit"] = unit
    record["throughput_eager"] = round(units_per_step / (record["eager_ms"] / 1e3), 1)
    record["throughput_compiled"] = round(units_per_step / (record["compiled_ms"] / 1e3), 1)


def merge_flops(record: dict, flops: int, datasheet_tflops: float | None) -> None:
    """Stage "extras": an eager step's FLOPs (perfgate.measure.introspect), each side's TFLOP/s and MFU
    against the datasheet's TFLOP/s (perfgate.measure.datasheet; None: unknown, no MFU)."""
    record["flops_per_step"] = flops
    for side in SIDES:
        tflops = flops / (record[f"{side}_ms"] / 1e3) / 1e12
        record[f"tflops_{side}"] = round(tflops, 2)
        record[f"mfu_{side}"] = round(tflops / datasheet_tflops, 4) if datasheet_tflops else None


def merge_why(record: dict, directory: str, compile_log: str, trace_eager: str, trace_compiled: str) -> None:
    """Stage "extras": where the why-artifacts went (perfgate.measure.why)."""
    record["why"] = {
        "dir": directory,
        "compile_log": compile_log,
        "trace_eager": trace_eager,
        "trace_compiled": trace_compiled,
    }


def merge_warm_compile(record: dict, seconds: float) -> None:
    """Stage "warm_compile": the compile again with warm on-disk caches (ms precision)."""
    record["compile_warm_s"] = round(seconds, 3)


def merge_saved_artifacts(record: dict, saved: SavedArtifacts) -> None:
    """The cache artifacts' size, else why none were saved (perfgate.measure.cache_artifacts.save)."""
    if saved.data is None:
        record["compile_artifacts_note"] = saved.note
    else:
        record["compile_artifacts_bytes"] = len(saved.data)


def merge_cache_artifacts(record: dict, result: ArtifactsCompile) -> None:
    """Stage "artifacts": the fresh process's first call from the artifacts, and a note where it failed or
    compiled cold (perfgate.measure.cache_artifacts.measure_in_child)."""
    if result.seconds is not None:
        record["compile_artifacts_s"], record["compile_artifacts_hits"] = result.seconds, result.hits
    if result.note is not None:
        record["compile_artifacts_note"] = result.note
