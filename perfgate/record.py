"""The result record of one cell, and the JSON-lines stream it is written to. Imports no torch.

A record is one flat JSON object. Times are milliseconds per step, compile times seconds, memory MiB,
FLOPs per step, throughput in the model's own unit per second. Absent or not-measured values are null.

    schema            int, RECORD_SCHEMA. 3: the device and host clocks below; 2: the compiled peaks count
                      the compiled side's own weights; 1 (before 922663c) left them out, so its
                      peak_mem_compiled_mb reads low by the weights
    cell              "gpt2-train-inductor_default-amp_bf16" (Cell.id)
    run_id            one id per pytest session, shared by its xdist workers (null: one results file is
                      one run); baselines group records into runs by it
    model, phase, variant, precision, device_kind ("gpu"|"cpu"), tier ("pr"|"nightly")
    status            "ok" | "failed" | "skipped"
    reason            why it failed or was skipped ("" when ok)
    env               {fingerprint, gpu, driver, cuda, torch, triton, transformers, timm, python, host, tf32,
                       cpu_model (the host CPU's model name), cpu_cores (cores this process may use)}
    started_at        ISO-8601 UTC time the cell started
    wall_s            seconds the whole cell took (build, compile, numerics, timing)
    steps_per_round, rounds, warmup_steps
    eager_round_ms    [ms per step, one per round]   eager and compiled rounds are interleaved pairs
    compiled_round_ms [ms per step, one per round]
    eager_ms, compiled_ms                 medians of the above
    speedup, speedup_lo, speedup_hi       median of per-round eager/compiled ratios and its 95 % interval
                      (the wall clock: CUDA events around back-to-back steps, so host stalls count)
    Three clocks per side (perfgate/clocks.py measures the other two, apart from the timed rounds):
    eager_device_ms, compiled_device_ms   GPU busy ms per step: the union of the step's kernel intervals
                                          (CUPTI, through torch.profiler), median over profiled rounds
    eager_device_round_ms, compiled_device_round_ms   [busy ms per step, one per profiled round]
    device_speedup, device_speedup_lo, device_speedup_hi   median of per-round device ratios, 95 % interval
    eager_host_ms, compiled_host_ms       host ms to issue one step: from a synchronized, idle device to the
                                          step call's return, median over rounds of single steps
    eager_host_round_ms, compiled_host_round_ms       [ms, one per round]
    host_speedup, host_speedup_lo, host_speedup_hi    eager host ms / compiled host ms, per round pair
    busy_eager, busy_compiled             device ms / wall ms: the fraction of a step the GPU is busy
    bound_eager, bound                    "device" | "host" (bound_of(busy)); `bound` is the compiled side's
    clocks_note       "" or why a clock is null (no CUDA device, a profiler error)
    compile_s         first compiled call (cold unless `compile_cache` says otherwise), seconds
    compile_warm_s    the same compile again with dynamo reset and inductor caches warm, or null
    compile_artifacts_s      load + first compiled call in a fresh process with empty caches, handed this
                             cell's torch.compiler.save_cache_artifacts() (--perf-warm-compile artifacts)
    compile_artifacts_bytes  size of those artifacts, bytes
    compile_artifacts_hits   FX graph + AOTAutograd cache hits in that process (0: the load went unused)
    compile_artifacts_note   why compile_artifacts_s is null (or the hits 0), e.g. the child's error
    compile_cache     "fresh" (a new inductor cache dir for the cell) | "persistent" (a kept dir)
    graph_count, graph_breaks, recompiles, break_reasons ([str], first few)
    recompiles_allowed  what the variant's shape strategy may cost (bucketed shapes: one per length)
    recompile_reasons   [str], first few: the guard each recompile failed, as dynamo words it
    peak_mem_eager_mb, peak_mem_compiled_mb   warm steps, CUDA-graph pools counted; null on CPU
    peak_mem_compile_mb                       peak while compiling (autotuning), null on CPU
    flops_per_step, tflops_eager, tflops_compiled, mfu_eager, mfu_compiled
    throughput_unit ("tokens"|"images"), throughput_eager, throughput_compiled   per second
    numerics          "pass" | "fail" | "skipped"
    numerics_detail   {reference: "fp64"|"fp32"|"eager", worst: name, checks: [{name, rmse_compiled,
                       rmse_eager, limit, group_scale, ok}]}; group_scale (gradients and parameters only)
                       is the RMS of the step's gradients or parameter updates that part of the limit scales
                       with (spec.Tolerance)
    gate              {speedup_threshold: fraction} overrides from the model's record, may be empty
    why               {dir, compile_log, trace_eager, trace_compiled} paths when profiled, else null
    unfit             "" or why the timings cannot be trusted (xdist workers that shared CPU cores or a GPU):
                      such records never enter a baseline and the gate refuses them (absent in older records)
"""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable, Iterator

from perfgate.validate import CLOCKS, checked, shape_problems

# The clocks are the record's vocabulary as much as validate's: other modules name them record.CLOCKS.
__all__ = ["CLOCKS", "DEVICE_BOUND_BUSY", "MEMORY_SCHEMA", "RECORD_SCHEMA", "UNFINISHED", "RecordFileError",
           "append_record", "bound_of", "error_line", "iter_records", "load_records", "new_record"]

