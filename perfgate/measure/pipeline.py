"""A cell's run as named stages (perfgate.core.stages.STAGES), and the stages both a single-device cell
(perfgate.measure.cell) and a data-parallel rank (perfgate.measure.ddp_rank) compose: building the sides, the
reference, the first compiled call, numerics, warm-up and the timed rounds. Each stage knows its own cost: the
StageClock charges every second of a cell to the stage running then, so a record's stages sum to its wall_s.

A cell never raises: any failure (compile error, OOM, NaN, a graph that never compiled) becomes status
"failed" with a reason (`guarded`), and whatever was measured before it stays in the record.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable

import torch

from perfgate.core.matrix import Cell
from perfgate.core.record import error_line, new_record
from perfgate.measure import faults, introspect, record_builder, reference
from perfgate.measure.compile_cache import clean_up
from perfgate.measure.memory import Memory
from perfgate.measure.numerics import compare_steps
from perfgate.measure.steps import Side, captured_steps, cell_batches, initial_state, sync
from perfgate.measure.timing import Rounds, interleaved_rounds, steps_per_round, time_steps, warm_up


class CellFailure(Exception):
    """A cell that ran but must not pass (ran eager, recompiled, numerics off); the record is complete."""


class StageClock:
    """Charges each second of a cell's run to the stage running then; `announce(message)` says when a stage
    starts (a progress line, and a checkpoint of the record as it stands)."""

    def __init__(self, record: dict, announce: Callable[[str], None] = lambda _m: None):
        self.record, self.announce = record, announce
        self.seconds: dict[str, float] = {}
        self.current: str | None = None
        self.started = self.since = time.perf_counter()

    def enter(self, stage: str, message: str | None = None) -> None:
        """End the running stage and start `stage` (a stage entered again adds to its total)."""
        now = time.perf_counter()
        self._charge(now)
        self.current, self.since = stage, now
        if message is not None:
            self.announce(message)

    def _charge(self, now: float) -> None:
        if self.current is not None:
            self.seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.since
            self.since = now

    def snapshot(self) -> dict[str, float]:
        """The stages so far, the running one included up to now and listed last: a process killed mid-stage
        leaves this in its checkpoint, and its parent charges the rest of the cell to that last stage."""
        now = time.perf_counter()
        seconds = dict(self.seconds)
        if self.current is not None:
            seconds.pop(self.current, None)
            seconds[self.current] = self.seconds.get(self.current, 0.0) + now - self.since
        return {stage: round(s, 3) for stage, s in seconds.items()}

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def stop(self) -> None:
        """Close the account into the record: its stages and wall_s (their sum)."""
        self._charge(time.perf_counter())
        self.current = None
        record_builder.merge_stages(self.record, self.seconds, self.elapsed())


def start_record(spec, cell: Cell, env: dict, process: str = "pytest") -> dict:
    """A new record for every kind of cell, run in `process` (perfgate.core.record.PROCESSES): the model's
    gate settings reach each of its cells from here, a data-parallel one's included."""
    record = new_record(cell, env, process=process)
    record_builder.merge_start(record, datetime.now(timezone.utc), spec.speedup_threshold)
    return record


def announcer(
    progress: Callable[[str], None],
    checkpoint: Callable[[dict], None] | None,
    record: dict,
    clock_of: Callable[[], StageClock],
    what: str = "the process",
):
    """A stage's announcement: its progress line, and (with `checkpoint`) the record as it stands, its reason
    saying where a process killed now would have stopped ("did not finish: ... during 'compiling'")."""

    def announce(message: str) -> None:
        progress(message)
        if checkpoint is None:
            return
        clock = clock_of()
        unfinished = f"{what} ended during '{message}'"
        checkpoint(record_builder.checkpoint_of(record, clock.elapsed(), clock.snapshot(), unfinished))

    return announce


def guarded(record: dict, clock: StageClock, body: Callable[[], None]) -> None:
    """Run `body`, the cell's stages: ok, or failed with the reason; then clean up (stage "other") and close
    the stage account. Never raises for what the cell does."""
    try:
        body()
        record_builder.mark_ok(record)
    except CellFailure as failure:
        record_builder.mark_failed(record, str(failure))
    except torch.OutOfMemoryError as err:
        record_builder.mark_failed(record, f"out of memory: {error_message(err)}")
    except Exception as err:  # noqa: BLE001 - a failing cell must never take the session down
        record_builder.mark_failed(record, error_line(err))
    finally:
        clock.enter("other")
        clean_up()
        clock.stop()


