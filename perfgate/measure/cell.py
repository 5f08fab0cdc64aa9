"""Run one cell: build, check numerics, compile, warm up, time eager and compiled interleaved, record.

The engine knows no model: everything model-specific comes from the ModelSpec. A cell never raises: any
failure (compile error, OOM, NaN, a graph that never compiled) becomes status "failed" with a reason, and
whatever was measured before it stays in the record. The public helpers below (sides' memory, captured
steps, timing and throughput fields, clean-up) are shared with a data-parallel rank (ddp_rank.py).
"""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import torch

from perfgate.measure import artifacts, clocks, faults, introspect, neighbours, why
from perfgate.core.matrix import PRECISIONS, VARIANTS, WARM_COMPILE, Cell
from perfgate.measure.numerics import judge
from perfgate.measure.peaks import peak_tflops
from perfgate.core.record import UNFINISHED, error_line, new_record
from perfgate.measure.steps import Side, build_model, cell_batches, compiled_side, initial_state, sync, to_device
from perfgate.measure.timing import TimingPlan, interleaved_rounds, steps_per_round, warm_up

MIB = 2**20


@dataclass(frozen=True)
class RunOptions:
    device: str = "cuda"
    plan: TimingPlan = TimingPlan()
    warm_compile: str = "on"  # one of WARM_COMPILE
    cache_dir: str | None = None  # a kept inductor cache; None: a fresh one per cell (cold compiles)
    fault: faults.Fault | None = None  # test-only planted fault
    seed: int = 0
    profile_dir: str | None = None  # write why-artifacts (traces, compile logs) under <dir>/<cell id>/
    # "module:attribute" of the model registry (name -> ModelSpec), set by the face: a fresh process finds
    # the cell's spec there by name, as specs hold lambdas and cannot be pickled. Never imported here.
    registry: str | None = None

    @classmethod
    def from_json(cls, fields: dict) -> "RunOptions":
        """The options a parent wrote with dataclasses.asdict (the plan and the fault as dicts)."""
        fault = faults.Fault(**fields["fault"]) if fields["fault"] else None
        return cls(**dict(fields, plan=TimingPlan(**fields["plan"]), fault=fault))

    def __post_init__(self):
        if self.warm_compile not in WARM_COMPILE:  # a bool from an older caller would silently mean "off"
            raise ValueError(f"warm_compile={self.warm_compile!r}; valid: {', '.join(WARM_COMPILE)}")


class CellFailure(Exception):
    """A cell that ran but must not pass (ran eager, recompiled, numerics off); the record is complete."""


