"""The paired device clock: rounds each in a fresh layout of GPU memory (perfgate.measure.layout), their mean with a
Welch t interval, process pairs pooled, a pair that reads the opposite alone vetoing (perfgate.ab.paired)."""

from __future__ import annotations

import random

import numpy as np
import pytest

from perfgate.ab import duet, looks, paired
from perfgate.core.clocks import WALL

RULE = paired.PairedRule(WALL, "compiled", 0.05)
DEVICE_RULE = paired.RULES[2]  # compiled device ms: rounds in fresh memory layouts, their mean, pairs pooled
ONE_LAYOUT_RULE = paired.rules_for("gpu", layouts=False)[2]  # the same without fresh layouts: each pair must show it


def steady(n: int, ms: float, seed: int) -> np.ndarray:
    """Device rounds of one process: within 0.1 % of the process's own level."""
    return ms * (1 + np.random.default_rng(seed).normal(0, 0.0005, n))


@pytest.mark.parametrize(
    "levels, expected",
    [
        ((1.012, 0.995), "unsure"),  # an A/A whose first process pair sat 1.2 % apart (upernet train, H200)
        ((1.02, 1.019), "regression"),  # a real 2 % loss shows in both pairs
        ((1.002, 0.999), "ok"),
    ],
    ids=["one-pair-gap-unsure", "both-pairs-regression", "aa-ok"],
)
def test_a_pair_that_reads_the_opposite_leaves_the_device_clock_unsure(levels, expected):
    a = [steady(8, 47.3, 1), steady(8, 47.3, 2)]
    b = [steady(8, 47.3 * levels[0], 3), steady(8, 47.3 * levels[1], 4)]
    got = paired.across_pairs(a, b, DEVICE_RULE, paired.look_confidence(6))
    assert got.outcome == expected, got
    assert len(got.by_pair) == 2 and got.as_json()["by_pair"][0] == pytest.approx(levels[0] - 1, abs=0.003)


def layouts(n: int, ms: float, seed: int, sd: float = 0.005) -> np.ndarray:
    """Device rounds each in a fresh memory layout: a round's level moves by `sd` (upernet_convnext_t train's
    compiled step: 0.5 %, perfgate.measure.layout)."""
    return ms * (1 + np.random.default_rng(seed).normal(0, sd, n))


def test_device_pairs_are_pooled():
    """A loss whose second process pair's rounds alone span the line: the device clock's pooled rounds show it
    (its rounds sample layouts, the process effect it had before), where each pair had to show it before."""
    a = [layouts(9, 47.3, 1), layouts(9, 47.3, 2)]
    b = [layouts(9, 47.3 * 1.025, 3), layouts(9, 47.3 * 1.012, 4)]
    confidence = paired.look_confidence(6)
    alone = paired.compare([a[1]], [b[1]], DEVICE_RULE, confidence)
    assert alone.outcome == "unsure"
    assert paired.across_pairs(a, b, DEVICE_RULE, confidence).outcome == "regression"
    assert paired.across_pairs(a, b, ONE_LAYOUT_RULE, confidence).outcome == "unsure"
    assert not RULE.pooled  # a host-bound step's process effect is its CPU's: each pair must show it


def test_the_device_clock_judges_the_mean_of_its_rounds_pooling_pairs_only_where_they_took_fresh_layouts():
    assert (DEVICE_RULE.estimator, DEVICE_RULE.pooled, RULE.estimator) == ("mean", True, "min")
    assert (ONE_LAYOUT_RULE.estimator, ONE_LAYOUT_RULE.pooled) == ("mean", False)
    assert paired.estimators() == paired.estimators(layouts=False) == "min (device: mean)"


@pytest.mark.parametrize("rule", [DEVICE_RULE, ONE_LAYOUT_RULE], ids=["fresh-layouts", "one-layout"])
def test_a_device_looks_interval_holds_its_confidence_with_or_without_fresh_layouts(rule):
    """A look of 3 device rounds a side, A/A: its interval misses the true change of 0 in under 2 % of looks at
    the nominal 0.83 %. The minimum's bootstrap, which the rounds of one layout took before 2026-11-29, missed it
    in about a quarter, so a green there was as good as a coin with a weight on it."""
    rng = np.random.default_rng(1)
    confidence, looks = paired.look_confidence(6), 1500
    missed = 0
    for _ in range(looks):
        a, b = 47.3 * (1 + rng.normal(0, 0.003, 3)), 47.3 * (1 + rng.normal(0, 0.003, 3))
        got = paired.compare([a], [b], rule, confidence)
        missed += not got.lo <= 0 <= got.hi
    assert missed / looks < 0.02


