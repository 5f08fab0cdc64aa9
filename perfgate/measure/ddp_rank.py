"""One rank of a data-parallel cell, in its own process (started by perfgate.measure.ddp): eager DDP against
compiled DDP on this rank's shard of the data, then the same step on one device for the scaling figure.

Every rank runs the same steps in the same order, as DDP's collectives require; only rank 0 judges numerics
and reports. Timing is the single-device cell's (warm-up until steady, interleaved rounds), each timed region
taken as the slowest rank's (an all-reduce MAX of its ms), so every rank makes the same warm-up and round
decisions and the step's time is what the slowest rank makes everyone wait for. After the timed rounds each
rank profiles where its step's time goes: compute, communication, GPU idle (perfgate.measure.ddp_clocks).

Numerics: the reference is DDP done in one process in fp64 (else strict fp32): each step runs every rank's
batch, averages their gradients (what DDP's all-reduce computes) and steps once. Rank 0's eager and compiled
DDP steps are judged against it by the model's tolerance rule, and after those steps every rank must hold
the same parameters. Graph breaks are the model's own, from the one-device compile; the breaks inside DDP's
forward wrapper and the graphs DDPOptimizer splits at bucket boundaries are counted apart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as _dt
import json
import logging
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from perfgate.core.matrix import PRECISIONS, VARIANTS, Cell
from perfgate.core.record import UNFINISHED, error_line, new_record
from perfgate.measure import cell as single
from perfgate.measure import ddp_clocks, faults, introspect, neighbours
from perfgate.measure.ddp import rank_device
from perfgate.measure.children import die_with_parent
from perfgate.measure.numerics import judge
from perfgate.measure.steps import Side, Task, build_model, cell_batches, initial_state, sync, to_device
from perfgate.measure.timing import interleaved_rounds, steps_per_round, time_steps, warm_up

DDP_LOGGER = "torch._dynamo.backends.distributed"  # where DDPOptimizer says how many buckets it made
# DDP's bucket cap on the CPU tier, MB: DDPOptimizer refuses a cap below DDP's first bucket (1 MB), and the
# tiny models are a few MB, so the smallest cap it takes is what makes them split at all. GPUs: DDP's 25 MB.
CPU_BUCKET_MB = 1.0


def slowest(step, n: int, device: torch.device) -> float:
    """ms per step of `n` steps on this rank, reduced to the slowest rank's."""
    return _max_over_ranks(time_steps(step, n, device), device)


def _max_over_ranks(value: float, device: torch.device) -> float:
    t = torch.tensor([value], dtype=torch.float64, device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


@contextlib.contextmanager
def _bucket_counts():
    """The bucket count of each graph DDPOptimizer splits, from its INFO line (kept off the console)."""
    found: list[int] = []

    class Catch(logging.Handler):
        def emit(self, rec):
            if "DDPOptimizer used bucket cap" in str(rec.msg) and len(rec.args or ()) >= 2:
                found.append(int(rec.args[1]))

    log, handler = logging.getLogger(DDP_LOGGER), Catch()
    saved = log.level, log.propagate
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        yield found
    finally:
        log.removeHandler(handler)
        log.setLevel(saved[0])
        log.propagate = saved[1]


def _unwrapped(captured: dict) -> dict:
    """DDP's parameter names ("grad.module.x") as the plain model's ("grad.x")."""
    return {key.replace(".module.", ".", 1) if key.startswith(("grad.module.", "param.module.")) else key: value
            for key, value in captured.items()}


def _ddp_side(spec, cell, size, state, device, bucket_mb: float) -> Side:
    model = build_model(spec, size, state, device)
    wrapped = DDP(model, device_ids=[device.index] if device.type == "cuda" else None, bucket_cap_mb=bucket_mb)
    return Side(spec, wrapped, "train", cell.precision, device)


def _reference(spec, cell, size, state, host_batches: list[list[dict]], device, world: int):
    """DDP in one process: two steps, each averaging every rank's gradient, in fp64, else (AMP cells) strict
    fp32, else none (as a one-device cell's reference)."""
    amp = PRECISIONS[cell.precision].amp
    choices = [("fp64", torch.float64)] + ([("fp32", torch.float32)] if amp else [])
    notes = []
    for kind, dtype in choices:
        try:
            with single.strict_fp32():
                model = build_model(spec, size, state, device, dtype).train()
                optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr)
                task, captured = Task(model, spec.loss), []
                for step in range(2):
                    losses = []
                    for batches in host_batches:  # rank by rank, as DDP's ranks do at once
                        loss = task(to_device(batches[step], device, dtype))
                        (loss / world).backward()
                        losses.append(loss.detach())
                    out = {"loss": losses[0].cpu()}  # rank 0's loss: the one judged against rank 0's
                    if step == 1:
                        out.update({f"grad.{n}": p.grad.detach().cpu() for n, p in model.named_parameters()
                                    if p.grad is not None})
                    optimizer.step()
                    optimizer.zero_grad(set_to_none=True)
                    if step == 1:
                        out.update({f"param.{n}": p.detach().cpu() for n, p in model.named_parameters()})
                    captured.append(out)
                return captured, f"{kind} single-process DDP"
        except (torch.OutOfMemoryError, RuntimeError) as err:
            notes.append(f"{kind}: {error_line(err)[:120]}")
        finally:
            model = optimizer = task = None
            single.clean_up()
    return None, "eager (" + "; ".join(notes) + ")"