RECORD_SCHEMA = 3
# Records older than this measured the compiled side's memory without its weights (see the schema line).
MEMORY_SCHEMA = 2
UNFINISHED = "did not finish"  # a new record's reason until the cell ends
# A step whose GPU is busy this much of its wall time is device-bound: its wall time follows the GPU's work.
# Below it the GPU waits on the host between kernels, and the wall time follows the host CPU (seen on H100
# leases: resnet50 train compiled 61 % busy moved 2.19x / 1.82x / 1.54x across three machines; eager 97 %).
DEVICE_BOUND_BUSY = 0.9


def bound_of(busy: float | None) -> str | None:
    """"device" or "host" from a busy fraction (device ms / wall ms); None when unknown."""
    if busy is None:
        return None
    return "device" if busy >= DEVICE_BOUND_BUSY else "host"


def error_line(err: BaseException) -> str:
    """An exception as a record's reason or note: its type and first line."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0][:500] if text else '(no message)'}"


def new_record(cell, env: dict, run_id: str | None = None) -> dict:
    """An empty record for `cell` (a perfgate.matrix.Cell), every measured field null."""
    return {
        "schema": RECORD_SCHEMA,
        "cell": cell.id,
        "run_id": run_id,
        "model": cell.model,
        "phase": cell.phase,
        "variant": cell.variant,
        "precision": cell.precision,
        "device_kind": cell.device_kind,
        "tier": cell.tier,
        "status": "failed",
        "reason": UNFINISHED,
        "env": env,
        "started_at": None,
        "wall_s": None,
        "steps_per_round": None,
        "rounds": None,
        "warmup_steps": None,
        "eager_round_ms": [],
        "compiled_round_ms": [],
        "eager_ms": None,
        "compiled_ms": None,
        "speedup": None,
        "speedup_lo": None,
        "speedup_hi": None,
        "eager_device_round_ms": [],
        "compiled_device_round_ms": [],
        "eager_device_ms": None,
        "compiled_device_ms": None,
        "device_speedup": None,
        "device_speedup_lo": None,
        "device_speedup_hi": None,
        "eager_host_round_ms": [],
        "compiled_host_round_ms": [],
        "eager_host_ms": None,
        "compiled_host_ms": None,
        "host_speedup": None,
        "host_speedup_lo": None,
        "host_speedup_hi": None,
        "busy_eager": None,
        "busy_compiled": None,
        "bound_eager": None,
        "bound": None,
        "clocks_note": "",
        "compile_s": None,
        "compile_warm_s": None,
        "compile_artifacts_s": None,
        "compile_artifacts_bytes": None,
        "compile_artifacts_hits": None,
        "compile_artifacts_note": None,
        "compile_cache": None,
        "graph_count": None,
        "graph_breaks": None,
        "recompiles": None,
        "recompiles_allowed": 0,
        "break_reasons": [],
        "recompile_reasons": [],
        "peak_mem_eager_mb": None,
        "peak_mem_compiled_mb": None,
        "peak_mem_compile_mb": None,
        "flops_per_step": None,
        "tflops_eager": None,
        "tflops_compiled": None,
        "mfu_eager": None,
        "mfu_compiled": None,
        "throughput_unit": None,
        "throughput_eager": None,
        "throughput_compiled": None,
        "numerics": "skipped",
        "numerics_detail": {},
        "gate": {},
        "why": None,
        "unfit": "",
    }


def append_record(path: str | os.PathLike, record: dict) -> None:
    """Append one record as a JSON line and flush it to disk, so a crash keeps what was measured."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class RecordFileError(ValueError):
    """A results file that cannot be read as records; the message names the file and line."""


def iter_records(path: str | os.PathLike) -> Iterator[dict]:
    """The records of one results file, each checked (perfgate.validate): a value of the wrong kind raises
    RecordFileError naming the file, line, cell and field; impossible figures on an ok record make it a
    failed cell. A torn last line (a writer killed mid-line) is skipped with a warning."""
    path = Path(path)
    if not path.exists():
        raise RecordFileError(f"results file {path} does not exist")
    with path.open(encoding="utf-8") as fh:
        lines = fh.readlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines) and not line.endswith("\n"):
                # A torn tail: the writer died mid-line (append_record writes whole lines, then fsyncs).
                # Every whole line before it is a record that was measured; keep them.
                warnings.warn(f"{path}:{lineno}: an unfinished last line (a run killed while writing?) "
                              f"was skipped", stacklevel=2)
                return
            raise RecordFileError(f"{path}:{lineno}: not a JSON record ({err.msg})") from None
        problems = shape_problems(record)
        if problems:
            cell = record.get("cell") if isinstance(record, dict) else None
            raise RecordFileError(f"{path}:{lineno}: cell {cell!r}: {'; '.join(problems)}")
        yield checked(record)  # an ok record with NaN, inf or missing figures becomes a failed cell


def load_records(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Records of several files (xdist workers, shards), one per cell: a later record of a cell replaces
    an earlier one (a re-run or a gate's confirm round), so merged files carry no duplicates."""
    by_cell: dict[str, dict] = {}
    for path in paths:
        for record in iter_records(path):
            by_cell[record["cell"]] = record
    return list(by_cell.values())
