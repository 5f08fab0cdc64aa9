"""Fill a kept inductor cache with the selected cells' compiles, and the reference cache with their references,
several processes at once, before the run times them (--perf-precompile N with --perf-cache-dir). Timing needs
the GPU alone; compiling does not: on an H100 lease, 15-16 max-autotune and reduce-overhead compiles in 5-6
processes finished 3.4-3.8x faster than one after another would have (docs/matrix.md, 2026-11-24). Each
process (perfgate.measure.child, handed its share of the cells as jobs of purpose "precompile") builds a cell's
compiled side as the cell does (its model, batches, precision, TF32 policy, cache directory), takes the steps
that compile it, and stores the cell's fp64 reference where the cell will look for it. The cells then find
their compiles in the cache: their records say so (compile_cache_hits), so a warm first call is never read as
a cold one. Their reference is read back, not computed (reference_cache "hit").

The processes take the visible GPUs in turn: a runner's GPUs all compile, as they all time.

What the processes chose by timing is not kept: inductor picks each generated Triton kernel's launch config
by timing the candidates at its first call and keeps the pick beside the kernel (`*.best_config`), and 4
processes sharing one GPU time each other's noise. On one H100 lease (AU, 2026-11-25) both runs from such a
cache read vit_b16 infer's compiled GPU step 4.6 % slower (6.66-6.67 ms) than two other leases and the 13
machines before the rebuild (6.33-6.41 ms), with eager unchanged. So the picks a precompile wrote are removed
when it ends, and a cell's first call picks again with the GPU to itself, keeping its pick for later runs. A
choice baked into the compiled graph itself (max-autotune's GEMM templates, the padding of a matmul) cannot
be removed this way: see docs/time-to-verdict.md.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
import time
from pathlib import Path

from perfgate.core.job import Job, RunOptions
from perfgate.core.matrix import VARIANTS, Cell
from perfgate.core.record import error_line
from perfgate.measure.launch import first_gpu, import_path, kill_groups, spawn, stderr_tail, supervise
from perfgate.measure.precompiled import PICKS

RUNNING = "perfgate-precompiling"  # inside the kept cache: a file per running precompile, named by its pid


def wanted(cell: Cell, has_cuda: bool) -> bool:
    """Cells whose compile a cache can hold: inductor's (aot_eager and cudagraphs compile in seconds and
    cache nothing); not a data-parallel cell, whose ranks compile under DDP in processes of their own; not a
    GPU cell without a GPU (it skips)."""
    return (
        VARIANTS[cell.variant].backend == "inductor" and cell.phase != "ddp" and (has_cuda or cell.device_kind != "gpu")
    )


def cuda_devices() -> list[str]:
    """Where GPU cells can compile: every visible CUDA device (the children take them in turn)."""
    import torch

    return [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def run(
    shares: list[list[Cell]],
    *,
    cache_dir: str,
    registry: str,
    devices: list[str],
    tf32: bool,
    out: Path,
    limit_s: float,
    reference_dir: str | None = None,
) -> list[dict]:
    """Compile each share of cells in a process of its own, all at once, share k's GPU cells on
    devices[k % len(devices)]; every process stops at `limit_s`. Returns one line per cell (status ok, or
    failed with its reason), also written to `out` (a JSON list)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    forget_abandoned(cache_dir)
    started, procs, results = time.monotonic(), [], []
    started_at = time.time()
    with _running(cache_dir), tempfile.TemporaryDirectory(prefix="perfgate-precompile-") as scratch:
        for index, share in enumerate(s for s in shares if s):
            lines = Path(scratch) / f"{index}.jsonl"
            # The process sees its GPU as cuda:0, as every cell's process does (launch.first_gpu): one cache
            # entry a graph, whichever GPU compiles it and whichever runs it.
            device, environ = first_gpu(devices[index % len(devices)], len(devices)) if devices else ("cpu", {})
            proc = spawn(Path(scratch) / str(index), f"precompile process {index + 1}", **environ)
            for n, cell in enumerate(share):
                options = RunOptions(
                    device="cpu" if cell.device_kind == "cpu" else device,
                    cache_dir=cache_dir,
                    reference_dir=reference_dir,
                    registry=registry,
                )
                job = Job(
                    cell=cell,
                    options=options,
                    tf32=tf32,
                    purpose="precompile",
                    results_path=str(lines),
                    limit_s=limit_s,
                    sys_path=tuple(import_path()),
                )
                proc.send(job.to_json(), last=n == len(share) - 1)
            procs.append((share, lines, proc))
        try:
            failure = supervise([p for *_, p in procs], limit_s=limit_s, deaths_fail=False, started=started)
        except BaseException:  # Ctrl-C, a CI step's timeout: no process outlives the run; what it did is kept
            for share, lines, _proc in procs:
                results += _lines(share, lines, "interrupted", stopped=True)
            _write(out, results)
            raise
        finally:  # one limit: every process left is past it; then the picks they timed on a shared GPU go
            kill_groups(*(p for *_, p in procs))
            forget_timed_picks(cache_dir, started_at)
        timed_out = failure is not None
        failure = failure and failure.partition(" while ")[0]  # its processes report no stage: "timed out after S s"
        for share, lines, proc in procs:
            why = failure if timed_out else (stderr_tail(proc.stderr)[-1:] or [f"exit code {proc.poll()}"])[0]
            results += _lines(share, lines, why, stopped=timed_out)
    _write(out, results)
    return results