def test_the_mean_s_interval_holds_its_confidence_over_three_layouts_a_side():
    """A bootstrap of 3 rounds has 10 distinct resamples: over A/A looks of 3 layouts a side it missed the true
    change of 0 in 26 % of looks at a nominal 0.83 %. Student's t holds it."""
    rng = np.random.default_rng(0)
    confidence, looks = paired.look_confidence(6), 1500
    missed = 0
    for _ in range(looks):
        a, b = 47.3 * (1 + rng.normal(0, 0.005, 3)), 47.3 * (1 + rng.normal(0, 0.005, 3))
        _, lo, hi = paired.mean_interval([(a, b)], confidence)
        missed += not lo <= 0 <= hi
    assert missed / looks < 0.02


def test_process_pairs_weigh_alike_whatever_their_rounds():
    """A pair that took three looks (9 rounds) outweighs none that took one (3): the pooled change is the two
    pairs' mean, +0.75 %, not the rounds' (+1.1 %)."""
    a = [np.full(9, 47.3), np.full(3, 47.3)]
    b = [np.full(9, 47.3 * 1.015), np.full(3, 47.3)]
    change, _, _ = paired.mean_interval(list(zip(a, b)), 0.99)
    assert change == pytest.approx(np.sqrt(1.015) - 1, abs=1e-9)


def test_one_process_pairs_regression_is_measured_again():
    one = paired.across_pairs([steady(8, 47.3, 1)], [steady(8, 48.3, 2)], DEVICE_RULE, 0.99)
    assert one.outcome == "regression" and not one.by_pair
    assert not paired.final([one], pairs=1) and paired.final([one], pairs=2)


def test_the_report_names_each_cells_own_estimators():
    """A record judged by the minimum on every clock (one whose device rounds took no fresh layouts, before
    2026-11-29): the PR comment names what each cell's figures are, not today's default."""
    from perfgate.ab.verdict import PairedVerdict

    cells = [
        {"cell": c, "paired": {"outcome": "ok", "rules": [], "against": "base", "estimator": e, "duets": 1, "looks": 1}}
        for c, e in (("a", paired.estimators()), ("b", "min"))
    ]
    assert (
        "by each side's fastest round; each side's fastest round (device: each side's mean round), with"
        in PairedVerdict.of(cells).markdown()
    )


def test_a_device_block_one_side_could_not_take_drops_both_sides_rounds():
    """A side whose profiler failed answers the device block with None: the other side's rounds of that block
    pair with nothing, and are dropped, so each pair's rounds stay matched (the judge would read none at all)."""

    class Worker:
        def __init__(self, failed):
            self.hello, self.failed = {"hello": {"wall_sides": True, "relayout": True}}, failed

        def send(self, message):
            pass

        def expect(self, key, limit_s, progress=None):
            return {key: None} if self.failed else {key: {"eager": [2.0] * 3, "compiled": [1.0] * 3}}

    workers = {"A": Worker(False), "B": Worker(True)}
    pair = type("Pair", (), {"sides": ("A", "B"), "worker": lambda self, side: workers[side]})()
    rounds = {clock: {s: {"eager": [[]], "compiled": [[]]} for s in "ab"} for clock in duet.CLOCKS}
    ready = {"a": {"device_clock": True}, "b": {"device_clock": True}}
    spent = dict.fromkeys(duet.CLOCKS, 0.0)
    duet._look_once(pair, rounds, 1, random.Random(0), ready, {"device": {"eager", "compiled"}}, spent, {})
    assert rounds["device"]["a"]["compiled"] == [[]] == rounds["device"]["b"]["compiled"]
    assert looks.judge(rounds, 0.99, "gpu", layouts=True) == []  # no device rule to judge, and no error
