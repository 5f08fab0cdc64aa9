"""The result record of one cell: its fields, in one table (files of records: perfgate.core.records_file).

A record is one flat JSON object (a plain dict in memory). FIELDS names every field once, with its type, its
unit, what validate asks of it, how a baseline folds it and whether the history keeps it as a column;
validate, baseline, history and the reports take their field lists from it. Absent or not-measured values
are null. A field is a perfgate.core.record_field.Field; a data-parallel cell's fields are spliced in from
perfgate.core.record_ddp_fields; what a stored record says beyond its values (did its cell finish, where did it
run) is perfgate.core.record_reading's. Imports no torch.

Schemas (a record's `schema`): 13 adds the counts of a step's work (perfgate.core.clocks.COUNTS: Python calls, ATen
ops, GPU kernels, CUDA graph replays, dynamo cache lookups, instructions; each `eager_<count>` and `compiled_<count>`
per step, from perfgate.measure.counts) with `counts_steps` and `counts_note`, and `paired` (a paired run's comparison
with its base side, perfgate.ab), and `eager_scaler_skips` and `compiled_scaler_skips` (GradScaler's skipped
optimizer steps), no other figure changed; 12 adds the host probe (`host_probe_ms`,
perfgate.measure.host_speed): how fast the host CPU ran while the cell was timed, for the reader (a triage line quotes
it against the baseline's; the gate does not act on it), no other figure changed; 11 profiles the device clock with
the GPU's activity alone, rounds bounded by marker kernels (the same union of kernel intervals, without the host's
operators, whose recording cost seconds a cell), and lets the host clock go down to 5 rounds (11 before) where the
timed rounds are short: both figures mean what they did, a short cell's host interval is wider; 10 adds `process`,
where the cell ran (PROCESSES): on H100 machines upernet infer's compiled step took 23-51 % longer in perfgate's
isolated worker than in pytest's own process, same code, same machine, same call (docs/time-to-verdict.md), so a
baseline says which its runs used (process_of reads it back for schemas 8 and 9 from their stage account); 9 takes the
host clock before the device clock again, as before 8: schema 8 took it after the device clock's profiler session,
which read host times 25-33 % long (HOST_AFTER_PROFILER); 8 adds the stage account (`stages`: seconds per stage of the
run, summing to `wall_s`, which now includes an isolated cell's process start) and `remeasure`; its host clock takes
as many rounds as fit the timed rounds' seconds (11 at least, 41 at most, each round the fastest of 5 single steps as
before: the same figure, a wider interval where fewer rounds fit); 7 adds a data-parallel cell's step breakdown
(compute, communication, GPU idle); 6 records the compile-cache hits and misses of the first compiled call
(compile_cache_hits/_misses), so a kept cache's compile says whether it was cold; 5 keeps the GPU numerics judge out
of the compiled peak, which schema 4 (commits 933ac49 to a208d78) counted (gpt2 infer on an H100 read 11474 MiB for
1348); 4 gave a GPU cell's host clock up to 41 rounds (3: 11), which halves its in-run error, so a baseline folds the
host clock from runs of schema 4 or later where it has two or more; 3 added the device and host clocks; 2 made the
compiled peaks count the compiled side's own weights; 1 (before 922663c) left them out, so its peak_mem_compiled_mb
reads low by the weights. Older records read as they are: a field they lack reads as null (so a schema-2 record has no
device or host clock, and the gate does not compare one), and neither a baseline nor the memory rule uses a compiled
peak from a schema in COMPILED_PEAK_MISREAD.
"""

from __future__ import annotations

import copy

from perfgate.core.clocks import CLOCKS as ALL_CLOCKS
from perfgate.core.clocks import COUNTS, DEVICE, HOST, WALL
from perfgate.core.record_ddp_fields import DDP_FIELDS
from perfgate.core.record_field import Field, clock_fields, count_fields