def error_message(err: BaseException) -> str:
    """error_line without the type name, where the words before it already say what failed."""
    return error_line(err).partition(": ")[2]


@dataclass
class CellRun:
    """What a cell's stages share: the cell, its record and stage clock, its seeded state and batches, both
    sides and their steps, and how a chunk of steps is timed (a data-parallel rank: the slowest rank's)."""

    spec: object
    cell: Cell
    options: object  # perfgate.core.job.RunOptions
    record: dict
    clock: StageClock
    device: torch.device
    step_clock: Callable = time_steps
    size: object = None
    state: dict = field(default_factory=dict)
    host_batches: list = field(default_factory=list)
    batches: list = field(default_factory=list)
    timed: list = field(default_factory=list)
    memory: Memory | None = None
    eager: Side | None = None
    compiled: Side | None = None
    eager_step: Callable | None = None
    compiled_step: Callable | None = None
    reference: list | None = None
    reference_kind: str = ""
    eager_captured: list = field(default_factory=list)
    compiled_captured: list = field(default_factory=list)
    first_counts: dict = field(default_factory=dict)  # dynamo's counters after the first compiled call

    @property
    def id(self) -> str:
        return self.cell.id


# ---------------------------------------------------------------------------------------------- stages


def prepare(run: CellRun, batch_seed: int | None = None) -> None:
    """Stage "build": the seeded weights both sides start from and the batches (`batch_seed`: a rank's own)."""
    run.clock.enter("build", f"{run.id}: building")
    run.size = run.spec.size(run.cell)
    record_builder.merge_batch(run.record, run.size.batch)
    introspect.reset_compiler()
    run.state = initial_state(run.spec, run.size, run.options.seed, run.device)
    seed = run.options.seed if batch_seed is None else batch_seed
    run.host_batches, run.batches, allowed = cell_batches(run.spec, run.cell, run.size, seed, run.device)
    record_builder.merge_recompiles_allowed(run.record, allowed)
    # The timed stream: one batch, or for a variable-length model its whole mix of lengths.
    run.timed = run.batches if run.spec.stream > 1 else run.batches[:1]


def build_eager(run: CellRun, make_side: Callable[[CellRun], Side]) -> None:
    """Stage "build": the eager side (`make_side`: a plain model, or one wrapped in DDP), after the reference
    (whose fp64 copy then has the device to itself), with memory counted from here."""
    run.clock.enter("build")
    run.memory = Memory(run.device)
    run.eager = make_side(run)


def load_reference(run: CellRun, compute: Callable[[], tuple], key: str | None) -> None:
    """Stage "reference": from the reference cache, else computed (and stored)."""
    run.clock.enter("reference", f"{run.id}: numerics reference")
    if not run.options.numerics:
        record_builder.merge_reference_cache(run.record, "skipped: numerics off")
        return
    run.reference, run.reference_kind, cache = reference.cached(run.options.reference_dir, key, compute)
    record_builder.merge_reference_cache(run.record, cache)


def capture_eager(run: CellRun, adapt: Callable[[dict], dict] = lambda c: c, judged_here: bool = True) -> None:
    """Stage "numerics": eager's captured steps (`adapt`: DDP's parameter names as the plain model's;
    `judged_here`: False on a data-parallel rank other than 0, as in judge_numerics)."""
    run.clock.enter("numerics")
    if run.options.numerics and judged_here:
        run.eager_captured = [adapt(c) for c in captured_steps(run.eager, run.batches)]
    else:  # the sides still take the numerics steps, so every process's timed steps start from the same state
        captured_steps(run.eager, run.batches, tensors=False)
    run.eager_step = cycling(run.eager, run.timed)


