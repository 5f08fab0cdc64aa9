"""What tools/probes/layout_probe.py's layouts say of the paired device rules:

    python3 tools/probes/layout_sim.py RECORDS.jsonl [--cells N] [--residual PCT] [--plant PCT] [--one-layout]

First, per cell, side and allocator setting, how far a process's own level of GPU time sits from another's
beyond what its layouts explain (a one-way ANOVA over processes: the spread of their means, less the
within-process spread over the layouts a process took, as a residual sd in %). That residual is what a fresh
layout a round (perfgate.measure.layout) cannot take out: the tensors that live across steps keep their
addresses for the process's life.

Then N simulated cells each of an A/A and of a planted loss on the compiled step, through the engine's own
device rules, looks and process pairs (perfgate.ab.paired, perfgate.ab.duet's LOOKS, DEVICE_ROUNDS, DUETS): each
round a draw of one measured round from one layout, as its offset from its own process's mean (so that the
layouts' spread, not the processes', is drawn), and each process a further offset of the residual (the
ANOVA's, or --residual). Only the device rules: the wall clock is taken as decided. --one-layout: as before
fresh layouts, each process keeping one layout for its life and the rules judging as they then did (the
minimum, each pair made to show a regression: paired.rules_for's `layouts`).
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict

import numpy as np
from scipy import stats

from perfgate.ab import duet, looks, paired

SIDES = ("compiled", "eager")


def _processes(rows: list[dict], cell: str, conf: str) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = defaultdict(list)
    for r in rows:
        if r["cell"] == cell and r["alloc_conf"] == conf:
            out[r["pid"]].append(r)
    return out


def anova(procs: dict[int, list[dict]], side: str) -> tuple[float, float, float]:
    """(within-process sd over layouts, residual sd of a process's mean, the F test's p), the sds as log ratios."""
    groups = [np.log([np.mean(layout[f"{side}_ms"]) for layout in layouts]) for layouts in procs.values()]
    within = float(np.mean([g.var(ddof=1) for g in groups]))
    per = float(np.mean([len(g) for g in groups]))
    between = float(np.var([g.mean() for g in groups], ddof=1))
    return within**0.5, max(0.0, between - within / per) ** 0.5, float(stats.f_oneway(*groups).pvalue)


def _deviations(procs: dict[int, list[dict]]) -> list[np.ndarray]:
    """Each layout's measured rounds as (compiled, eager) log offsets from its process's mean over its layouts."""
    out = []
    for layouts in procs.values():
        mean = {s: np.mean(np.log([np.mean(layout[f"{s}_ms"]) for layout in layouts])) for s in SIDES}
        for layout in layouts:
            logs = np.log([layout["compiled_ms"], layout["eager_ms"]]).T
            out.append(logs - [mean["compiled"], mean["eager"]])
    return out


def _draw(layouts: list[np.ndarray], n: int, rng: np.random.Generator, kept: np.ndarray | None) -> np.ndarray:
    """n rounds: each from a fresh layout, or all from the process's `kept` one."""
    picked = [kept if kept is not None else layouts[rng.integers(len(layouts))] for _ in range(n)]
    return np.array([p[rng.integers(len(p))] for p in picked])


def simulate(
    layouts: list[np.ndarray], residual: dict[str, float], plant: float, rng: np.random.Generator, one: bool = False
) -> str:
    """One cell's outcome through the engine's device rules, looks and process pairs (`one`: one layout a process)."""
    rules = [r for r in paired.rules_for("gpu", layouts=not one) if r.clock.name == "device"]
    confidence = paired.look_confidence(duet.JUDGED_LOOKS)
    rounds: dict[str, dict[str, list[list[float]]]] = {s: {"a": [], "b": []} for s in SIDES}
    comparisons: list[paired.Comparison] = []
    for pair in range(1, duet.DUETS + 1):
        offset = {(w, s): rng.normal(0, residual[s]) for w in "ab" for s in SIDES}
        kept = {w: layouts[rng.integers(len(layouts))] if one else None for w in "ab"}
        for s in SIDES:
            for w in "ab":
                rounds[s][w].append([])
        for _ in range(duet.LOOKS):
            for w in "ab":
                for c, e in _draw(layouts, duet.DEVICE_ROUNDS, rng, kept[w]):
                    grow = plant if w == "b" else 0.0
                    rounds["compiled"][w][-1].append(float(np.exp(c + offset[(w, "compiled")])) * (1 + grow))
                    rounds["eager"][w][-1].append(float(np.exp(e + offset[(w, "eager")])))
            comparisons = [paired.across_pairs(rounds[r.side]["a"], rounds[r.side]["b"], r, confidence) for r in rules]
            if looks.decided(comparisons):
                break
        if paired.final(comparisons, pair):
            break
    return paired.worst([c.outcome for c in paired.settled(comparisons)])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("records")
    parser.add_argument("--cells", type=int, default=400, help="simulated cells each way")
    parser.add_argument("--residual", type=float, help="a process's own sd in %%, both sides (default: the ANOVA's)")
    parser.add_argument("--plant", type=float, default=1.5, help="the planted loss on B's compiled step, %%")
    parser.add_argument("--one-layout", action="store_true", help="one layout a process, and the rules of then")
    args = parser.parse_args()
    rows = [json.loads(line) for line in open(args.records)]
    for cell in sorted({r["cell"] for r in rows}):
        for conf in sorted({r["alloc_conf"] for r in rows}):
            procs = _processes(rows, cell, conf)
            if len(procs) < 2:
                continue
            residual = {}
            for side in SIDES:
                within, resid, p = anova(procs, side)
                residual[side] = resid if args.residual is None else args.residual / 100
                print(
                    f"{cell} {conf or 'default'} {side}: {len(procs)} processes, layouts sd {100 * within:.2f} %, "
                    f"process residual sd {100 * resid:.2f} % (F test p = {p:.3f})"
                )
            devs = _deviations(procs)
            rng = np.random.default_rng(0)
            for name, plant in (("A/A", 0.0), (f"plant {args.plant:g} %", args.plant / 100)):
                got = [simulate(devs, residual, plant, rng, args.one_layout) for _ in range(args.cells)]
                tally = ", ".join(f"{o} {got.count(o)}" for o in paired.OUTCOMES)
                print(f"  {name}, residual {100 * residual['compiled']:.2f}/{100 * residual['eager']:.2f} %: {tally}")


if __name__ == "__main__":
    main()