def forget_timed_picks(cache_dir: str, since: float) -> int:
    """Remove the kernel launch configs (`*.best_config`) written under `cache_dir` at or after `since`
    (Unix s): the precompile's processes timed them on a shared GPU. Returns how many were removed."""
    removed = 0
    for path in Path(cache_dir).rglob("*.best_config"):
        try:
            if path.stat().st_mtime >= since:
                path.unlink()
                removed += 1
        except FileNotFoundError:
            continue
    return removed


@contextlib.contextmanager
def _running(cache_dir: str):
    """A file named by this process's pid in RUNNING while the precompile runs: a kill leaves it behind."""
    mark = Path(cache_dir) / RUNNING / str(os.getpid())
    mark.parent.mkdir(parents=True, exist_ok=True)
    mark.touch()
    try:
        yield
    finally:
        mark.unlink(missing_ok=True)


def forget_abandoned(cache_dir: str) -> int:
    """What a precompile killed before its end left (SIGKILL: a second Ctrl-C, a runner's deadline): the picks
    its processes timed on a shared GPU, and the picks markers written since, which would vouch for them as timed
    alone. Its mark: a file named by its pid in RUNNING, written as it began, whose process is gone. Returns
    how many picks were removed."""
    removed = 0
    for mark in (Path(cache_dir) / RUNNING).glob("*"):
        try:
            pid, since = int(mark.name), mark.stat().st_mtime
        except (OSError, ValueError):
            continue
        if _alive(pid):
            continue
        removed += forget_timed_picks(cache_dir, since)
        for picked in (Path(cache_dir) / PICKS).glob("*.json"):
            with contextlib.suppress(OSError):
                if picked.stat().st_mtime >= since:
                    picked.unlink()
        mark.unlink(missing_ok=True)
    return removed


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's
        return True
    return True


def _lines(share: list[Cell], lines: Path, why: str, stopped: bool = False) -> list[dict]:
    """What a child wrote for its share, and a failed line with `why` for each cell it did not finish. Where
    the child was `stopped` (killed now: the limit, an interrupt), the cell it was compiling says for how long
    (`stopped_after_s`): a lower bound on its compile, the figure a known issue needs ("max-autotune compile
    > 505 s"); the cells after it say "not started"."""
    written = [json.loads(line) for line in lines.read_text().splitlines()] if lines.exists() else []
    done = [line for line in written if "status" in line]
    started = {line["cell"]: line["started_at"] for line in written if "started_at" in line}
    seen = {line["cell"] for line in done}
    missing = []
    for cell in (c for c in share if c.id not in seen):
        line = {"cell": cell.id, "status": "failed", "reason": f"not compiled: {why[:300]}"}
        if cell.id not in started:
            line["reason"] += " (not started)"
        elif stopped:
            line["stopped_after_s"] = round(time.time() - started[cell.id], 1)
        missing.append(line)
    return done + missing


def _write(out: Path, results: list[dict]) -> None:
    # One JSON list, not JSON lines: a results folder's *.jsonl are cell records, which these are not.
    out.write_text(json.dumps(results, indent=1) + "\n")


def compile_into(job: Job) -> None:
    """In a precompile process: the job's cell compiled into its kept cache and its reference stored, with a
    line before ({"cell", "started_at"}: Unix s, for _lines) and after (the cell's outcome) in the share's file:
    a process killed at its limit keeps what it did."""
    with open(job.results_path, "a") as sink:
        sink.write(json.dumps({"cell": job.cell.id, "started_at": time.time()}) + "\n")
    line = compile_cell(job)
    with open(job.results_path, "a") as sink:
        sink.write(json.dumps(line) + "\n")


def compile_cell(job: Job) -> dict:
    """The cell's compiled side, built and stepped as perfgate.measure.cell does, into the job's cache; and its
    reference, into the reference cache (where the cell will read it)."""
    from perfgate.core import zoo
    from perfgate.measure import introspect, reference
    from perfgate.measure.compile_cache import clean_up, compile_cache
    from perfgate.measure.devices import start_cell
    from perfgate.measure.steps import cell_batches, compiled_side, initial_state, sync

    cell, options = job.cell, job.options
    line = {"cell": cell.id}
    started = time.perf_counter()
    try:
        spec = zoo.load(options.registry)[cell.model]
        device = start_cell(options.device, job.tf32)
        size = spec.size(cell)
        with compile_cache(options.cache_dir, cell.precision):
            introspect.reset_compiler()
            state = initial_state(spec, size, options.seed, device)
            host_batches, batches, _ = cell_batches(spec, cell, size, options.seed, device)
            side = compiled_side(spec, cell, size, state, device, None)
            first = time.perf_counter()
            side.captured_step(batches[0], tensors=False)
            sync(device)
            line["first_call_s"] = round(time.perf_counter() - first, 3)
            for batch in batches[1:] + batches[:1]:  # every length of a stream; a train step's second call
                side.captured_step(batch, tensors=False)
            sync(device)
            line.update(introspect.cache_counts(), status="ok")
            side = None
            clean_up()
            if options.reference_dir and cell.phase != "ddp":
                key = reference.key(spec, cell, size, options.seed, host_batches[:2], device)
                line["reference_cache"] = reference.cached(
                    options.reference_dir,
                    key,
                    lambda: reference.compute(spec, cell, size, state, host_batches[:2], device),
                )[2]
    except Exception as err:  # noqa: BLE001 - one cell's failure is its line, the next cell still compiles
        line.update(status="failed", reason=error_line(err))
    finally:
        clean_up()
    line["wall_s"] = round(time.perf_counter() - started, 3)
    return line
