"""Is a host-bound cell's process effect set by how that process built the cell, not by the process itself?

A cell's last process pair and the next cell's first, which the same two worker processes measure, read their
B/A floor ratios uncorrelated over the committed A/A records (tools/probes/worker_links.py): no sign that a
process is slow for its life. host_copies.py's synthetic stack showed no effect at all. So this probe
builds a real cell COPIES times in each of PROCESSES processes (its own compiled side each: weights, optimizer,
dynamo's guards and inductor's wrapper, each built after a block of junk that shifts it), and alternates rounds
over processes and copies in random order, as the paired engine alternates its sides. A figure is a copy's
fastest round (ms per step). Copies within a process that spread as widely as the processes' cells do mean the
effect is the build's layout, and fresh builds in one process would sample it; copies that agree mean it is
something else of that cell's time in the process.

    python3 tools/probes/cell_copies.py > copies.json
    CELL_DEVICE=cpu CELL_PHASE=infer CELL_PRECISION=fp32 python3 tools/probes/cell_copies.py   (a CPU check)
    CELL_SEEDS=7,7,7,7,r,r,r,r CELL_COPIES=1 python3 tools/probes/cell_copies.py   (one string hash seed or each its own)
    CELL_MODES=plain,plain,counts,counts python3 tools/probes/cell_copies.py   (what the engine's worker did first)
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import tempfile
import time

PROCESSES = int(os.environ.get("CELL_PROCESSES", "2"))
COPIES = int(os.environ.get("CELL_COPIES", "4"))
ROUNDS = int(os.environ.get("CELL_ROUNDS", "30"))
STEPS = int(os.environ.get("CELL_STEPS", "1"))  # a round: resnet50 train's ~28 ms step on an H200
WARM = 15
MODEL = os.environ.get("CELL_MODEL", "resnet50")
PHASE = os.environ.get("CELL_PHASE", "train")
PRECISION = os.environ.get("CELL_PRECISION", "amp_bf16")
DEVICE = os.environ.get("CELL_DEVICE", "cuda")
# 1: each copy its own load of the compiled code (inductor's in-process caches cleared between copies). On the
# H200 85d87eda the copies of one process shared that load, and segformer_b2 infer's two processes read 4.25 %
# apart with each one's copies within 2.3-3.4 %: is the effect in the loaded code?
FRESH_CODE = os.environ.get("CELL_FRESH_CODE") == "1"
# One entry a process (host_copies.launch): "0,0,0,0,r,r,r,r" starts four with one string hash seed and four with
# their own. Do processes that share the seed share the floor? Sets CELL_PROCESSES to its length.
SEEDS = [s for s in os.environ.get("CELL_SEEDS", "").split(",") if s] or None
if SEEDS:
    PROCESSES = len(SEEDS)
# One entry a process: what it does to each copy once built and warm, before its timed rounds, as the paired
# engine's worker does in a cell's preparation. plain: nothing; counts: the engine's counts stage
# (perfgate.measure.counts.count_side: sys.monitoring or sys.setprofile, a torch.profiler session with CUPTI, the
# instruction counters); profiler: that profiler session alone; monitor: the Python-call hook alone; layout: the
# device rounds' fresh layout (perfgate.measure.layout: the allocator's cache emptied, a pad held, then given
# back and emptied again); eager: an eager side built beside the copies, one eager step untimed ahead of each
# round, as the engine's worker alternates eager and compiled rounds; pinned: every thread of the worker on
# CELL_PIN_CPUS (default 2,3), the same CPUs for every pinned worker. The engine's
# A/A process pairs read host-bound compiled wall floors 13 % apart (rms) where this probe's plain processes read
# about 1 %: does something the worker did before its rounds leave a process slower? (A profiler session did, with
# CUPTI left attached: perfgate now detaches it, so TEARDOWN_CUPTI=0 in the environment shows the old way.)
MODES = [m for m in os.environ.get("CELL_MODES", "").split(",") if m] or None
MODE_CHOICES = ("plain", "counts", "profiler", "monitor", "layout", "eager", "pinned")
if MODES:
    bad = [m for m in MODES if m not in MODE_CHOICES]
    if bad:
        raise SystemExit(f"CELL_MODES: {bad[0]!r} is not one of {', '.join(MODE_CHOICES)}")
    if SEEDS and len(SEEDS) != len(MODES):
        raise SystemExit(f"CELL_SEEDS has {len(SEEDS)} entries and CELL_MODES {len(MODES)}: one each a process")
    PROCESSES = len(MODES)
CACHE = os.environ.get("CELL_CACHE") or os.path.join(tempfile.gettempdir(), "perfgate-cell-copies-cache")


def worker() -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the zoo
    import torch
    from torch._inductor.utils import clear_caches

    from perfgate.core import zoo
    from perfgate.core.matrix import Cell
    from perfgate.measure.compile_cache import compile_cache
    from perfgate.measure.devices import start_cell
    from perfgate.measure.steps import cell_batches, compiled_side, initial_state, sync

    from host_copies import serve  # this folder is the script's: sys.path[0]

    for name in ("recompile_limit", "cache_size_limit"):  # a copy is a new module: dynamo compiles it again
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, 64)
    kind = "cpu" if DEVICE == "cpu" else "gpu"
    cell = Cell(MODEL, PHASE, "inductor_default", PRECISION, device_kind=kind, tier="pr")
    spec = zoo.load(zoo.DEFAULT)[MODEL]
    device = start_cell("cpu" if kind == "cpu" else "cuda:0", True)
    size = spec.size(cell)
    junk, sides = [], []
    with compile_cache(CACHE, PRECISION):
        state = initial_state(spec, size, 0, device)
        _, batches, _ = cell_batches(spec, cell, size, 0, device)
        for n in range(COPIES):
            junk.append([bytearray(4096 * (n + 1)) for _ in range(64)] + [torch.empty(1024 * (n + 1))])
            side = compiled_side(spec, cell, size, state, device, None)
            for _ in range(WARM):
                side.step(batches[0])
            sync(device)
            sides.append(side)
            if FRESH_CODE:  # the next copy loads inductor's generated code from disk again, not this process's module
                clear_caches()
        before = prepared(sides, batches[0], device, lambda: build_eager(spec, cell, size, state, device))
        serve(lambda copy: sides[copy].step(batches[0]), lambda: sync(device), STEPS, before)


def build_eager(spec, cell, size, state, device):
    """The cell's eager side, as the engine's worker holds it beside the compiled one."""
    from perfgate.measure.steps import Side, build_model

    return Side(spec, build_model(spec, size, state, device), cell.phase, cell.precision, device)


def pin_all_threads(cpus: set[int]) -> None:
    """Every thread of this process (autograd's device threads too) onto `cpus`."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:  # a thread that ended meanwhile
            continue


def prepared(sides: list, batch, device, eager_side):
    """Each copy given this worker's mode (CELL_WORKER_MODE, one of MODE_CHOICES), then warmed again. Returns what
    runs ahead of each timed round: an eager step for mode "eager" (its side built by `eager_side()`), else
    None."""
    from perfgate.measure import counts
    from perfgate.measure.steps import sync

    mode = os.environ.get("CELL_WORKER_MODE", "plain")
    for side in sides:
        step = lambda _i, side=side: side.step(batch)  # noqa: E731
        if mode == "counts":
            counts.count_side(step, counts.STEPS, device, [])
        elif mode == "profiler":
            counts.profiled(step, counts.STEPS, device)
        elif mode == "monitor":
            counts.python_calls(step, counts.STEPS, device)
        elif mode == "layout" and device.type == "cuda":
            from perfgate.measure.layout import Relayout

            relayout = Relayout(device)
            relayout()
            step(0)
            relayout.release()
        for _ in range(WARM):
            side.step(batch)
    sync(device)
    if mode == "pinned":  # every pinned worker on the same CPUs: what one CPU's state does, it does to all
        pin_all_threads({int(c) for c in os.environ.get("CELL_PIN_CPUS", "2,3").split(",")})
    if mode == "eager":
        eager = eager_side()
        for _ in range(WARM):
            eager.step(batch)
        sync(device)
        return lambda: eager.step(batch)
    return None


def main() -> None:
    from host_copies import alternate, components, drift, spreads  # this folder is the script's: sys.path[0]

    started = time.monotonic()
    envs = [{"CELL_WORKER_MODE": m} for m in MODES] if MODES else None
    ms = alternate(__file__, PROCESSES, COPIES, ROUNDS, SEEDS, envs)
    print(f"built and timed in {time.monotonic() - started:.0f} s", file=sys.stderr)
    cell = f"{MODEL}-{PHASE}-inductor_default-{PRECISION} on {DEVICE}" + (", fresh code a copy" if FRESH_CODE else "")
    labels = [f"{s}/{m}" for s, m in zip(SEEDS or ["r"] * PROCESSES, MODES or ["plain"] * PROCESSES)]
    found = {**spreads(ms), "components_pct": components(ms), "drift": drift(ms, labels)}
    if SEEDS or MODES:  # each group of processes started alike: its floor against the fastest group's, its spread
        found["groups"] = groups(ms, labels)
    print(json.dumps({"cell": cell, "seeds": SEEDS, "modes": MODES, **found, "rounds": ms}))


def groups(ms: list[list[list[float]]], labels: list[str]) -> dict:
    """{label: the median of its copies' floors in % above the fastest group's, its processes' spread in % (each
    process its copies' median floor), and the group's own chance, build and process components}, said on
    stderr."""
    from host_copies import components

    medians = {
        label: statistics.median(min(r) for n, copies in enumerate(ms) if labels[n] == label for r in copies)
        for label in labels
    }
    fastest = min(medians.values())
    found = {}
    for label in dict.fromkeys(labels):
        own = [copies for n, copies in enumerate(ms) if labels[n] == label]
        floors = [statistics.median(min(r) for r in copies) for copies in own]
        found[label] = {
            "above_fastest_pct": 100 * (medians[label] / fastest - 1),
            "spread_pct": 100 * (max(floors) / min(floors) - 1),
            "components_pct": components(own, label) if len(own) > 1 else None,
        }
        print(
            f"processes {label}: {found[label]['above_fastest_pct']:.2f} % above the fastest group, "
            f"{found[label]['spread_pct']:.2f} % apart",
            file=sys.stderr,
        )
    return found


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["worker"] else main()
