"""Is a host-bound step's process effect a property of the worker process, for its life? Offline, over the
committed paired records (baselines/runs/paired/*.jsonl; side B's, which carry both sides' rounds).

A paired session's two workers stay from cell to cell (perfgate.ab.duet): a cell's last process pair is the next
cell's first, while a cell's later pairs are fresh processes (spares). So this links each cell's last pair to
the next cell's first (the same two processes) and each pair of a cell to its next pair (other processes), and
correlates their B/A floor ratios (log of B's fastest round over A's) of the compiled wall and host clocks. A
lifelong process effect would correlate the first links and not the second.

Only records of one session a file: a `perfgate deal` over several GPUs interleaves its shards' cells, and the
plants move the ratio on purpose, so those files are left out.

    python3 tools/probes/worker_links.py [records.jsonl ...]
"""

from __future__ import annotations

import glob
import json
import math
import sys

import numpy as np

CLOCKS = ("host", "wall")
# Workers stay from cell to cell since f3814bd (2026-11-27 14:12 UTC); records started before then may not.
KEPT_SINCE = "2026-11-27T15:00"


def floor_ratios(rounds: dict, clock: str) -> list[float | None]:
    """Per process pair, log(B's fastest compiled round / A's); None where a pair has no such rounds."""
    out: list[float | None] = []
    for x, y in zip(rounds[clock]["a"]["compiled"], rounds[clock]["b"]["compiled"]):
        out.append(math.log(min(y) / min(x)) if x and y and len(x) == len(y) else None)
    return out


def one_session(path: str) -> bool:
    name = path.rsplit("/", 1)[-1]
    if ".against" in name or "plant" in name or "-device" in name:
        return False
    return not ("-deal-" in name and not name.startswith("h200-") and not name.startswith("h100-"))


def links(paths: list[str]) -> tuple[dict, dict, int]:
    same: dict[str, list] = {c: [] for c in CLOCKS}
    fresh: dict[str, list] = {c: [] for c in CLOCKS}
    used = 0
    for path in paths:
        try:
            records = [json.loads(line) for line in open(path)]
        except (OSError, ValueError):
            continue
        # Every paired record in order, a failed or broken one kept as a gap: the workers may have been renewed
        # there (a side that died), so no link crosses it.
        records = sorted((r for r in records if r.get("started_at", "") >= KEPT_SINCE), key=lambda r: r["started_at"])
        cells = []
        for r in records:
            paired = r.get("paired") or {}
            try:
                whole = r.get("status") == "ok" and "error" not in paired
                cells.append({c: floor_ratios(paired["rounds"], c) for c in CLOCKS} if whole else None)
            except (KeyError, TypeError):
                cells.append(None)
        if sum(cell is not None for cell in cells) < 3:
            continue
        used += 1
        for this, after in zip(cells, cells[1:]):
            for c in CLOCKS:
                if this and after and this[c][-1] is not None and after[c][0] is not None:
                    same[c].append((this[c][-1], after[c][0]))
        for cell in filter(None, cells):
            for c in CLOCKS:
                pairs = [v for v in cell[c] if v is not None]
                fresh[c] += list(zip(pairs, pairs[1:]))
    return same, fresh, used


def main(paths: list[str]) -> None:
    paths = paths or sorted(p for p in glob.glob("baselines/runs/paired/*.jsonl") if one_session(p))
    same, fresh, used = links(paths)
    print(f"{used} runs")
    for name, found in (
        ("same processes (a cell's last pair, the next cell's first)", same),
        ("other processes (a cell's pair, its next pair)", fresh),
    ):
        for c in CLOCKS:
            x = np.array(found[c])
            if len(x) < 3:
                continue
            r = np.corrcoef(x[:, 0], x[:, 1])[0, 1]
            big = x[np.abs(x[:, 0]) > 0.05]
            agree = np.mean(np.sign(big[:, 0]) == np.sign(big[:, 1])) if len(big) else float("nan")
            print(
                f"{name}: {c} n={len(x)} r={r:+.2f}; where the first read beyond +-5 %: n={len(big)}, "
                f"the second of the same sign {100 * agree:.0f} %"
            )


if __name__ == "__main__":
    main(sys.argv[1:])