# Eager's steps before the compile: enough for its peak memory (the optimizer's state is allocated in the
# first step, cuDNN's trial workspaces in the first few), not for steadiness. Eager warms up in full after
# the compiled side (warm_compiled), right before the timed rounds; before, it warmed up to steady twice, 20
# steps at least each time (H100, 2026-11-26: 39 s of the PR tier's 357 s of cells were warm-up).
EAGER_MEMORY_STEPS = 4
# Eager's warm-up after the compiled side's: at least this many steps, then until two chunks agree (the
# plan's settle). By then eager has taken its memory steps and its numerics steps (its cuDNN picks, allocator
# and optimizer state settled), and the compiled side's warm-up has just kept the GPU busy, so its clocks are
# up; what is left to see is that eager runs steady. Its 20-step floor was ~13 s of the PR tier's ~33 s of
# warm-up (H100, 2026-11-26: 20 eager steps of 21-136 ms a cell); 6 saved 2.5 s over 6 cells (BX, 2026-11-27).
EAGER_REWARM_STEPS = 6


def warm_eager(run: CellRun) -> float:
    """Stage "warmup": eager alone on the device for EAGER_MEMORY_STEPS steps at least, its peak memory
    measured; returns its ms per step."""
    run.clock.enter("warmup", f"{run.id}: warming up the eager side")
    run.memory.reset()
    plan = run.options.plan.replace(warmup_min_steps=min(run.options.plan.warmup_min_steps, EAGER_MEMORY_STEPS))
    eager_ms, _ = warm_up(run.eager_step, run.device, plan, len(run.timed), clock=run.step_clock)
    return eager_ms


def first_compiled_call(
    run: CellRun,
    make_compiled: Callable[[CellRun], Side],
    message: str,
    adapt: Callable[[dict], dict] = lambda c: c,
    at_compile: bool = True,
) -> None:
    """Stage "compile": the compiled side built and called once: compile_s, graphs, breaks, cache lookups. A
    variant that compiled no graph fails the cell ("ran eager")."""
    run.memory.rebase()  # the compiled side's weights are its own, as the eager side's are counted in its peak
    run.clock.enter("compile", message)
    run.compiled = make_compiled(run)
    if at_compile:
        faults.at_compile(run.options.fault)  # test-only: a hung or crashing compile
    t0 = time.perf_counter()
    run.compiled_captured = [adapt(run.compiled.captured_step(run.batches[0], tensors=False))]
    sync(run.device)
    record_builder.merge_compile(run.record, time.perf_counter() - t0, run.memory.peak_mb())
    run.first_counts = first = introspect.compile_counts()
    cache = introspect.cache_counts()  # a kept cache may be warm: say what the first call found there
    record_builder.merge_first_call(
        run.record, first["graph_count"], first["graph_breaks"], first["break_reasons"], cache["hits"], cache["misses"]
    )
    optimizer_graphs = run.compiled.optimizer_graphs
    if run.first_counts["graph_count"] <= optimizer_graphs:
        whose = (
            f" of the model (its {optimizer_graphs} graph(s) were the optimizer's)" if optimizer_graphs else " at all"
        )
        raise CellFailure(f"ran eager: {run.cell.variant} compiled no graph{whose}")
    run.memory.reset()


def judge_numerics(run: CellRun, adapt: Callable[[dict], dict] = lambda c: c, judged_here: bool = True) -> None:
    """Stage "numerics": compiled's second captured step (training), then the judge, set aside from the
    compiled side's peak. `judged_here`: False on a data-parallel rank other than 0 (the steps still run)."""
    run.clock.enter("numerics", f"{run.id}: compiled in {run.record['compile_s']:.1f} s; checking numerics")
    if run.cell.phase != "infer":  # its gradients and parameters copied to the host only where judged
        tensors = run.options.numerics and judged_here
        run.compiled_captured.append(adapt(run.compiled.captured_step(run.batches[1], tensors=tensors)))
    if not run.options.numerics:
        skipped = "not judged in this process (numerics off: an A/B side's first process judged it)"
        record_builder.merge_numerics(run.record, "skipped", {"reference": skipped})
    elif judged_here:
        tolerance = run.spec.tolerances[run.cell.precision]
        with run.memory.set_aside():
            verdict = compare_steps(
                run.compiled_captured,
                run.eager_captured,
                run.reference,
                tolerance,
                run.reference_kind,
                initial=run.state,
                device=run.device,
            )
        record_builder.merge_numerics(run.record, verdict.pop("verdict"), verdict)
    run.compiled_captured, run.eager_captured, run.reference = [], [], None


