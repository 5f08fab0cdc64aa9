"""What tools/probes/nightly4.sh brought back (issue 56): the 4 xdist workers' balance and the neighbour effect.

usage: python tools/probes/nightly4_summary.py DIR      (DIR: the unpacked n4.tgz)

Balance: each xdist worker's cells' seconds (the final record of each cell in slice.gwN.jsonl, its wall_s),
the slowest against the mean (the issue's bar: at most 1.15). Neighbour effect: each cell of alone.jsonl
against the same cell in each beside*.jsonl, per clock, alone's change against beside's (negative: the three
neighbours slowed the cell). Counts (issue 53): each PR cell's counts over the beside runs (one process each),
the fields that differ named with their values.
"""

import json
import statistics
import sys
from pathlib import Path


def records(path: Path) -> dict[str, dict]:
    """The last ok record of each cell in a results file (a worker file holds checkpoints before it)."""
    if not path.is_file():
        return {}
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return {r["cell"]: r for r in rows if r.get("status") == "ok"}


def main(directory: Path) -> None:
    workers = [records(p) for p in sorted(directory.glob("slice.gw*.jsonl"))]
    seconds = [sum(r["wall_s"] for r in cells.values()) for cells in workers]
    if seconds and all(seconds):
        mean = statistics.mean(seconds)
        shown = ", ".join(f"{s:.0f}" for s in seconds)
        cells = sum(map(len, workers))
        print(f"workers' cell seconds: {shown}; slowest / mean {max(seconds) / mean:.3f} ({cells} cells)")
    alone = records(directory / "alone.jsonl")
    besides = {p.stem: records(p) for p in sorted(directory.glob("beside*.jsonl")) if ".gw" not in p.name}
    print("cell | bound | wall eager, compiled | device eager, compiled (alone against beside 3 others, %)")
    for name, beside in besides.items():
        for cell, far in alone.items():
            near = beside.get(cell)
            if near is None:
                continue
            changes = []
            for key in ("eager_ms", "compiled_ms", "eager_device_ms", "compiled_device_ms"):
                a, b = near.get(key), far.get(key)
                changes.append(f"{100 * (b / a - 1):+.1f}" if a and b else "-")
            print(f"{name}: {cell} | {near.get('bound')} | {changes[0]}, {changes[1]} | {changes[2]}, {changes[3]}")
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
            print(f"counts moved, {cell} ({len(runs)} processes): {moved}")
    if cells:
        print(f"counts: {same} of {len(cells)} cells the same in every beside run ({len(besides)} runs)")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
