"""duet_floor.py's workers judged as the paired engine judges one look: every ordered pair of workers of one
mode an A/A (their first 24 compiled wall rounds, round i of each the pair i), and again with B's rounds 10 %
slower (a host plant), under the wall rule's 5 % line at a look's confidence, by the minimum and by the paired
median. The probe's two rounds of a pair are up to a pass over all workers apart (~0.3 s), the engine's one
round apart: a harder case for the paired median.

    python tools/probes/duet_judge.py baselines/runs/paired/h200-20261129-*-duet-*.json
"""

from __future__ import annotations

import collections
import itertools
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # this tree

from perfgate.ab import duet, paired  # noqa: E402
from perfgate.core.clocks import WALL  # noqa: E402

PAIRS = 24  # a first look's wall round pairs of a 25 ms round (duet.wall_shape)
PLANT = 1.10


def judged(path: str) -> list[str]:
    found = json.load(open(path))
    confidence = paired.look_confidence(duet.JUDGED_LOOKS)
    rule = paired.PairedRule(WALL, "compiled", 0.05)
    lines = []
    for mode in sorted(set(found["modes"])):
        workers = [n for n, m in enumerate(found["modes"]) if m == mode]
        for estimator in ("min", "pair_median"):
            aa, plant, lines_pct = collections.Counter(), collections.Counter(), []
            for i, j in itertools.permutations(workers, 2):
                a, b = found["compiled_ms"][i][:PAIRS], found["compiled_ms"][j][:PAIRS]
                same = paired.compare([a], [b], rule, confidence, estimator=estimator)
                aa[same.outcome] += 1
                lines_pct.append(100 * same.halfwidth)
                slower = [x * PLANT for x in b]
                plant[paired.compare([a], [slower], rule, confidence, estimator=estimator).outcome] += 1
            line = sorted(lines_pct)[len(lines_pct) // 2]
            lines.append(
                f"{os.path.basename(path)} {mode} {estimator}: A/A {dict(aa)}, +{100 * (PLANT - 1):.0f} % "
                f"{dict(plant)}, median line {line:.1f} %"
            )
    return lines


if __name__ == "__main__":
    for path in sys.argv[1:]:
        print("\n".join(judged(path)))
