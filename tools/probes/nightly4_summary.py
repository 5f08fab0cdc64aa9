"""What tools/probes/nightly4.sh brought back (issue 56): the 4 xdist workers' balance and the neighbour effect.

usage: python tools/probes/nightly4_summary.py DIR      (DIR: the unpacked n4.tgz)

Balance: each xdist worker's cells' seconds (the final record of each cell in slice.gwN.jsonl, its wall_s),
the slowest against the mean (the issue's bar: at most 1.15). Neighbour effect: each cell of every alone*.jsonl
against the same cell in each beside*.jsonl, per clock, alone's change against beside's (negative: the three
neighbours slowed the cell); and how far each clock moved for one cell across the beside runs (max over min),
the host's own drift that the neighbour effect must stand out from (on 4xH200 349f3a2e, 2026-11-28, it did not:
alternate alone and beside runs, STEPS="beside alone beside2 alone2", to tell them apart). Cache: how many
cells of each run compiled in the timed run rather than loading the kept cache. Counts (issue 53): each PR
cell's counts over the beside runs (one process each), the fields that differ named with their values and how
each process got its graphs (cold: compiled there; warm: all loaded), which moves the compiled Python calls.
"""

import json
import statistics
import sys
from pathlib import Path

from perfgate.core.record_reading import first_call_cache
from perfgate.core.records_file import load_records


def records(path: Path) -> dict[str, dict]:
    """The last ok record of each cell in a results file (a worker file holds checkpoints before it)."""
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["cell"]: r for r in rows if r.get("status") == "ok"}


def drift(besides: dict[str, dict]) -> None:
    """How far each clock moved for one cell across the beside runs: max over min, %, median and widest."""
    if len(besides) < 2:
        return
    cells = set.intersection(*(set(b) for b in besides.values()))
    for key in ("speedup", "device_speedup", "compiled_ms", "compiled_device_ms"):
        moved = {}
        for cell in cells:
            values = [b[cell].get(key) for b in besides.values()]
            if all(values):
                moved[cell] = 100 * (max(values) / min(values) - 1)
        if moved:
            widest = max(moved, key=moved.get)
            print(
                f"{key} across {len(besides)} beside runs: median {statistics.median(moved.values()):.2f} %, "
                f"widest {moved[widest]:.1f} % ({widest})"
            )


def finals(path: Path) -> dict[str, dict]:
    """The final record of each cell in a worker's file, ok or not: a failed cell held its GPU too."""
    return {r["cell"]: r for r in load_records([path])}


def balance(directory: Path) -> None:
    """Each worker's cell seconds, the slowest against the mean, and the least any deal of these cells could
    reach: the longest cell, or the mean share where that is longer. And the slice's cell seconds against the
    priors (perfgate.plan.costs.prior_s), the ratio a projection of the whole matrix scales its priors by."""
    from perfgate.core.matrix import Cell
    from perfgate.plan.costs import prior_s

    workers = [finals(p) for p in sorted(directory.glob("slice.gw*.jsonl"))]
    seconds = [sum(r["wall_s"] or 0 for r in cells.values()) for cells in workers]
    if not seconds or not all(seconds):
        return
    mean = statistics.mean(seconds)
    every = [r for cells in workers for r in cells.values()]
    longest = max(every, key=lambda r: r["wall_s"] or 0)
    print(
        f"workers' cell seconds: {', '.join(f'{s:.0f}' for s in seconds)} ({len(every)} cells); slowest / mean "
        f"{max(seconds) / mean:.3f}; any deal >= {max(longest['wall_s'], mean) / mean:.3f} "
        f"(longest cell: {longest['cell']}, {longest['wall_s']:.0f} s)"
    )

    def against_priors(records: list[dict], what: str) -> None:
        # The priors unweighted by the models' costs (ModelSpec.cost came later): docs/matrix.md quotes these.
        priors = sum(
            prior_s(Cell(r["model"], r["phase"], r["variant"], r["precision"], r["device_kind"])) for r in records
        )
        measured = sum(r["wall_s"] for r in records)
        print(f"{len(records)} {what}: {measured:.0f} s against {priors:.0f} s of priors ({measured / priors:.2f})")

    against_priors([r for r in every if r["status"] == "ok"], "ok cells")
    # A cell lost before it began (no stage ran: its process was gone) says nothing of what a cell costs.
    against_priors([r for r in every if r.get("stages")], "cells that ran to their end, ok or not")
    for r in every:
        if r["status"] != "ok":
            print(f"  {r['status']}: {r['cell']} ({r['wall_s']:.0f} s): {(r.get('reason') or '')[:120]}")


def main(directory: Path) -> None:
    balance(directory)
    alones = {p.stem: records(p) for p in sorted(directory.glob("alone*.jsonl")) if ".gw" not in p.name}
    besides = {p.stem: records(p) for p in sorted(directory.glob("beside*.jsonl")) if ".gw" not in p.name}
    for name, run in {**besides, **alones}.items():
        cold = [c for c, r in run.items() if r.get("compile_cache_misses")]
        print(f"{name}: {len(cold)} of {len(run)} cells compiled in the timed run")
    print("cell | bound | wall eager, compiled | device eager, compiled (alone against beside 3 others, %)")
    for alone_name, alone in alones.items():
        for name, beside in besides.items():
            for cell, far in alone.items():
                near = beside.get(cell)
                if near is None:
                    continue
                changes = []
                for key in ("eager_ms", "compiled_ms", "eager_device_ms", "compiled_device_ms"):
                    a, b = near.get(key), far.get(key)
                    changes.append(f"{100 * (b / a - 1):+.1f}" if a and b else "-")
                print(
                    f"{alone_name}/{name}: {cell} | {near.get('bound')} | {changes[0]}, {changes[1]} | {changes[2]}, {changes[3]}"
                )
    drift(besides)
    count_fields = ("py_calls", "aten_ops", "kernels", "cuda_graphs", "dynamo_lookups", "instructions")
    cells = sorted(set().union(*besides.values())) if besides else []
    same = 0
    for cell in cells:
        runs = [b[cell] for b in besides.values() if cell in b]
        moved = {
            f"{side}_{c}": [r.get(f"{side}_{c}") for r in runs]
            for side in ("eager", "compiled")
            for c in count_fields
            if len({r.get(f"{side}_{c}") for r in runs}) > 1
        }
        same += not moved
        if moved:
            ways = [first_call_cache(r) for r in runs]
            print(f"counts moved, {cell} ({len(runs)} processes, graphs {ways}): {moved}")
    if cells:
        print(f"counts: {same} of {len(cells)} cells the same in every beside run ({len(besides)} runs)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