def _param_spread(side: Side, device: torch.device, world: int) -> float:
    """max |parameter - the ranks' mean| over every element: 0 where every rank holds the same parameters."""
    flat = torch.cat([p.detach().double().flatten() for p in side.model.module.parameters()])
    mean = flat.clone()
    dist.all_reduce(mean)
    spread = (flat - mean / world).abs().max().reshape(1)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return float(spread.item())


def measure(spec, cell: Cell, options, record: dict, rank: int, world: int, device: torch.device,
            progress) -> None:
    """Measure this rank's share into `record` (rank 0's is the cell's)."""
    variant = VARIANTS[cell.variant]
    size = spec.size(cell)
    record["batch"] = size.batch
    bucket_mb = 25.0 if device.type == "cuda" else CPU_BUCKET_MB
    introspect.reset_compiler()
    state = initial_state(spec, size, options.seed)
    # Each rank its own data: seed + rank. Rank 0 also makes every rank's host batches for the reference.
    _, batches, _ = cell_batches(spec, cell, size, options.seed + rank, device)
    timed = batches[:1]
    reference, reference_kind = None, "not judged on this rank"
    if rank == 0:
        progress(f"{cell.id}: numerics reference ({world} ranks in one process)")
        all_host = [cell_batches(spec, cell, size, options.seed + r, torch.device("cpu"))[0] for r in range(world)]
        reference, reference_kind = _reference(spec, cell, size, state, all_host, device, world)

    memory = single.Memory(device)
    eager = _ddp_side(spec, cell, size, state, device, bucket_mb)
    eager_captured = [_unwrapped(c) for c in single.captured_steps(eager, batches)]
    eager_step = single.cycling(eager, timed)
    memory.reset()
    progress(f"{cell.id}: warming up eager DDP")
    warm_up(eager_step, device, options.plan, clock=slowest)
    eager_peak = memory.peak_mb()

    memory.rebase()
    patches = {"optimize_ddp": variant.ddp, "compiled_autograd": variant.compiled_autograd}
    with torch._dynamo.config.patch(**patches), _bucket_counts() as buckets:
        compiled = _ddp_side(spec, cell, size, state, device, bucket_mb)
        compiled.compile(variant, options.fault)
        progress(f"{cell.id}: compiling DDP ({cell.variant}, {world} ranks)")
        if rank == world - 1:  # test-only: a hung or crashing rank (the last: rank 0 then waits on it)
            faults.at_compile(options.fault)
        t0 = time.perf_counter()
        compiled_captured = [_unwrapped(compiled.captured_step(batches[0], tensors=False))]
        sync(device)
        record["compile_s"] = round(_max_over_ranks(time.perf_counter() - t0, device), 3)
        first = introspect.compile_counts()
        cache = introspect.cache_counts()  # this rank's: each rank compiles its own graphs
        record.update(compile_cache_hits=cache["hits"], compile_cache_misses=cache["misses"])
        if first["graph_count"] == 0:
            raise single.CellFailure(f"ran eager: {cell.variant} compiled no graph at all")
        if variant.compiled_autograd and first["autograd_captures"] == 0:
            raise single.CellFailure(f"ran eager in part: {cell.variant} traced no backward (compiled autograd "
                                     f"captured nothing; DDP's Python reducer would all-reduce per parameter)")
        progress(f"{cell.id}: compiled in {record['compile_s']:.1f} s; checking numerics")
        compiled_captured.append(_unwrapped(compiled.captured_step(batches[1])))
        record["ranks_param_diff"] = _param_spread(compiled, device, world)
        if rank == 0:
            with memory.set_aside():
                verdict = judge(compiled_captured, eager_captured, reference, spec.tolerances[cell.precision],
                                reference_kind, initial=state, device=device)
            record["numerics"], record["numerics_detail"] = verdict.pop("verdict"), verdict
        del compiled_captured, eager_captured, reference

        progress(f"{cell.id}: warming up compiled DDP")
        compiled_ms, compiled_warm = warm_up(single.cycling(compiled, timed), device, options.plan, clock=slowest)
        compiled_step = single.faulted(single.cycling(compiled, timed), options.fault, device, 1)
        compiled_peak = memory.peak_mb()
        eager_ms, eager_warm = warm_up(eager_step, device, options.plan, clock=slowest)
        record["warmup_steps"] = max(eager_warm, compiled_warm)
        steps = steps_per_round(min(eager_ms, compiled_ms), options.plan)
        # Each rank watches its own GPU; the launcher's process tree (the other ranks) is this cell's own.
        watch = neighbours.Watch(root=os.getppid()) if device.type == "cuda" else None
        if watch:
            watch.sample()
        progress(f"{cell.id}: timing DDP, {steps} steps per round, the slowest of {world} ranks")
        rounds = interleaved_rounds(eager_step, compiled_step, steps, device, options.plan, clock=slowest)
        single.store_timing(record, rounds)
        progress(f"{cell.id}: profiling where a DDP step's time goes, on every rank")
        ddp_clocks.measure_into(record, eager_step, compiled_step, device, world)
        if watch:
            watch.sample()
        counts = introspect.compile_counts()
    # Recompiles are guards that failed: DDP's wrapper also compiles new frames on later steps (the code
    # after its breaks runs other branches once warm), each for the first time, which are no recompile.
    # Compiled autograd traces a backward again where its cache missed: a recompile of the backward.
    backward_again = counts["autograd_captures"] - first["autograd_captures"]
    record["recompiles"] = counts["guard_failures"] - first["guard_failures"] + backward_again
    record["recompile_reasons"] = counts["recompile_reasons"] + (
        [f"compiled autograd traced the backward again ({backward_again}x after the first step)"]
        if backward_again else [])
    record.update(graph_count=first["graph_count"], ddp_buckets=sum(buckets) if buckets else None,
                  ddp_splits=sum(buckets) - len(buckets) if buckets else 0)
    ddp_breaks, ddp_ops = first["graph_breaks"], first["ops"]
    peaks = [None] * world
    dist.all_gather_object(peaks, (eager_peak, compiled_peak))
    del eager, compiled, eager_step, compiled_step
    single.clean_up()

    _one_device(spec, cell, size, state, batches, device, options, record, progress)
    if watch:
        watch.sample()
        _store_neighbours(record, watch.found, world)
    record["ddp_wrapper_breaks"] = max(0, ddp_breaks - record["graph_breaks"])
    # DDP's forward is not traced (dynamo skips its wrapper): the model inside is compiled only where dynamo
    # can start a frame there. A model whose forward it skips as well (a bare nn.Sequential) would run eager
    # under DDP while the loss around it compiles: caught by the traced op counts.
    one_device_ops = record.pop("one_device_ops")
    if ddp_ops < one_device_ops:
        raise single.CellFailure(f"ran eager in part: compiled DDP traced {ddp_ops} ops into graphs, the same "
                                 f"step on one device {one_device_ops}")
    record["peak_mem_eager_mb_ranks"] = [p[0] for p in peaks]
    record["peak_mem_compiled_mb_ranks"] = [p[1] for p in peaks]
    known = [p for p in peaks if p[0] is not None]
    record["peak_mem_eager_mb"] = max(p[0] for p in known) if known else None
    record["peak_mem_compiled_mb"] = max(p[1] for p in known) if known else None


