"""A pytest plugin for the probe of the paired wall round's length (`-p tools.probes.round_lengths`, with
ROUND_LENGTHS_OUT=FILE.jsonl): before each paired cell's first look, its two workers serve compiled wall rounds of
several lengths (a quarter, half, once and twice the engine's round: give `--perf-round-ms 100` for the 50 ms
paired rounds of before, as paired_chain.sh's rl_study does), in random order, B and A in random order within
each pair. A length up to the engine's gets the seconds of BLOCK of the engine's round pairs; the longer one gets
BLOCK pairs (twice those seconds). One line a cell: its step, the engine's steps a round, and every pair (seconds
since the study began, steps, A's and B's ms a step). The look then runs as the engine's does.

Why: a host-bound step's wall figure is the minimum of its rounds, and on a noisy host its fastest round stood
alone (one H200 603b4790, 2026-11-28: the next was 5-9 % slower), so a look's interval of the minimum spanned the
5 % line with the change near 0 (segformer_b2 infer -1.2 and -2.6 % by pair, [-5.9, +5.6] over 72 round pairs).
If the host's slow spells outlast a round, shorter rounds reach the floor more often for the seconds measured and
the minimum settles sooner; if a round's steps stall one by one, longer ones average the stalls. Analyse with
`python3 tools/probes/round_lengths.py FILE.jsonl`.
"""

from __future__ import annotations

import json
import os
import random
import sys
import time

BLOCK = 24  # round pairs of the gate's own length a length's seconds are worth: two looks' worth


def _study(pair, steps: int, rng: random.Random) -> dict:
    """Every length's round pairs, shuffled together, so that a drift of the host hits each length alike."""
    lengths = sorted({max(1, steps // 4), max(1, steps // 2), steps, 2 * steps})
    plan = [n for n in lengths for _ in range(max(BLOCK, round(BLOCK * steps / n)))]
    rng.shuffle(plan)
    began, pairs = time.monotonic(), []
    for n in plan:
        ms = {}
        for s in rng.sample("ab", 2):
            request = {"op": "wall", "steps": n, "first": "compiled", "sides": ["compiled"]}
            ms[s] = pair[s](request)["wall"]["compiled"]
        pairs.append([round(time.monotonic() - began, 4), n, ms["a"], ms["b"]])
    return {"steps": steps, "lengths": lengths, "pairs": pairs, "seconds": round(time.monotonic() - began, 2)}


def install() -> None:
    from perfgate.ab import duet

    measure, look_once = duet.measure, duet._look_once
    state: dict = {}

    def measuring(duet_, job_b, *args, **kwargs):
        state.update(cell=job_b.cell.id, studied=False)
        return measure(duet_, job_b, *args, **kwargs)

    def looking(duet_, rounds, steps, rng, ready, *args, **kwargs):
        stream = ready["b"].get("stream", 1)
        if not state.get("studied") and stream == 1 and "wall" in (args[0] if args else {}):
            state["studied"] = True
            workers = {"a": duet_.worker(duet_.sides[0]), "b": duet_.worker(duet_.sides[1])}
            ask = {s: (lambda request, w=w: duet._ask(w, request, "wall")) for s, w in workers.items()}
            line = {"cell": state["cell"], "step_ms": ready["b"]["compiled_ms"], **_study(ask, steps, rng)}
            with open(os.environ["ROUND_LENGTHS_OUT"], "a") as f:
                f.write(json.dumps(line) + "\n")
        return look_once(duet_, rounds, steps, rng, ready, *args, **kwargs)

    duet.measure, duet._look_once = measuring, looking


if "ROUND_LENGTHS_OUT" in os.environ:
    install()


def analyse(path: str, seed: int = 0) -> None:
    """For each cell and length: the half-width of the engine's own interval for the compiled wall rule (the
    minimum, a paired bootstrap at a look's confidence: perfgate.ab.paired.compare) over the rounds that fit the
    seconds of 12 round pairs of the engine's length (a look), drawn as consecutive runs of pairs many times; how
    often a round lies within 1 % of its side's floor; and A/A change of the whole study's minima."""
    import numpy as np

    from perfgate.ab import duet, paired

    rule, confidence = paired.RULES[0], paired.look_confidence(duet.JUDGED_LOOKS)
    assert rule.key == "compiled_ms"
    rng = np.random.default_rng(seed)
    for line in open(path):
        cell = json.loads(line)
        pairs = np.array(cell["pairs"], float)
        print(f"{cell['cell']}: step {cell['step_ms']:.2f} ms, gate {cell['steps']} steps a round, {cell['seconds']} s")
        for n in cell["lengths"]:
            got = pairs[pairs[:, 1] == n]
            a, b = got[:, 2], got[:, 3]
            per_look = max(2, round(12 * cell["steps"] / n))  # the pairs one look's seconds buy at this length
            halves, changes = [], []
            for start in rng.integers(0, max(1, len(a) - per_look + 1), 200):
                x, y = a[start : start + per_look], b[start : start + per_look]
                got_rule = paired.compare([x], [y], rule, confidence, seed=int(start))
                halves.append(got_rule.halfwidth)
                changes.append(got_rule.change)
            near = np.mean(np.concatenate([a / a.min(), b / b.min()]) < 1.01)
            print(
                f"  {n:3d} steps x {len(a):3d} pairs: look half-width median {100 * np.median(halves):5.2f} %"
                f" (q90 {100 * np.quantile(halves, 0.9):5.2f}), look change sd {100 * np.std(changes):5.2f} %,"
                f" within 1 % of floor {100 * near:4.1f} %, whole change {100 * (b.min() / a.min() - 1):+5.2f} %,"
                f" floor {min(a.min(), b.min()):.3f} ms"
            )


if __name__ == "__main__":
    analyse(sys.argv[1])
