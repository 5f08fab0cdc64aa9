"""What each look of a paired cell measures, and when a process pair's looks end (perfgate.ab.duet's loop;
tools/probes/rejudge.py replays it over records): every clock in a pair's first look, then the clocks with a
rule still unsure; a pair's looks end when nothing is unsure or a red will stand (`decided`). Imports no
torch."""

from __future__ import annotations

from collections.abc import Collection

from perfgate.ab import paired

CLOCKS = ("wall", "host", "device")


def everything() -> dict[str, set[str]]:
    return {clock: {"eager", "compiled"} for clock in CLOCKS}


def calling_rules(comparisons: list[paired.Comparison], pair: int) -> set[paired.PairedRule] | None:
    """The rules that called for process pair `pair` past the second (a wall red both pairs showed, or one the
    second read ok against: paired.pairs_needed), which alone its looks decide on (`settle_others`: the other
    rules keep what two pairs read, perfgate.ab.duet.JUDGED_LOOKS); None for the first two pairs."""
    if pair <= paired.UNSURE_PAIRS:
        return None
    return {c.rule for c in comparisons if paired.pairs_needed([c]) >= pair}


def wanted(comparisons: list[paired.Comparison], look: int, calling: set | None) -> dict[str, set[str]]:
    """{clock: its sides} a look measures: every clock in a pair's first look (so that each worker's record is
    served whole, whichever rules its pair decides), then the clocks with a rule still unsure; in a third pair,
    after its first look, only the rules that called for it (`calling_rules`) and are still unsure."""
    if look == 0:
        return everything()
    if calling is None:
        return unsure(comparisons)
    return unsure([c for c in comparisons if c.rule in calling])


def settle_others(
    judged: list[paired.Comparison], before: list[paired.Comparison], calling: set | None
) -> list[paired.Comparison]:
    """`judged` with every rule that did not call for this pair (`calling`) as it read `before` it: a third
    pair's rounds decide only the rules that called for it, so its looks turn no other rule red or ok."""
    if calling is None:
        return judged
    kept = {c.rule: c for c in before}
    return [c if c.rule in calling else kept[c.rule] for c in judged if c.rule in calling or c.rule in kept]


def unsure(comparisons: list[paired.Comparison]) -> dict[str, set[str]]:
    """{clock: its sides with a rule still unsure}. The device clock's block profiles both sides at once."""
    out: dict[str, set[str]] = {}
    for c in comparisons:
        if c.outcome == "unsure":
            out.setdefault(c.rule.clock.name, set()).add(c.rule.side)
    if "device" in out:
        out["device"] = {"eager", "compiled"}
    return out


def decided(comparisons: list[paired.Comparison], calling: set | None = None) -> bool:
    """Whether a process pair's looks end, judged on the rules that called for it (`calling_rules`; every rule
    in the first two pairs): no rule is unsure, a regression already stands (shown in its clock's
    CONFIRM_PAIRS: the cell is red whatever the others read), or a pooled rule reads red (the device clock, whose
    next pairs' rounds pool with this one's). A wall red of this pair alone, which a process's own speed makes
    and the next pair may undo, needs no more of this pair's rounds (each look keeps its error rate) but leaves
    the rules still unsure measured to the pair's last look: the cell's verdict then rests on them. A planted
    1.5 % GPU loss on segformer_b2 train (4xH200 cda00e07) had its device rule stopped at 3 rounds a side in
    each pair by its wall's red, and unsure after two pairs."""
    comparisons = [c for c in comparisons if calling is None or c.rule in calling]
    if any(paired.confirmed(c) or (c.outcome == "regression" and c.rule.pooled) for c in comparisons):
        return True
    return "unsure" not in {c.outcome for c in comparisons}


def judge(
    rounds: dict,
    confidence: float,
    device_kind: str,
    eager_wall: bool = False,
    layouts: bool = False,
    pinned: bool = False,
    lost: Collection[str] = (),
) -> list[paired.Comparison]:
    """Every rule of the cell (paired.rules_for) over the rounds so far ({clock: {"a"|"b": {side: [rounds of
    each process pair]}}}), where both sides have some. A judged rule of a clock in `lost` (a side could not
    take its rounds: its profiler failed) with no round pairs is unsure, never left out: a cell whose device
    rounds all failed would else be judged by its wall clock alone, and a GPU loss pass."""
    out = []
    for rule in paired.rules_for(device_kind, eager_wall, layouts, pinned):
        data = rounds[rule.clock.name]
        a, b = data["a"][rule.side], data["b"][rule.side]
        if sum(len(x) for x in a) and sum(len(x) for x in b):
            out.append(paired.across_pairs(a, b, rule, confidence))
        elif rule.judged and rule.clock.name in lost:
            out.append(paired.Comparison(rule, 0.0, -1.0, 1.0, "unsure", 0, confidence))
    return out