def _store_neighbours(record: dict, found: list[dict] | None, world: int) -> None:
    """Every rank's neighbours in the record (a collective: every rank calls it); the cell is unfit if any
    rank's GPU had one."""
    founds: list = [None] * world
    dist.all_gather_object(founds, found)
    record["gpu_neighbours"] = neighbours.merged(founds)
    record["unfit"] = neighbours.unfit_reason(record["gpu_neighbours"])


def _one_device(spec, cell, size, state, batches, device, options, record: dict, progress) -> None:
    """The same train step on one device without DDP (every rank at once, each on its own device): the
    model's own graph breaks, FLOPs and the single-device step times the scaling figures divide by."""
    variant, world = VARIANTS[cell.variant], record["world_size"]
    introspect.reset_compiler()
    progress(f"{cell.id}: the same step on one device, for the scaling figure")
    eager = Side(spec, build_model(spec, size, state, device), "train", cell.precision, device)
    with torch._dynamo.config.patch(compiled_autograd=variant.compiled_autograd):
        compiled = Side(spec, build_model(spec, size, state, device), "train", cell.precision, device)
        compiled.compile(variant)
        compiled.step(batches[0])
        counts = introspect.compile_counts()
        record.update(graph_breaks=counts["graph_breaks"], break_reasons=counts["break_reasons"],
                      one_device_ops=counts["ops"])
        eager_step, compiled_step = single.cycling(eager, batches[:1]), single.cycling(compiled, batches[:1])
        short = dataclasses.replace(options.plan, min_rounds=min(5, options.plan.min_rounds),
                                    max_rounds=min(9, options.plan.max_rounds))
        e_ms, _ = warm_up(eager_step, device, short, clock=slowest)
        c_ms, _ = warm_up(compiled_step, device, short, clock=slowest)
        rounds = interleaved_rounds(eager_step, compiled_step, steps_per_round(min(e_ms, c_ms), short), device,
                                    short, clock=slowest)
    record["single_eager_ms"] = round(sorted(rounds.eager_ms)[len(rounds.eager_ms) // 2], 4)
    record["single_compiled_ms"] = round(sorted(rounds.compiled_ms)[len(rounds.compiled_ms) // 2], 4)
    for side in ("eager", "compiled"):
        record[f"scaling_{side}"] = round(world * record[f"single_{side}_ms"] / record[f"{side}_ms"], 4)
    # Throughput of all ranks together; FLOPs and MFU per rank (one GPU's share of the step).
    single.store_throughput(spec, size, cell, record, lambda: eager_step(0), device)
    for side in ("eager", "compiled"):
        record[f"throughput_{side}"] = round(world * record[f"throughput_{side}"], 1)
    del eager, compiled
    single.clean_up()


def main(job_dir: Path, rank: int) -> None:
    die_with_parent()
    job = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
    sys.path[:] = job["sys_path"]
    import importlib

    from perfgate.core import zoo
    from perfgate.measure.cell import RunOptions
    from perfgate.measure.devices import start_cell

    importlib.import_module("torch._inductor.compile_fx")  # not counted as compile time (as isolate does)
    cell, world = Cell(**job["cell"]), job["world"]
    options = RunOptions.from_json(job["options"])
    spec = zoo.load(options.registry)[cell.model]
    device = start_cell(rank_device(options.device, rank), bool(job["env"].get("tf32")))
    dist.init_process_group("nccl" if device.type == "cuda" else "gloo", init_method=f"file://{job_dir}/store",
                            rank=rank, world_size=world, timeout=_dt.timedelta(seconds=job["limit_s"]),
                            **({"device_id": device} if device.type == "cuda" else {}))
    events = (job_dir / "events.jsonl").open("a", encoding="utf-8") if rank == 0 else None
    record = new_record(cell, job["env"])
    record.update(world_size=world, started_at=_dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"))
    started = time.perf_counter()

    def emit(event: dict) -> None:
        if events is not None:
            events.write(json.dumps(event) + "\n")
            events.flush()

    def progress(message: str) -> None:
        emit({"progress": message})
        partial = dict(record, wall_s=round(time.perf_counter() - started, 2),
                       reason=f"{UNFINISHED}: the ranks ended during '{message}'")
        emit({"checkpoint": partial})

    try:
        with single.compile_cache(options.cache_dir, record, cell.precision):
            measure(spec, cell, options, record, rank, world, device, progress)
        if rank == 0:  # the judged rank: the others' records are not the cell's
            single.raise_if_wrong(record)
        if record["ranks_param_diff"] > 0:
            raise single.CellFailure(f"the ranks disagree after two steps: a parameter differs from the ranks' "
                                     f"mean by {record['ranks_param_diff']:.3g}")
        record["status"], record["reason"] = "ok", ""
    except single.CellFailure as failure:
        record["status"], record["reason"] = "failed", str(failure)
    except torch.OutOfMemoryError as err:
        record["status"], record["reason"] = "failed", f"out of memory: {single.error_message(err)}"
    record["wall_s"] = round(time.perf_counter() - started, 2)
    emit({"record": record})
    dist.destroy_process_group()


if __name__ == "__main__":
    main(Path(sys.argv[1]), int(sys.argv[2]))
