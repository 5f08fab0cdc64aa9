"""Paired records judged again under the rules of this tree (perfgate.ab.paired.RULES), look by look as the
engine (perfgate.ab.duet) would have taken them: how many cells a rule change turns red, unsure or ok, and how
many looks and process pairs it spares. Reads the rounds each B record keeps (`paired.rounds`); a rule set
that judges a subset of what the records' engine judged needs no round those records lack. A replay cuts every
clock at each look, where the engine measures only the clocks it still wants: under rules that decide a clock
sooner or later than the records' engine did, a clock may be judged on rounds that engine took for another, and
"wants look L" shows only where no clock gained a round. Read it as a lower bound on what the rules would take.

    python tools/probes/rejudge.py [--eager-wall] baselines/runs/paired/h200x4-20261127-2aa41d77-aa-warm.jsonl ...

--eager-wall: eager's wall step judged too, as `perfgate ab` judges it (paired.rules_for). --pinned / --unpinned:
the wall and host rules judged as for rounds on one CPU set (paired.PAIR_MEDIAN) or not, whatever the
record's `paired.pinned` says: how would the other estimator have read these rounds?
"""

from __future__ import annotations

import json
import sys

from perfgate.ab import duet, looks, paired


def prefix(rounds: dict, clock: str, duets: int, n: int) -> dict:
    """Each side's rounds of `clock` in the first `duets` process pairs, the last pair's cut to its first n."""
    out = {}
    for s in "ab":
        out[s] = {}
        for side, by_duet in rounds[clock][s].items():
            kept = [list(x) for x in by_duet[:duets]]
            if kept:
                kept[-1] = kept[-1][:n]
            out[s][side] = kept
    return out


def took_layouts(p: dict) -> bool:
    """Whether a paired record's device rounds ran in fresh memory layouts: its `layouts`, or, before the engine
    wrote that (code e1a05cc, the 2xH200 1cea3df1 runs), its estimator's words, which only such an engine wrote."""
    return bool(p.get("layouts", p.get("estimator") == "min (device: mean)"))


def rejudge(record: dict, eager_wall: bool = False, pinned: bool | None = None) -> tuple[str, int, int]:
    """(outcome, looks, process pairs) under this tree's rules. A record whose engine stopped on an error (a side
    failed) stays unsure; a look the records hold no new rounds for is not taken (the engine then stopped); an
    outcome that would want a look or a process pair the records lack says so ("unsure, wants look 2 of pair 1",
    "regression, wants pair 3"). `eager_wall`: eager's wall step judged too. `pinned`: the wall estimator as for
    pinned rounds or not (None: as the record's rounds ran)."""
    p = record["paired"]
    if p.get("error"):
        return "unsure", p.get("looks", 0), p.get("duets", 0)
    rounds, kind = p["rounds"], record.get("device_kind", "gpu")
    pinned = bool(p.get("pinned")) if pinned is None else pinned
    confidence = paired.look_confidence(duet.JUDGED_LOOKS)
    taken = pairs = 0  # looks taken, process pairs
    comparisons: list = []
    # A count past its band ends the cell after its pair, as the engine's does (duet._counted_red).
    counted = [c["outcome"] for c in p.get("counts", [])]

    def outcome() -> str:  # the cell's, from what the looks so far settled and the counts
        return paired.worst([c.outcome for c in paired.settled(comparisons)] + counted)

    # Each process pair's wall round pairs a look (duet.wall_shape); a record before 2026-11-28 night took 12.
    wall_pairs = p.get("wall_pairs") or [duet.WALL_PAIRS] * duet.DUETS
    for d in range(1, min(duet.DUETS, len(rounds["wall"]["b"]["compiled"]), len(wall_pairs)) + 1):
        pairs, seen = d, None
        # A third pair's looks decide only the rules that called for it; the others keep what two pairs read.
        calling, before = looks.calling_rules(comparisons, d), comparisons
        for look in range(1, duet.LOOKS + 1):
            cut = {
                "wall": prefix(rounds, "wall", d, wall_pairs[d - 1] * look),
                "device": prefix(rounds, "device", d, duet.DEVICE_ROUNDS * look),
                "host": prefix(rounds, "host", d, duet.HOST_PAIRS),
            }
            if cut == seen:  # these rules want rounds the records' engine, deciding sooner, never took: from here
                # on the replay is no longer the engine's
                return f"{outcome()}, wants look {look} of pair {d}", taken, pairs
            seen, taken = cut, taken + 1
            judged = looks.judge(cut, confidence, kind, eager_wall, layouts=took_layouts(p), pinned=pinned)
            comparisons = looks.settle_others(judged, before, calling)
            if looks.decided(comparisons, calling):
                break
        if paired.final(comparisons, d) or "regression" in counted:
            break
    if not paired.final(comparisons, pairs) and "regression" not in counted:  # a pair the records never measured
        return f"{outcome()}, wants pair {paired.pairs_needed(comparisons)}", taken, pairs
    return outcome(), taken, pairs


def main(paths: list[str], eager_wall: bool = False, pinned: bool | None = None) -> None:
    for path in paths:
        tally: dict[str, int] = {}
        lines = []
        for line in open(path):
            record = json.loads(line)
            if not record.get("paired") or "rounds" not in record["paired"]:
                continue
            was = record["paired"]["outcome"]
            now, taken, pairs = rejudge(record, eager_wall, pinned)
            tally[now] = tally.get(now, 0) + 1
            if now != was or taken != record["paired"]["looks"]:
                lines.append(
                    f"  {record['cell'][:44]:44} {was:>10} -> {now:10} looks {record['paired']['looks']} -> {taken},"
                    f" pairs {record['paired']['duets']} -> {pairs}"
                )
        print(path.rsplit("/", 1)[-1], tally)
        print("\n".join(lines))


if __name__ == "__main__":
    args = sys.argv[1:]
    flags = {"--eager-wall", "--pinned", "--unpinned"}
    pinned = True if "--pinned" in args else False if "--unpinned" in args else None
    main([a for a in args if a not in flags], "--eager-wall" in args, pinned)
