"""One rank of a data-parallel cell, in its own process (perfgate.measure.child, started by perfgate.measure.ddp):
eager DDP against compiled DDP on this rank's shard of the data, then the same step on one device for the
scaling figure. It composes the single-device cell's stages (perfgate.measure.pipeline) with its own.

Every rank runs the same steps in the same order, as DDP's collectives require; only rank 0 judges numerics
and reports. Timing is the single-device cell's (warm-up until steady, interleaved rounds), each timed region
taken as the slowest rank's (an all-reduce MAX of its ms), so every rank makes the same warm-up and round
decisions and the step's time is what the slowest rank makes everyone wait for. After the timed rounds each
rank profiles where its step's time goes: compute, communication, GPU idle (perfgate.measure.ddp_clocks).

Numerics: the reference is DDP done in one process in fp64 (else strict fp32): each step runs every rank's
batch, averages their gradients (what DDP's all-reduce computes) and steps once; it is cached as a
single-device cell's is (perfgate.measure.reference). Rank 0's eager and compiled DDP steps are judged against
it by the model's tolerance rule, and after those steps every rank must hold the same parameters. Graph breaks
are the model's own, from the one-device compile; the breaks inside DDP's forward wrapper and the graphs
DDPOptimizer splits at bucket boundaries are counted apart.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

from perfgate.core.matrix import VARIANTS
from perfgate.core.record import error_line
from perfgate.measure import ddp_clocks, introspect, neighbours, record_builder, record_builder_ddp, reference
from perfgate.measure.cell import store_throughput
from perfgate.measure.compile_cache import cache_kind, clean_up, compile_cache
from perfgate.measure.ddp import rank_device
from perfgate.measure.host_speed import HostSpeed
from perfgate.measure.pipeline import (
    CellFailure,
    CellRun,
    StageClock,
    announcer,
    build_eager,
    capture_eager,
    cycling,
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
from perfgate.measure.steps import Side, Task, build_model, cell_batches, to_device
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
    return {
        key.replace(".module.", ".", 1) if key.startswith(("grad.module.", "param.module.")) else key: value
        for key, value in captured.items()
    }


def _ddp_side(run: CellRun) -> Side:
    model = build_model(run.spec, run.size, run.state, run.device)
    bucket_mb = 25.0 if run.device.type == "cuda" else CPU_BUCKET_MB
    wrapped = DDP(model, device_ids=[run.device.index] if run.device.type == "cuda" else None, bucket_cap_mb=bucket_mb)
    return Side(run.spec, wrapped, "train", run.cell.precision, run.device)


def compute_reference(spec, cell, size, state, host_batches: list[list[dict]], device, world: int):
    """DDP in one process: two steps, each averaging every rank's gradient, in fp64, else (AMP cells) strict
    fp32, else none (as a one-device cell's reference)."""
    notes = []
    for kind in reference.kinds(cell.precision):
        dtype = torch.float64 if kind == "fp64" else torch.float32
        model = optimizer = task = None
        try:
            with reference.strict_fp32():
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
                        out.update(
                            {
                                f"grad.{n}": p.grad.detach().cpu()
                                for n, p in model.named_parameters()
                                if p.grad is not None
                            }
                        )
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
            clean_up()
    return None, "eager (" + "; ".join(notes) + ")"


def _param_spread(side: Side, device: torch.device, world: int) -> float:
    """max |parameter - the ranks' mean| over every element: 0 where every rank holds the same parameters."""
    flat = torch.cat([p.detach().double().flatten() for p in side.model.module.parameters()])
    mean = flat.clone()
    dist.all_reduce(mean)
    spread = (flat - mean / world).abs().max().reshape(1)
    dist.all_reduce(spread, op=dist.ReduceOp.MAX)
    return float(spread.item())


def measure(run: CellRun, rank: int, world: int) -> None:
    """This rank's share of the cell, as stages, into run.record (rank 0's is the cell's)."""
    spec, cell, options, record, device = run.spec, run.cell, run.options, run.record, run.device
    variant = VARIANTS[cell.variant]
    prepare(run, batch_seed=options.seed + rank)  # each rank its own data: seed + rank
    run.timed = run.batches[:1]
    if rank == 0:  # rank 0 judges: every rank's host batches, for DDP done in one process
        all_host = [
            cell_batches(spec, cell, run.size, options.seed + r, torch.device("cpu"))[0][:2] for r in range(world)
        ]
        key = reference.key(spec, cell, run.size, options.seed, [b for bs in all_host for b in bs], device, world)
        load_reference(run, lambda: compute_reference(spec, cell, run.size, run.state, all_host, device, world), key)
    build_eager(run, _ddp_side)
    capture_eager(run, adapt=_unwrapped, judged_here=rank == 0)
    warm_eager(run)
    eager_peak = run.memory.peak_mb()

    patches = {"optimize_ddp": variant.ddp, "compiled_autograd": variant.compiled_autograd}
    with torch._dynamo.config.patch(**patches), _bucket_counts() as buckets:

        def make_compiled(r: CellRun) -> Side:
            side = _ddp_side(r)
            side.compile(variant, options.fault)
            return side

        first_compiled_call(
            run,
            make_compiled,
            f"{cell.id}: compiling DDP ({cell.variant}, {world} ranks)",
            adapt=_unwrapped,
            at_compile=rank == world - 1,
        )  # a hung rank: the last
        record_builder_ddp.merge_slowest_compile(record, _max_over_ranks(record["compile_s"], device))
        first = run.first_counts
        if variant.compiled_autograd and first["autograd_captures"] == 0:
            raise CellFailure(
                f"ran eager in part: {cell.variant} traced no backward (compiled autograd "
                f"captured nothing; DDP's Python reducer would all-reduce per parameter)"
            )
        judge_numerics(run, adapt=_unwrapped, judged_here=rank == 0)
        record_builder_ddp.merge_param_spread(record, _param_spread(run.compiled, device, world))
        eager_ms, compiled_ms = warm_compiled(run)
        compiled_peak = record["peak_mem_compiled_mb"]
        # Each rank watches its own GPU; the launcher's process tree (the other ranks) is this cell's own.
        watch = neighbours.Watch(root=os.getppid()) if device.type == "cuda" else None
        host = HostSpeed()  # rank 0's host speed is the record's, as its other figures are
        if watch:
            watch.sample()
        host.sample()
        timed_rounds(run, min(eager_ms, compiled_ms), what=f"timing DDP, the slowest of {world} ranks")
        run.clock.enter("device_clock", f"{cell.id}: profiling where a DDP step's time goes, on every rank")
        timed_ms = {side: record[f"{side}_ms"] for side in ("eager", "compiled")}
        breakdown = ddp_clocks.measure(run.eager_step, run.compiled_step, device, world, timed_ms)
        record_builder_ddp.merge_step_breakdown(record, breakdown)
        run.clock.enter("extras")
        host.sample()
        record_builder.merge_host_speed(record, host.result())
        if watch:
            watch.sample()
        counts = introspect.compile_counts()
        # every rank skips alike (its gradients are all-reduced before the scaler looks): rank 0's count is the record's
        record_builder.merge_scaler_skips(record, run.eager.scaler_skips(), run.compiled.scaler_skips())
    _recompiles(record, first, counts)
    record_builder_ddp.merge_ddp_graphs(record, first["graph_count"], buckets)
    peaks = [None] * world
    dist.all_gather_object(peaks, (eager_peak, compiled_peak))
    run.eager = run.compiled = run.eager_step = run.compiled_step = None
    clean_up()

    one_device_ops = _one_device(run)
    if watch:
        watch.sample()
        _store_neighbours(record, watch.found, world)
    record_builder_ddp.merge_wrapper_breaks(record, max(0, first["graph_breaks"] - record["graph_breaks"]))
    # DDP's forward is not traced (dynamo skips its wrapper): the model inside is compiled only where dynamo
    # can start a frame there. A model whose forward it skips as well (a bare nn.Sequential) would run eager
    # under DDP while the loss around it compiles: caught by the traced op counts.
    if first["ops"] < one_device_ops:
        raise CellFailure(
            f"ran eager in part: compiled DDP traced {first['ops']} ops into graphs, the same "
            f"step on one device {one_device_ops}"
        )
    record_builder_ddp.merge_rank_peaks(record, peaks)


def _recompiles(record: dict, first: dict, counts: dict) -> None:
    """Recompiles are guards that failed: DDP's wrapper also compiles new frames on later steps (the code
    after its breaks runs other branches once warm), each for the first time, which are no recompile.
    Compiled autograd traces a backward again where its cache missed: a recompile of the backward."""
    backward_again = counts["autograd_captures"] - first["autograd_captures"]
    again = [f"compiled autograd traced the backward again ({backward_again}x after the first step)"]
    record_builder.merge_recompiles(
        record,
        counts["guard_failures"] - first["guard_failures"] + backward_again,
        counts["recompile_reasons"] + (again if backward_again else []),
    )


def _store_neighbours(record: dict, found: list[dict] | None, world: int) -> None:
    """Every rank's neighbours in the record (a collective: every rank calls it); the cell is unfit if any
    rank's GPU had one."""
    founds: list = [None] * world
    dist.all_gather_object(founds, found)
    merged = neighbours.merged(founds)
    record_builder.merge_neighbours(record, merged, neighbours.unfit_reason(merged))


def _one_device(run: CellRun) -> int:
    """Stage "scaling": the same train step on one device without DDP (every rank at once, each on its own
    device): the model's own graph breaks, FLOPs and the single-device step times the scaling figures divide by;
    returns the ops that step traced into graphs."""
    spec, cell, record, device, options = run.spec, run.cell, run.record, run.device, run.options
    variant, world = VARIANTS[cell.variant], record["world_size"]
    run.clock.enter("scaling", f"{cell.id}: the same step on one device, for the scaling figure")
    introspect.reset_compiler()
    eager = Side(spec, build_model(spec, run.size, run.state, device), "train", cell.precision, device)
    with torch._dynamo.config.patch(compiled_autograd=variant.compiled_autograd):
        compiled = Side(spec, build_model(spec, run.size, run.state, device), "train", cell.precision, device)
        compiled.compile(variant)
        compiled.step(run.batches[0])
        counts = introspect.compile_counts()
        record_builder_ddp.merge_one_device_graphs(record, counts["graph_breaks"], counts["break_reasons"])
        eager_step, compiled_step = cycling(eager, run.batches[:1]), cycling(compiled, run.batches[:1])
        short = dataclasses.replace(
            options.plan, min_rounds=min(5, options.plan.min_rounds), max_rounds=min(9, options.plan.max_rounds)
        )
        e_ms, _ = warm_up(eager_step, device, short, clock=slowest)
        c_ms, _ = warm_up(compiled_step, device, short, clock=slowest)
        rounds = interleaved_rounds(
            eager_step, compiled_step, steps_per_round(min(e_ms, c_ms), short), device, short, clock=slowest
        )
    record_builder_ddp.merge_scaling(record, rounds, world)
    run.clock.enter("extras")
    # Throughput of all ranks together; FLOPs and MFU per rank (one GPU's share of the step).
    store_throughput(spec, run.size, cell, record, lambda: eager_step(0), device)
    record_builder_ddp.merge_ranks_throughput(record, world)
    del eager, compiled
    clean_up()
    return counts["ops"]


def run_rank(job, rank: int, emit, directory) -> None:
    """This rank's part of the job (perfgate.measure.child calls it): join the process group through a file
    store in the ranks' shared `directory` (no port to race for), measure, and on rank 0 report progress,
    checkpoints and the record through `emit`."""
    import datetime as _dt

    from perfgate.core import zoo
    from perfgate.measure.devices import start_cell

    cell, world, options = job.cell, job.world, job.options
    spec = zoo.load(options.registry)[cell.model]
    device = start_cell(rank_device(options.device, rank), job.tf32)
    dist.init_process_group(
        "nccl" if device.type == "cuda" else "gloo",
        init_method=f"file://{directory}/store",
        rank=rank,
        world_size=world,
        timeout=_dt.timedelta(seconds=job.limit_s),
        **({"device_id": device} if device.type == "cuda" else {}),
    )
    record = start_record(spec, cell, job.env or {}, "ranks")
    record_builder_ddp.merge_world(record, world)
    clock = StageClock(record)
    clock.announce = announcer(
        lambda m: emit({"progress": m}), lambda p: emit({"checkpoint": p}), record, lambda: clock, what="the ranks"
    )
    run = CellRun(spec, cell, options, record, clock, device, step_clock=slowest)

    def stages() -> None:
        record_builder.merge_compile_cache(record, cache_kind(options.cache_dir))
        with compile_cache(options.cache_dir, cell.precision):
            measure(run, rank, world)
        if rank == 0:  # the judged rank: the others' records are not the cell's
            raise_if_wrong(record, numerics_judged=options.numerics)
        if record["ranks_param_diff"] > 0:
            raise CellFailure(
                f"the ranks disagree after two steps: a parameter differs from the ranks' "
                f"mean by {record['ranks_param_diff']:.3g}"
            )

    guarded(record, clock, stages)
    emit({"record": record})
    dist.destroy_process_group()