RECORD_SCHEMA = 13
# Where a cell ran: in pytest's own process (--perf-isolate off, or a CPU cell), in perfgate's isolated warm
# worker (perfgate.measure.isolate, the default for a GPU cell), or as the ranks of a data-parallel cell.
PROCESSES = ("pytest", "worker", "ranks")
# Schemas whose compiled peak measured something else (see above): 1 without the compiled weights, 4 with
# the numerics judge's GPU temporaries.
COMPILED_PEAK_MISREAD = frozenset({1, 4})
# Records older than this took 11 host rounds on a GPU: their host speedups spread about twice as wide.
HOST_ROUNDS_SCHEMA = 4
# Schemas whose host clock ran after the cell's own device-clock profiler session: gpt2 infer's host ms read
# 25-33 % long and its host speedup 2.41x for 2.25x, one machine, the same cell (H100, 2026-11-25, lease AW).
# No baseline folds their host clock.
HOST_AFTER_PROFILER = frozenset({8})
UNFINISHED = "did not finish"  # a new record's reason until the cell ends
ENGINE_FAILED = "perfgate's paired engine failed"  # a failed record's reason where perfgate's code broke, not the cell
# What an unfit record (the `unfit` field) needs to be timed again: every refusal of one says it.
TIME_ALONE = "without xdist (or one worker per GPU) and with no other process on the GPU"
# A step whose GPU is busy this much of its wall time is device-bound: its wall time follows the GPU's work.
# Below it the GPU waits on the host between kernels, and the wall time follows the host CPU (seen on H100
# leases: resnet50 train compiled 61 % busy moved 2.19x / 1.82x / 1.54x across three machines; eager 97 %).
DEVICE_BOUND_BUSY = 0.9
STATUSES = ("ok", "failed", "skipped")
NUMERICS = ("pass", "fail", "skipped")


def skipped_record(cell, env: dict, run_id: str | None, reason: str, started_at: str) -> dict:
    """The record of a cell that was selected and not measured (pytest skipped it: no CUDA device, too few
    GPUs, the model's known issue), so that every face sees what was asked and not measured."""
    return {
        **new_record(cell, env, run_id, process=None),
        "status": "skipped",
        "reason": reason,
        "started_at": started_at,
        "wall_s": 0.0,
    }


def nothing_measured(records) -> str | None:
    """Why a run measured nothing (no record, or every one skipped), naming each skip reason and how many
    cells it skipped; None when a cell was measured (ok or failed). A gate over nothing must not pass."""
    if any(r.get("status") != "skipped" for r in records):
        return None
    if not records:
        return "nothing was measured: the run has no records"
    reasons: dict[str, int] = {}
    for record in records:
        reason = record.get("reason") or "no reason given"
        reasons[reason] = reasons.get(reason, 0) + 1
    why = "; ".join(f"{reason} ({count} cell{'s' * (count > 1)})" for reason, count in sorted(reasons.items()))
    return f"nothing was measured: all {len(records)} selected cell(s) were skipped: {why}"