def warm_compiled(run: CellRun) -> tuple[float, float]:
    """Stage "warmup": the compiled side until steady (its peak measured), then eager again, which idled while
    the compiled side compiled (clocks drop on an idle GPU), from EAGER_REWARM_STEPS steps until steady;
    returns (eager, compiled) ms per step."""
    run.clock.enter("warmup", f"{run.id}: warming up the compiled side on {len(run.timed)} batch(es)")
    plan, stream = run.options.plan, len(run.timed)
    compiled_ms, compiled_warm = warm_up(
        cycling(run.compiled, run.timed), run.device, plan, stream, clock=run.step_clock
    )
    run.compiled_step = faulted(cycling(run.compiled, run.timed), run.options.fault, run.device, stream)
    record_builder.merge_peak(run.record, "compiled", run.memory.peak_mb())
    rewarm = plan.replace(warmup_min_steps=min(plan.warmup_min_steps, EAGER_REWARM_STEPS))
    eager_ms, eager_warm = warm_up(run.eager_step, run.device, rewarm, stream, clock=run.step_clock)
    record_builder.merge_warmup(run.record, max(eager_warm, compiled_warm))
    return eager_ms, compiled_ms


def timed_rounds(run: CellRun, step_ms: float, record_compiled=None, what: str = "timing") -> Rounds:
    """Stage "timing": interleaved eager and compiled rounds, into the record's wall-clock fields."""
    steps = steps_per_round(step_ms, run.options.plan, len(run.timed))
    run.clock.enter("timing", f"{run.id}: {what}, {steps} steps per round")
    rounds = interleaved_rounds(
        run.eager_step, run.compiled_step, steps, run.device, run.options.plan, record_compiled, clock=run.step_clock
    )
    record_builder.merge_timing(run.record, rounds)
    return rounds


# ---------------------------------------------------------------------------------------------- helpers


def cycling(side: Side, stream: list):
    return lambda i: side.step(stream[i % len(stream)])


def faulted(step, fault, device: torch.device, stream: int):
    """The compiled step with the test-only fault planted; percentage faults calibrate on the warm step."""
    from perfgate.measure import clocks

    def calibrate(clock: str) -> float:
        measure = clocks.device_ms if clock == "device" else clocks.host_ms
        return measure(step, device, stream)

    return faults.slowed(step, fault, device, calibrate)


# Skipped optimizer steps the two sides may differ by: one overflow by chance. A skipped step does no update, so a
# side that skips more steps times less work (a compiled fp16 step overflowing every step read as a speedup).
SCALER_SKIPS_APART = 1


def raise_if_wrong(record: dict, numerics_judged: bool = True) -> None:
    """A measured cell that must not pass: numerics off (or not judged where it should have been), GradScaler
    skipping the two sides' optimizer steps unalike, or more recompiles than its shape strategy allows."""
    if record["numerics"] != "pass" and (numerics_judged or record["numerics"] == "fail"):
        detail = record["numerics_detail"]
        raise CellFailure(
            f"numerics: {detail['failing']} of {detail['tensors']} tensors off "
            f"(worst {detail['worst']}, against {detail['reference']})"
        )
    eager_skips, compiled_skips = record.get("eager_scaler_skips"), record.get("compiled_scaler_skips")
    if (
        eager_skips is not None
        and compiled_skips is not None
        and abs(compiled_skips - eager_skips) > SCALER_SKIPS_APART
    ):
        raise CellFailure(
            f"GradScaler skipped {compiled_skips} compiled and {eager_skips} eager optimizer step(s) (inf or NaN "
            "gradients): the two sides' steps did different work, so their times do not compare"
        )
    if record["recompiles"] > record["recompiles_allowed"]:
        first_reason = f" ({record['recompile_reasons'][0]})" if record["recompile_reasons"] else ""
        raise CellFailure(
            f"{record['recompiles']} recompile(s) after the first call; "
            f"{record['variant']} allows {record['recompiles_allowed']}{first_reason}"
        )
