"""Replay a 4-GPU slice's cell times through xdist's `--dist loadgroup` hand-out, in the order perfgate gives
its units (perfgate.plugin.selection.longest_first), to compare orders on the same cells.

usage: python tools/probes/deal_replay.py DIR [SECONDS_OF_LOST_CELL ...]

DIR holds slice.gwN.jsonl (tools/probes/nightly4.sh). Each cell costs its final record's wall_s; a cell lost
before it began (no stage ran) costs what the command line gives, in its order, else its prior. The hand-out
is xdist 3.8's LoadScopeScheduling: one unit to each worker, then one more queued behind it, then one unit to
a worker each time one of its units ends. Orders are ranked by the priors (a first night) and by the
cells' own times (a night with the history's costs); the priors both cold (the compile's weight, as before a
precompile) and warm (a kept cache holds the compiles, as after one). Ties between equal costs go by collected order, as in
the run.
"""

import heapq
import json
import os
import sys
from pathlib import Path

sys.path.insert(0, os.getcwd())  # the zoo (fixtures), from the repository's root

from perfgate.core.matrix import Cell
from perfgate.core.records_file import load_records
from perfgate.plan.costs import prior_s, warm_prior_s
from perfgate.core import zoo
from perfgate.plugin.selection import CELL_KEY, cells, longest_first


class Unit:
    def __init__(self, cell: Cell):
        self.cell, self.stash = cell, {CELL_KEY: cell}


def hand_out(order: list, seconds: dict[str, float], workers: int) -> list[float]:
    """Each worker's busy seconds when xdist hands `order` out as LoadScopeScheduling does."""
    waiting, queues = list(order), [[] for _ in range(workers)]
    for _ in range(2):  # the first unit, and the one queued behind it
        for queue in queues:
            if waiting:
                queue.append(waiting.pop(0))
    ends = [(seconds[q[0].cell.id], w) for w, q in enumerate(queues) if q]
    heapq.heapify(ends)
    done, clock = [0] * workers, [0.0] * workers
    while ends:
        now, w = heapq.heappop(ends)
        done[w], clock[w] = done[w] + 1, now
        if waiting:
            queues[w].append(waiting.pop(0))
        if done[w] < len(queues[w]):
            heapq.heappush(ends, (now + seconds[queues[w][done[w]].cell.id], w))
    return clock


def main(directory: Path, lost_s: list[float]) -> None:
    finals = {r["cell"]: r for r in load_records(sorted(directory.glob("slice.gw*.jsonl")))}
    workers = len(list(directory.glob("slice.gw*.jsonl")))
    # Collected order (perftests: train cells, then inference), which breaks the ties between equal costs
    collected = [p.values[0].id for phase in ("train", "infer") for p in cells(zoo.load(zoo.DEFAULT), phase)]
    units, seconds, priors, warm = [], {}, {}, {}
    for record in sorted(finals.values(), key=lambda r: collected.index(r["cell"])):
        cell = Cell(record["model"], record["phase"], record["variant"], record["precision"], record["device_kind"])
        units.append(Unit(cell))
        weight = zoo.load(zoo.DEFAULT)[cell.model].cost if cell.device_kind == "gpu" else 1.0  # as the session's
        priors[cell.id], warm[cell.id] = prior_s(cell, weight), warm_prior_s(cell, weight)
        lost = not record.get("stages")
        seconds[cell.id] = (lost_s.pop(0) if lost_s else priors[cell.id]) if lost else record["wall_s"]
    mean = sum(seconds.values()) / workers
    print(
        f"{len(units)} cells on {workers} workers; mean share {mean:.0f} s; "
        f"no deal better than {max(max(seconds.values()), mean) / mean:.3f}"
    )
    for ranked_by, costs in (("cold priors", priors), ("warm priors", warm), ("own times", seconds)):
        for name, many in (("dearest first", 1), ("cheapest behind the dearest", workers)):
            busy = hand_out(longest_first(units, costs, many), seconds, workers)
            print(
                f"ranked by {ranked_by}, {name}: {', '.join(f'{b:.0f}' for b in busy)}; "
                f"slowest / mean {max(busy) / mean:.3f}"
            )


if __name__ == "__main__":
    main(Path(sys.argv[1]), [float(s) for s in sys.argv[2:]])