FIELDS: tuple[Field, ...] = (
    Field("schema", int, doc="RECORD_SCHEMA when written"),
    Field("cell", str, check="text", doc='the Cell.id, "gpt2-train-inductor_default-amp_bf16"'),
    Field(
        "run_id",
        str,
        check="text",
        doc="one id per pytest session, shared by its xdist workers (null: one results file "
        "is one run); baselines group records into runs by it",
    ),
    Field("model", str, check="text", fold="verbatim", column=True),
    Field("phase", str, check="text", fold="verbatim", column=True),
    Field("variant", str, check="text", fold="verbatim", column=True),
    Field("precision", str, check="text", fold="verbatim", column=True),
    Field("device_kind", str, doc='"gpu" | "cpu"'),
    Field("tier", str, check="text", column=True, doc='"pr" | "nightly": picks the baseline file with the fingerprint'),
    Field("status", str, check="choice", choices=STATUSES, required=True, fold="custom", column=True, default="failed"),
    Field(
        "reason",
        str,
        check="text",
        fold="custom",
        column=True,
        default=UNFINISHED,
        doc='why it failed or was skipped ("" when ok)',
    ),
    Field(
        "known_issue",
        str,
        check="text",
        default="",
        doc="the zoo's known issue that marks this cell (its "
        'reason; pytest xfails or skips it), or "": so a report can tell a known failure from a new one',
    ),
    Field(
        "env",
        dict,
        check="object",
        doc="{fingerprint, gpu, driver, cuda, torch, triton, transformers, timm, "
        "python, host, tf32, cpu_model, cpu_cores, gpu_sms, cupti_teardown}: perfgate.measure.env",
    ),
    Field("started_at", str, column=True, doc="ISO-8601 UTC time the cell started"),
    Field("wall_s", float, "s", ">= 0", doc="the whole cell, its process's start included (schema 8 on)"),
    Field(
        "stages",
        dict,
        check="object",
        default={},
        doc="{stage: seconds} (perfgate.core.stages.STAGES): where the cell's wall_s went, summing to it",
    ),
    Field(
        "process",
        str,
        check="choice",
        choices=PROCESSES,
        doc="where the cell ran (PROCESSES; schema 10 on, process_of reads older records): null for a cell "
        "that was never measured",
    ),
    Field(
        "remeasure",
        str,
        default="",
        doc='why the gate measured this cell again: "confirm" (a speedup rule '
        'tripped), "why-artifacts" (flagged by another rule), or "" (the run\'s own measurement)',
    ),
    Field("steps_per_round", int, "steps", "> 0"),
    Field("rounds", int, "rounds", "> 0"),
    Field("warmup_steps", int, "steps", ">= 0"),
    # The wall clock: CUDA events around back-to-back steps, so host stalls count. Eager and compiled rounds
    # are interleaved pairs; the speedup is the median of the per-round eager / compiled ratios.
    *clock_fields(WALL, "median of the per-round eager / compiled ratios", "one per round", "median of the rounds"),
    # The device clock (perfgate.measure.clocks): GPU-busy ms per step, the union of the step's kernel intervals
    # (CUPTI, through torch.profiler), median over profiled rounds.
    *clock_fields(DEVICE, "median of the per-round device ratios"),
    # The host clock: ms to issue one step, from a synchronized, idle device to the step call's return,
    # each round the fastest of a few single steps (a stall only adds), median over rounds.
    *clock_fields(HOST, "eager host ms / compiled host ms, per round pair"),
    Field("busy_eager", float, "fraction", ">= 0", fold="median", doc="device ms / wall ms: the GPU-busy share"),
    Field("busy_compiled", float, "fraction", ">= 0", fold="median"),
    Field("bound_eager", str, doc='"device" | "host": bound_of(busy_eager)'),
    Field("bound", str, fold="custom", doc="the compiled side's, bound_of(busy_compiled)"),
    Field("clocks_note", str, default="", doc="why a clock is null (no CUDA device, a profiler error)"),
    # The host probe (perfgate.measure.host_speed): ms of one fixed piece of interpreter work in the measuring
    # thread, around the timed rounds and the clocks; triage quotes its wall figure, the gate does not act on it.
    Field("host_probe_ms", float, "ms", "> 0", fold="median", doc="wall ms of the probe's work, median of its probes"),
    Field("host_probe_cpu_ms", float, "ms", "> 0", fold="median", doc="the thread's CPU ms for the same work"),
    # The counts of a step's work (perfgate.core.clocks.COUNTS), taken after the clocks in a pass of their own.
    *(field for count in COUNTS for field in count_fields(count)),
    Field(
        "counts_steps",
        int,
        "steps",
        "> 0",
        fold="custom",
        doc="steps counted per side and pass (a stream model's first batches); a baseline's counts are those of "
        "its runs that counted as many steps as its last",
    ),
    Field("counts_note", str, default="", doc="why a count is null (no CUDA device, no hardware counter: ENOENT)"),
    Field(
        "compile_s",
        float,
        "s",
        "> 0",
        required=True,
        fold="max",
        column=True,
        doc="first compiled call (cold unless compile_cache says otherwise)",
    ),
    Field(
        "compile_warm_s",
        float,
        "s",
        "> 0",
        fold="max",
        column=True,
        doc="the same compile again with dynamo reset and inductor caches warm",
    ),
    Field(
        "compile_artifacts_s",
        float,
        "s",
        "> 0",
        doc="load + first compiled call in a fresh process with "
        "empty caches, handed this cell's torch.compiler.save_cache_artifacts() (--perf-warm-compile artifacts)",
    ),
    Field("compile_artifacts_bytes", int, "bytes", ">= 0"),
    Field(
        "compile_artifacts_hits",
        int,
        "count",
        ">= 0",
        doc="FX graph + AOTAutograd cache hits in that process (0: the load went unused)",
    ),
    Field("compile_artifacts_note", str, doc="why compile_artifacts_s is null (or the hits 0)"),
    Field(
        "compile_cache",
        str,
        fold="custom",
        column=True,
        doc='"fresh" (a new inductor cache dir for the cell) | "persistent" (a kept dir)',
    ),
    Field(
        "compile_cache_hits",
        int,
        "count",
        ">= 0",
        fold="max",
        doc="FX graph + AOTAutograd cache hits during the "
        "first compiled call (schema 6 on): with misses, whether a kept cache made it warm; a baseline keeps the "
        "runs' maxima, so it reads warm only where no run compiled (record_reading.first_call_cache)",
    ),
    Field("compile_cache_misses", int, "count", ">= 0", fold="max"),
    Field("graph_count", int, "count", ">= 0"),
    Field("graph_breaks", int, "count", "count", required=True, fold="max", column=True),
    Field("recompiles", int, "count", "count", required=True, fold="max", column=True),
    Field(
        "recompiles_allowed",
        int,
        "count",
        ">= 0",
        default=0,
        doc="what the variant's shape strategy may cost (bucketed shapes: one per length)",
    ),
    Field("break_reasons", list, default=[], doc="[str], the first few"),
    Field("recompile_reasons", list, default=[], doc="[str], the first few: the guard each recompile failed"),
    Field(
        "eager_scaler_skips",
        int,
        "count",
        ">= 0",
        fold="max",
        doc="the optimizer steps GradScaler skipped on the eager side (inf or NaN gradients; a data-parallel "
        "cell's rank 0); null without a scaler (every precision but AMP fp16) or before the field; a cell whose "
        "sides skip over one step apart fails",
    ),
    Field("compiled_scaler_skips", int, "count", ">= 0", fold="max", doc="the same on the compiled side"),
    # Data-parallel cells (the "ddp" phase; null elsewhere): perfgate.core.record_ddp_fields.
    *DDP_FIELDS,
    Field(
        "peak_mem_eager_mb",
        float,
        "MiB",
        ">= 0",
        fold="max",
        column=True,
        doc="warm steps, CUDA-graph pools counted; null on CPU",
    ),
    Field("peak_mem_compiled_mb", float, "MiB", ">= 0", fold="max", column=True),
    Field("peak_mem_compile_mb", float, "MiB", ">= 0", doc="peak while compiling (autotuning)"),
    Field("flops_per_step", float, "FLOP", ">= 0"),
    Field("tflops_eager", float, "TFLOP/s", ">= 0"),
    Field("tflops_compiled", float, "TFLOP/s", ">= 0"),
    Field("mfu_eager", float, "fraction", ">= 0"),
    Field("mfu_compiled", float, "fraction", ">= 0"),
    Field(
        "batch",
        int,
        "samples",
        "> 0",
        fold="verbatim",
        doc="samples per step (per rank in a data-parallel "
        "cell): the zoo size's batch, or its cuda_graph_train_batch (perfgate.core.spec.Size)",
    ),
    Field("throughput_unit", str, doc='"tokens" | "images"'),
    Field("throughput_eager", float, "1/s", "> 0", doc="throughput_unit per second"),
    Field("throughput_compiled", float, "1/s", "> 0"),
    Field("numerics", str, check="choice", choices=NUMERICS, fold="custom", column=True, default="skipped"),
    Field(
        "numerics_detail",
        dict,
        check="object",
        default={},
        doc="{reference, worst, checks: [{name, rmse_compiled, rmse_eager, limit, group_scale, ok}]}",
    ),
    Field(
        "reference_cache",
        str,
        doc='what the numerics reference cache did (--perf-reference-cache): "hit", "stored", "off", '
        '"not stored: why", or "skipped: numerics off"',
    ),
    Field("gate", dict, check="object", default={}, doc="{speedup_threshold: fraction}: the model's overrides"),
    Field("why", dict, doc="{dir, compile_log, trace_eager, trace_compiled} paths when profiled"),
    Field(
        "paired",
        dict,
        check="object",
        doc="a paired run's comparison with its base side (perfgate.ab.duet.measure): against, estimator, "
        "duets, looks, outcome, rules [{rule, change, lo, hi, outcome, pairs}], the rounds of both sides, counts, "
        "kernels [{pair, side, a_ms, b_ms, moved: [{kernel, a_ms, b_ms}]}] (GPU ms per step), seconds {prepare, "
        "looks, finish: per process pair; wall_rounds, host_rounds, device_rounds; total}, prepared [{first: a|b, "
        "together, staggered: the first compiled calls in turn}] per process pair, steps_per_round (the last "
        "process pair's wall round), wall_pairs (the wall round pairs a look, per process pair) and pinned (the "
        "CPUs both sides' rounds ran on, perfgate.ab.pinning; [] where not pinned)",
    ),
    Field(
        "gpu_neighbours",
        list,
        default=None,
        doc="[{pid, mib}]: processes outside this run on the cell's GPU "
        "as its timing began or after its clocks ([]: none; null: not looked or nobody could tell)",
    ),
    Field(
        "unfit",
        str,
        check="text",
        default="",
        doc="why the timings cannot be trusted (xdist workers that "
        "shared CPU cores or a GPU, other processes on the GPU): such records never enter a baseline and the "
        "gate refuses them",
    ),
)
FIELD = {f.name: f for f in FIELDS}
# The clocks' ratio fields, in perfgate.core.clocks.CLOCKS order (the wall clock's keep their older names:
# eager_ms, speedup, ...).
CLOCKS = tuple(clock.ratio for clock in ALL_CLOCKS)


