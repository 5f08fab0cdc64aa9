"""Would the zoo's model weights (ModelSpec.cost) have dealt the committed cold paired runs better?

Each cold paired record file of the whole PR tier (12 cells) is replayed: its cells dealt into 2 and 4 shards by the
priors alone, by the zoo's weights (in sample: the weights came from these runs), and by weights derived from the
other runs only (leave one out: each model's mean of its paired seconds over its phase's mean, normalised to 1 over
the models). A shard's length is the sum of its cells' measured paired seconds; the figure is the longest shard.

    python3 tools/probes/cost_replay.py [records.jsonl ...]    (from the repository's root)
"""

from __future__ import annotations

import glob
import json
import os
import statistics
import sys

sys.path.insert(0, os.getcwd())  # the zoo (fixtures), from the repository's root

from perfgate.core import zoo
from perfgate.core.matrix import Cell
from perfgate.plan.costs import deal, expected_s


def seconds(path: str) -> dict[str, float]:
    """{cell id: both sides' paired seconds} of a run's finished paired records."""
    out = {}
    for line in open(path):
        record = json.loads(line)
        paired = record.get("paired") or {}
        if record.get("status") == "ok" and paired.get("seconds"):
            out[record["cell"]] = paired["seconds"]["total"]
    return out


def derived(runs: list[dict[str, float]]) -> dict[str, float]:
    """Each model's mean of (a cell's seconds / its phase's mean in its run), normalised to a mean of 1."""
    ratios: dict[str, list[float]] = {}
    for run in runs:
        for phase in ("train", "infer"):
            cells = {cell: s for cell, s in run.items() if cell.split("-")[1] == phase}
            mean = statistics.mean(cells.values())
            for cell, s in cells.items():
                ratios.setdefault(cell.split("-")[0], []).append(s / mean)
    weights = {model: statistics.mean(r) for model, r in ratios.items()}
    scale = statistics.mean(weights.values())
    return {model: w / scale for model, w in weights.items()}


def longest(run: dict[str, float], shards: int, weights: dict[str, float] | None) -> float:
    cells = [Cell(*cell.split("-")[:3], "amp_bf16", "gpu", "pr") for cell in run]
    return max(sum(run[c] for c in share) for share in deal(expected_s(cells, {}, weights=weights), shards))


def main(paths: list[str]) -> None:
    paths = paths or sorted(p for p in glob.glob("baselines/runs/paired/*cold*.jsonl") if ".against" not in p)
    runs = {p: s for p in paths if len(s := seconds(p)) == 12}
    zoo_weights = {name: spec.cost for name, spec in zoo.load(zoo.DEFAULT).items()}
    gains: dict[tuple[int, str], list[float]] = {}
    for path, run in runs.items():
        others = derived([r for p, r in runs.items() if p != path])
        row = []
        for shards in (2, 4):
            plain = longest(run, shards, None)
            for name, weights in (("zoo", zoo_weights), ("left out", others)):
                gains.setdefault((shards, name), []).append(plain - longest(run, shards, weights))
            row.append(
                f"{shards}: {plain:.0f} / {longest(run, shards, zoo_weights):.0f} / {longest(run, shards, others):.0f} s"
            )
        print(f"{os.path.basename(path)[:44]:44s} longest shard, priors / zoo / left out: {'; '.join(row)}")
    for (shards, name), g in sorted(gains.items()):
        better = sum(x > 0 for x in g)
        print(
            f"{shards} shards, {name}: {statistics.mean(g):+.1f} s shorter on average, {better} of {len(g)} runs shorter"
        )


if __name__ == "__main__":
    main(sys.argv[1:])
