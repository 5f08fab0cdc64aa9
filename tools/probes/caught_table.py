"""docs/gate.md's "What it catches" table, counted from the paired runs' records rather than by hand: every B file
in baselines/runs/paired/ (a name `KIND-DATE-BOOT8-STEP.jsonl`; `.against.jsonl` files are side A's), each
cell's paired outcome, by what B carried (the step's name says it), and again for the records whose rounds
ran pinned (both sides on one CPU set, the default from code f388a2a on).

    python tools/probes/caught_table.py [baselines/runs/paired]
"""

from __future__ import annotations

import json
import re
import sys
from collections import Counter
from pathlib import Path

NAME = re.compile(r"[^-]+-\d{8}-(?P<boot>[0-9a-f]{8})-(?P<step>.+)\.jsonl")
# The step names of runs that carried a plant; every other step is an A/A (side A this tree again).
PLANTS = (
    ("device_slow:1.5", re.compile(r"^(device|deal-plant)")),
    ("host_slow:15", re.compile(r"^host(-plant|$)")),
    ("graph_break", re.compile(r"^graph")),
)
# The first code, whose side A skipped B's numerics stages: not the engine's A/A (runs README, 2026-11-27).
LEFT_OUT = {"smoke-asymmetric"}
OUTCOMES = ("regression", "unsure", "ok")


def plant_of(step: str) -> str:
    return next((name for name, pattern in PLANTS if pattern.search(step)), "nothing (A/A)")


def tally(folder: Path) -> dict[tuple[str, bool], tuple[set[str], Counter]]:
    """(plant, pinned only) -> (the boots it ran on, its outcomes)."""
    table: dict[tuple[str, bool], tuple[set[str], Counter]] = {}
    for path in sorted(folder.glob("*.jsonl")):
        name = NAME.fullmatch(path.name)
        if path.name.endswith(".against.jsonl") or not name or name["step"] in LEFT_OUT:
            continue
        plant = plant_of(name["step"])
        for line in path.read_text().splitlines():
            paired = json.loads(line).get("paired") if line.strip() else None
            if not paired:
                continue
            for pinned_only in (False, True):
                if pinned_only and not paired.get("pinned"):
                    continue
                boots, outcomes = table.setdefault((plant, pinned_only), (set(), Counter()))
                boots.add(name["boot"])
                outcomes[paired["outcome"]] += 1
    return table


def main(folder: str) -> None:
    table = tally(Path(folder))
    print("| planted in B | runs | machines | cells | " + " | ".join(OUTCOMES) + " |")
    print("|---|---|---|---|" + "---|" * len(OUTCOMES))
    for pinned_only in (False, True):
        for plant in ("nothing (A/A)", "host_slow:15", "device_slow:1.5", "graph_break"):
            if (plant, pinned_only) in table:
                boots, outcomes = table[plant, pinned_only]
                cells = " | ".join(str(outcomes[o]) for o in OUTCOMES)
                runs = "pinned" if pinned_only else "all"
                print(f"| {plant} | {runs} | {len(boots)} | {sum(outcomes.values())} | {cells} |")
    every = set().union(*(boots for (_, pinned_only), (boots, _) in table.items() if not pinned_only))
    print(f"\nmachines in all (boots): {len(every)}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "baselines/runs/paired")