def names(**match) -> tuple[str, ...]:
    """The names of the fields whose attributes equal `match`, in table order: names(fold="median")."""
    return tuple(f.name for f in FIELDS if all(getattr(f, key) == value for key, value in match.items()))


def bound_of(busy: float | None) -> str | None:
    """ "device" or "host" from a busy fraction (device ms / wall ms); None when unknown."""
    if busy is None:
        return None
    return "device" if busy >= DEVICE_BOUND_BUSY else "host"


def error_line(err: BaseException) -> str:
    """An exception as a record's reason or note: its type and first line."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:500] if text else '(no message)'}"


def new_record(cell, env: dict, run_id: str | None = None, process: str | None = "pytest") -> dict:
    """An empty record for `cell` (a perfgate.core.matrix.Cell) measured in `process` (one of PROCESSES; None:
    not measured): every field at its default, measured ones null."""
    record = {f.name: copy.deepcopy(f.default) for f in FIELDS}
    record.update(
        schema=RECORD_SCHEMA,
        process=process,
        cell=cell.id,
        run_id=run_id,
        model=cell.model,
        phase=cell.phase,
        variant=cell.variant,
        precision=cell.precision,
        device_kind=cell.device_kind,
        tier=cell.tier,
        env=env,
    )
    return record


def failed_record(cell, reason: str, run_id: str | None = None, process: str | None = "worker") -> dict:
    """A failed record for `cell` that no process measured (a paired side that never reported, a paired cell
    the engine could not run), and why; every other field at its default."""
    return {**new_record(cell, {}, run_id, process=process), "status": "failed", "reason": reason}
