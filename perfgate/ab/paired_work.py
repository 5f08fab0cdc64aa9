"""What B's step did against A's where no interval is needed: the counts of its work (kernels, ATen ops, Python
calls), judged within their bands, and each process pair's GPU time by kernel, where it moved. The paired
verdict (perfgate.ab.paired) reads the clocks; these read the records. Imports no torch."""

from __future__ import annotations

from typing import Sequence

from perfgate.core.clocks import COUNTS
from perfgate.judge.finding import REGRESSION
from perfgate.judge.rules import CountBandRule


def counts(record_a: dict, record_b: dict) -> list[dict]:
    """B's counts of a step's work against A's (two ok records), side by side (perfgate.core.clocks.COUNTS),
    each within its band by the gate's own count rule (perfgate.judge.rules.CountBandRule, A in the baseline's
    place). A count needs
    no interval: it does not follow the host (the same in every process of a cell, but Python calls where the
    two sides got their graphs by different ways: docs/measuring.md). Grown past the band is a regression; shrunk past
    it is shown as the PR's own gain ("fewer"), never a failure. Judged B against A rather than against the
    committed baseline, so a count that moved on main since the baseline was taken is not laid on the PR."""
    if uncounted_alike(record_a, record_b):
        return []
    out = []
    for count in COUNTS:
        for side in ("compiled", "eager"):
            a, b = record_a.get(count.field(side)), record_b.get(count.field(side))
            if a is None or b is None:
                continue
            rule = CountBandRule(count.field(side), count.threshold, apart=count.apart)
            found = rule.check(record_a, record_b)
            outcome = "ok" if found is None else "regression" if found.kind == REGRESSION else "fewer"
            out.append(
                {
                    "count": count.name,
                    "label": count.label,
                    "verb": count.verb,
                    "side": side,
                    "a": a,
                    "b": b,
                    "change": b / a - 1 if a else None,  # None: from none to some (a new CUDA graph replay, say)
                    "threshold": rule.band(record_a, record_b),
                    "outcome": outcome,
                }
            )
    return out


def uncounted_alike(record_a: dict, record_b: dict) -> str:
    """Why two records' counts cannot be compared, or "": counted over other steps (a base from before the
    captioner counted its first 3 batches rather than its 8-length stream reads other caption lengths)."""
    if CountBandRule.other_steps(record_a, record_b):
        return f"counts not compared: A counted {record_a['counts_steps']} steps a side, B {record_b['counts_steps']}"
    return ""


KERNELS_SHOWN = 5  # kernels named a side and process pair: the ones whose GPU ms per step moved most


def kernels_moved(tables: Sequence[dict], shown: int = KERNELS_SHOWN) -> list[dict]:
    """Where each process pair's GPU time moved, B against A, from the workers' kernel tables ({"a"|"b": {side:
    {kernel: ms per step}}}, perfgate.measure.clocks.kernel_ms): per pair and side, the kept kernels' total on
    each side and the `shown` kernels whose ms moved most. A change spread over every kernel (a process whose
    GPU work all ran slower) reads differently from one kernel that grew (a new launch config, a planted spin)."""
    out = []
    for pair, table in enumerate(tables, 1):
        if not (table.get("a") and table.get("b")):
            continue
        for side in ("compiled", "eager"):
            a, b = table["a"].get(side) or {}, table["b"].get(side) or {}
            if not (a and b):
                continue
            names = sorted(set(a) | set(b), key=lambda n: -abs(b.get(n, 0.0) - a.get(n, 0.0)))[:shown]
            out.append(
                {
                    "pair": pair,
                    "side": side,
                    "a_ms": round(sum(a.values()), 4),
                    "b_ms": round(sum(b.values()), 4),
                    "moved": [{"kernel": n, "a_ms": a.get(n, 0.0), "b_ms": b.get(n, 0.0)} for n in names],
                }
            )
    return out
