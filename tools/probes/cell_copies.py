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
        serve(lambda copy: sides[copy].step(batches[0]), lambda: sync(device), STEPS)


def main() -> None:
    from host_copies import alternate, spreads  # this folder is the script's: sys.path[0]

    started = time.monotonic()
    ms = alternate(__file__, PROCESSES, COPIES, ROUNDS, SEEDS)
    print(f"built and timed in {time.monotonic() - started:.0f} s", file=sys.stderr)
    cell = f"{MODEL}-{PHASE}-inductor_default-{PRECISION} on {DEVICE}" + (", fresh code a copy" if FRESH_CODE else "")
    found = spreads(ms)
    if SEEDS:  # the processes' spread (each its copies' median floor) among those started alike
        groups = {
            seed: [statistics.median(found["floors_ms"][n]) for n, s in enumerate(SEEDS) if s == seed] for seed in SEEDS
        }
        found["seed_groups_pct"] = {seed: 100 * (max(f) / min(f) - 1) for seed, f in groups.items() if len(f) > 1}
        for seed, pct in found["seed_groups_pct"].items():
            print(f"processes started with seed {seed}: {pct:.2f} % apart", file=sys.stderr)
    print(json.dumps({"cell": cell, "seeds": SEEDS, **found, "rounds": ms}))


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["worker"] else main()
