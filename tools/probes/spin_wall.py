"""Does a GPU spin after each compiled step cost a host-bound step more wall time than its own GPU time?

The 1.5 % device plant (perfgate.measure.faults: torch.cuda._sleep after every compiled step) read wall lines of
+4 to +18 % on gpt2 train and +8 to +11 % on upernet_convnext_t infer, where its spin is 0.34 and 0.14 ms a step
(baselines/runs/paired/README.md, twenty-fifth session), and both sides of the pair were separate processes. Here
one process alternates, in random order, rounds of the cell's compiled step plain, with the spin after each step
(as the plant), and with the spin before each step; each round's wall ms per step is timed as the gate's wall
rounds are (perfgate.measure.timing.time_steps). A spun round slower than plain by about the spin means the
plant's wall effect lies between the processes; by much more, in the spin itself.

    SPIN_MODEL=upernet_convnext_t SPIN_PHASE=infer SPIN_STEPS=2 SPIN_MS=0.14 python3 tools/probes/spin_wall.py
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import time

MODEL = os.environ.get("SPIN_MODEL", "upernet_convnext_t")
PHASE = os.environ.get("SPIN_PHASE", "infer")
STEPS = int(os.environ.get("SPIN_STEPS", "2"))  # a round: the steps the paired gate's ~25 ms wall round takes
SPIN_MS = float(os.environ.get("SPIN_MS", "0.14"))  # the plant's spin on this cell (its records' kernel table)
ROUNDS = int(os.environ.get("SPIN_ROUNDS", "40"))  # a variant
WARM = 15  # steps before any timed round: the first calls compile, and the allocator settles in a few more


def main() -> None:
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # the zoo
    import torch

    from perfgate.core import zoo
    from perfgate.core.matrix import Cell
    from perfgate.measure.devices import start_cell
    from perfgate.measure.faults import cycles_per_ms
    from perfgate.measure.steps import cell_batches, compiled_side, initial_state, sync
    from perfgate.measure.timing import time_steps

    started = time.monotonic()
    cell = Cell(MODEL, PHASE, "inductor_default", "amp_bf16", device_kind="gpu", tier="pr")
    spec = zoo.load(zoo.DEFAULT)[MODEL]
    device = start_cell("cuda:0", True)
    size = spec.size(cell)
    state = initial_state(spec, size, 0, device)
    _, batches, _ = cell_batches(spec, cell, size, 0, device)
    side = compiled_side(spec, cell, size, state, device, None)
    for _ in range(WARM):
        side.step(batches[0])
    sync(device)
    cycles = int(SPIN_MS * cycles_per_ms())
    built_s = time.monotonic() - started

    def plain(_i):
        side.step(batches[0])

    def spin_after(_i):
        side.step(batches[0])
        torch.cuda._sleep(cycles)

    def spin_before(_i):
        torch.cuda._sleep(cycles)
        side.step(batches[0])

    variants = {"plain": plain, "spin_after": spin_after, "spin_before": spin_before}
    for step in variants.values():  # each variant warm before its first timed round
        time_steps(step, STEPS, device)
    order = [name for name in variants for _ in range(ROUNDS)]
    random.Random(7).shuffle(order)
    ms: dict[str, list[float]] = {name: [] for name in variants}
    for name in order:
        ms[name].append(time_steps(variants[name], STEPS, device))
    plain_med, plain_min = statistics.median(ms["plain"]), min(ms["plain"])
    found = {
        "cell": f"{MODEL}-{PHASE}",
        "steps": STEPS,
        "spin_ms": SPIN_MS,
        "built_s": round(built_s, 1),
        "variants": {
            name: {
                "median_ms": statistics.median(v),
                "min_ms": min(v),
                "median_vs_plain_ms": statistics.median(v) - plain_med,
                "min_vs_plain_ms": min(v) - plain_min,
            }
            for name, v in ms.items()
        },
        "rounds": ms,
    }
    for name, v in found["variants"].items():
        print(
            f"{name}: median {v['median_ms']:.3f} ms ({v['median_vs_plain_ms']:+.3f}), min {v['min_ms']:.3f} ms "
            f"({v['min_vs_plain_ms']:+.3f}) a step",
            file=sys.stderr,
        )
    print(json.dumps(found))


if __name__ == "__main__":
    main()