def run_cell(spec, cell: Cell, options: RunOptions, env: dict,
             progress: Callable[[str], None] = lambda _msg: None,
             record_compiled: Callable[[float], None] | None = None,
             checkpoint: Callable[[dict], None] | None = None) -> dict:
    """Measure one cell and return its record. `checkpoint`, if given, receives the record as it stands at
    each stage (status "failed", reason "did not finish ..."): a process killed mid-cell (a CI timeout, a
    hung compile) then leaves what it had measured, and the final record supersedes it."""
    if cell.phase == "ddp":  # its ranks are processes of their own
        from perfgate.measure import ddp
        return ddp.run(spec, cell, options, env, progress, record_compiled, checkpoint)
    record = new_record(cell, env)
    record["started_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    if spec.speedup_threshold is not None:
        record["gate"] = {"speedup_threshold": spec.speedup_threshold}
    started = time.perf_counter()
    if checkpoint is not None:
        progress = _checkpointing(progress, checkpoint, record, started)
    saved = None  # this cell's cache artifacts, when --perf-warm-compile=artifacts saved some
    try:
        why_dir = Path(options.profile_dir) / cell.id if options.profile_dir else None
        with (compile_cache(options.cache_dir, record, cell.precision),
              why.compile_logs(why_dir and why_dir / "compile.log"), artifacts.fresh_recording()):
            saved = _measure(spec, cell, options, record, progress, record_compiled, why_dir)
        record["status"], record["reason"] = "ok", ""
    except CellFailure as failure:
        record["status"], record["reason"] = "failed", str(failure)
    except torch.OutOfMemoryError as err:
        record["status"], record["reason"] = "failed", f"out of memory: {error_message(err)}"
    except Exception as err:  # noqa: BLE001 - a failing cell must never take the session down
        record["status"], record["reason"] = "failed", error_line(err)
    finally:
        record["wall_s"] = round(time.perf_counter() - started, 2)
        clean_up()
    if saved is not None:  # after clean_up: this process's models are freed while the child builds its own
        progress(f"{cell.id}: compiling from {len(saved)} bytes of cache artifacts in a fresh process")
        artifacts.measure_in_child(saved, cell, options, record)  # never raises: a note says what failed
        record["wall_s"] = round(time.perf_counter() - started, 2)
    return record


def _checkpointing(progress, checkpoint, record: dict, started: float):
    """A progress callback that also hands the record on at every stage it announces."""
    def stage(message: str) -> None:
        progress(message)
        partial = dict(record, wall_s=round(time.perf_counter() - started, 2))
        if record["reason"] == UNFINISHED:  # still measuring; a finished record (artifacts stage) stays as is
            partial["reason"] = f"{UNFINISHED}: the process ended during '{message}'"
        checkpoint(partial)
    return stage


def error_message(err: BaseException) -> str:
    """error_line without the type name, where the words before it already say what failed."""
    return error_line(err).partition(": ")[2]


@contextlib.contextmanager
def compile_cache(cache_dir: str | None, record: dict, precision: str):
    """Cold compiles by default: a fresh inductor cache directory (and in-memory caches cleared) per cell.
    A kept directory (`--perf-cache-dir`) lets CI reuse compiles between runs; the record says which.
    A kept directory holds one inductor cache per precision (its Triton kernels are shared: keyed by their
    source): torch 2.11's AOTAutograd cache keys whether autocast is on, not its dtype, so an amp_bf16 cell
    was served amp_fp16's compiled graph (H100, 2026-11-24: its numerics failed, 214 of 298 tensors off)."""
    from torch._inductor.utils import clear_caches

    record["compile_cache"] = "fresh" if cache_dir is None else "persistent"
    directory = tempfile.mkdtemp(prefix="perfgate-inductor-") if cache_dir is None else cache_dir
    saved = {key: os.environ.get(key) for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(directory, precision)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")
    clear_caches()
    try:
        yield
    finally:
        clear_caches()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if cache_dir is None:
            shutil.rmtree(directory, ignore_errors=True)


def clean_up() -> None:
    introspect.reset_compiler()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _measure(spec, cell: Cell, options: RunOptions, record: dict, progress, record_compiled,
             why_dir: Path | None) -> bytes | None:
    """Measure the cell into `record`; returns its saved cache artifacts when options ask for them."""
    device = torch.device(options.device)
    size = spec.size(cell)
    record["batch"] = size.batch
    introspect.reset_compiler()
    state = initial_state(spec, size, options.seed)
    host_batches, batches, record["recompiles_allowed"] = cell_batches(spec, cell, size, options.seed, device)
    # The timed stream: one batch, or for a variable-length model its whole mix of lengths.
    timed = batches if spec.stream > 1 else batches[:1]
    progress(f"{cell.id}: numerics reference")
    reference, reference_kind = _reference_steps(spec, cell, size, state, host_batches[:2], device)

    # Eager side, alone on the device: its memory is what it allocates beyond what was there before.
    memory = Memory(device)
    eager = Side(spec, build_model(spec, size, state, device), cell.phase, cell.precision, device)
    eager_captured = captured_steps(eager, batches)
    eager_step = cycling(eager, timed)
    memory.reset()
    eager_ms, eager_warm = warm_up(eager_step, device, options.plan, len(timed))
    record["peak_mem_eager_mb"] = memory.peak_mb()

    # Rebase first: the compiled side's weights are its own, as the eager side's are counted in its peak.
    memory.rebase()
    compiled = compiled_side(spec, cell, size, state, device, options.fault)
    progress(f"{cell.id}: compiling ({cell.variant})")
    faults.at_compile(options.fault)  # test-only: a hung or crashing compile
    t0 = time.perf_counter()
    compiled_captured = [compiled.captured_step(batches[0], tensors=False)]
    sync(device)
    record["compile_s"] = round(time.perf_counter() - t0, 3)
    record["peak_mem_compile_mb"] = memory.peak_mb()
    first = introspect.compile_counts()
    record.update(graph_count=first["graph_count"], graph_breaks=first["graph_breaks"],
                  break_reasons=first["break_reasons"])
    cache = introspect.cache_counts()  # a kept cache may be warm: say what the first call found there
    record.update(compile_cache_hits=cache["hits"], compile_cache_misses=cache["misses"])
    if first["graph_count"] == 0:
        raise CellFailure(f"ran eager: {cell.variant} compiled no graph at all")
    memory.reset()
    # A stage of its own, so a process killed in a recompile below still keeps the first compile's figures.
    progress(f"{cell.id}: compiled in {record['compile_s']:.1f} s; checking numerics")
    if cell.phase == "train":
        compiled_captured.append(compiled.captured_step(batches[1]))
    with memory.set_aside():
        verdict = judge(compiled_captured, eager_captured, reference, spec.tolerances[cell.precision],
                        reference_kind, initial=state, device=device)
    record["numerics"], record["numerics_detail"] = verdict.pop("verdict"), verdict
    del compiled_captured, eager_captured, reference

    progress(f"{cell.id}: warming up the compiled side on {len(timed)} batch(es)")
    compiled_ms, compiled_warm = warm_up(cycling(compiled, timed), device, options.plan, len(timed))
    compiled_step = faulted(cycling(compiled, timed), options.fault, device, len(timed))
    record["peak_mem_compiled_mb"] = memory.peak_mb()
    record["warmup_steps"] = max(eager_warm, compiled_warm)
    # Re-warm eager: it idled while the compiled side compiled, and clocks drop on an idle GPU.
    warm_up(eager_step, device, options.plan, len(timed))

    steps = steps_per_round(min(eager_ms, compiled_ms), options.plan, len(timed))
    watch = neighbours.Watch() if device.type == "cuda" else None  # other processes on the GPU, around the clocks
    if watch:
        watch.sample()
    progress(f"{cell.id}: timing, {steps} steps per round")
    rounds = interleaved_rounds(eager_step, compiled_step, steps, device, options.plan, record_compiled)
    store_timing(record, rounds)
    progress(f"{cell.id}: device and host clocks")
    clocks.measure_into(record, eager_step, compiled_step, device, len(timed))
    if watch:
        watch.sample()
        record["gpu_neighbours"], record["unfit"] = watch.found, neighbours.unfit_reason(watch.found)
    counts = introspect.compile_counts()
    record["recompiles"], record["recompile_reasons"] = counts["frames"] - first["frames"], counts["recompile_reasons"]
    store_throughput(spec, size, cell, record, lambda: eager_step(0), device)
    if why_dir is not None:
        record["why"] = {"dir": str(why_dir), "compile_log": str(why_dir / "compile.log"),
                         "trace_eager": str(why.trace(eager_step, why_dir / "trace-eager.json", device)),
                         "trace_compiled": str(why.trace(compiled_step, why_dir / "trace-compiled.json", device))}
    # Saved before the in-process warm compile below: the artifacts are what the cold compile left.
    saved = artifacts.save(record) if options.warm_compile == "artifacts" else None
    if options.warm_compile != "off":
        record["compile_warm_s"] = _warm_compile_s(compiled, spec, cell, batches[0], device, options)
    progress(f"{cell.id}: {clocks.summary(record)}, compile {record['compile_s']:.1f} s")
    raise_if_wrong(record)
    return saved


def raise_if_wrong(record: dict) -> None:
    if record["numerics"] != "pass":
        detail = record["numerics_detail"]
        raise CellFailure(f"numerics: {detail['failing']} of {detail['tensors']} tensors off "
                          f"(worst {detail['worst']}, against {detail['reference']})")
    if record["recompiles"] > record["recompiles_allowed"]:
        first_reason = f" ({record['recompile_reasons'][0]})" if record["recompile_reasons"] else ""
        raise CellFailure(f"{record['recompiles']} recompile(s) after the first call; "
                          f"{record['variant']} allows {record['recompiles_allowed']}{first_reason}")


def faulted(step, fault, device: torch.device, stream: int):
    """The compiled step with the test-only fault planted; percentage faults calibrate on the warm step."""
    def calibrate(clock: str) -> float:
        measure = clocks.device_ms if clock == "device" else clocks.host_ms
        return measure(step, device, stream)
    return faults.slowed(step, fault, device, calibrate)


def cycling(side: Side, stream: list):
    return lambda i: side.step(stream[i % len(stream)])


def captured_steps(side: Side, batches: list) -> list[dict]:
    """What numerics compares. Training: the loss of two optimizer steps, gradients and parameters of the
    second. Inference: the outputs of one batch (no state changes between batches)."""
    if side.phase == "infer":
        return [side.captured_step(batches[0])]
    return [side.captured_step(batches[0], tensors=False), side.captured_step(batches[1])]


def _reference_steps(spec, cell, size, state, host_batches, device):
    """Two captured steps of a higher-precision copy: fp64 where it fits, else (AMP cells) strict fp32,
    else none (numerics then compares compiled with eager by the fallback tolerance)."""
    choices = [("fp64", torch.float64)] + ([("fp32", torch.float32)] if PRECISIONS[cell.precision].amp else [])
    notes = []
    for kind, dtype in choices:
        try:
            with strict_fp32():
                side = Side(spec, build_model(spec, size, state, device, dtype), cell.phase, "fp32", device)
                return captured_steps(side, [to_device(b, device, dtype) for b in host_batches]), kind
        except (torch.OutOfMemoryError, RuntimeError) as err:
            notes.append(f"{kind}: {error_message(err)[:120]}")
        finally:
            side = None
            clean_up()
    return None, "eager (" + "; ".join(notes) + ")"


@contextlib.contextmanager
def strict_fp32():
    """Full fp32 for the numerics reference, then the exact state before. torch's matmul setting
    (torch.backends.cuda.matmul.fp32_precision, where torch has it) is restored as it was: going back
    through set_float32_matmul_precision would turn its "none" into "ieee", which is part of inductor's
    cache key, so a cell would miss a compile that a process without the reference (--perf-precompile)
    had cached."""
    matmul = torch.backends.cuda.matmul
    old = (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32,
           getattr(matmul, "fp32_precision", None))
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.allow_tf32 = False
    try:
        yield
    finally:
        torch.set_float32_matmul_precision(old[0])
        torch.backends.cudnn.allow_tf32 = old[1]
        if old[2] is not None:
            matmul.fp32_precision = old[2]


class Memory:
    """Peak device memory of one side: what it allocated beyond what was resident when it started. The
    absolute peak (not a delta around warm steps) counts a CUDA-graph pool, allocated at capture time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.base = torch.cuda.memory_allocated() if self.cuda else 0
        self.kept = 0  # bytes: the peak before a set-aside block

    def rebase(self) -> None:
        self.base = torch.cuda.memory_allocated() if self.cuda else 0
        self.reset()

    def reset(self) -> None:
        self.kept = 0
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    @contextlib.contextmanager
    def set_aside(self):
        """A block whose allocations are not the side's: the numerics judge, whose float64 temporaries on the
        GPU read as +10 GB on gpt2 infer's compiled peak (11474 MiB for 1348). The peak before it stays."""
        if not self.cuda:
            yield
            return
        kept = torch.cuda.max_memory_allocated()
        try:
            yield
        finally:
            torch.cuda.reset_peak_memory_stats()
            self.kept = max(self.kept, kept)

    def peak_mb(self) -> float | None:
        if not self.cuda:
            return None
        return round((max(torch.cuda.max_memory_allocated(), self.kept) - self.base) / MIB, 1)


def store_timing(record: dict, rounds) -> None:
    interval = rounds.speedup()
    record.update(
        steps_per_round=rounds.steps, rounds=len(rounds.ratios),
        eager_round_ms=[round(x, 4) for x in rounds.eager_ms],
        compiled_round_ms=[round(x, 4) for x in rounds.compiled_ms],
        eager_ms=round(statistics.median(rounds.eager_ms), 4),
        compiled_ms=round(statistics.median(rounds.compiled_ms), 4),
        speedup=round(interval.median, 4), speedup_lo=round(interval.lo, 4), speedup_hi=round(interval.hi, 4),
    )


def store_throughput(spec, size, cell, record: dict, eager_step, device) -> None:
    units = size.batch * size.units_per_sample
    record["throughput_unit"] = spec.unit
    record["throughput_eager"] = round(units / (record["eager_ms"] / 1e3), 1)
    record["throughput_compiled"] = round(units / (record["compiled_ms"] / 1e3), 1)
    flops = introspect.flops_per_step(eager_step)
    record["flops_per_step"] = flops
    peak = peak_tflops(record["env"].get("gpu"), cell.precision, record["env"].get("tf32"))
    for side in ("eager", "compiled"):
        tflops = flops / (record[f"{side}_ms"] / 1e3) / 1e12
        record[f"tflops_{side}"] = round(tflops, 2)
        record[f"mfu_{side}"] = round(tflops / peak, 4) if peak else None


def _warm_compile_s(compiled: Side, spec, cell, batch, device, options) -> float:
    """The same compile again in a fresh dynamo with the on-disk caches (FX graph, AOTAutograd, autotune)
    warm and the in-memory ones cleared: what the next process on this machine pays."""
    from torch._inductor.utils import clear_caches

    introspect.reset_compiler()
    clear_caches()
    compiled.compile(VARIANTS[cell.variant], options.fault)
    t0 = time.perf_counter()
    compiled.step(batch)
    sync(device)
    return round(time.perf_counter() - t0, 3)
