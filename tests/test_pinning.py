"""Both sides' workers on one CPU set for their rounds (PERFGATE_PAIRED_PIN, "shared" by default): the set
chosen, every thread of each worker moved onto it and back, the paired median that judges their wall rounds, and
"off"."""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

from perfgate.ab import duet, looks, paired, pinning
from perfgate.core.clocks import WALL

can_pin = pytest.mark.skipif(
    not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
    reason="pinning is seen only where threads can be moved and this process has 2 CPUs or more",
)

# A child with two threads; a line on its stdin starts a third (one born while pinned).
CHILD = """
import sys, threading, time
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("up", flush=True)
sys.stdin.readline()
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("more", flush=True)
sys.stdin.readline()
"""


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "up"
    yield proc
    proc.kill()
    proc.wait()


def _affinities(pid: int) -> dict[int, set[int]]:
    return {int(t): os.sched_getaffinity(int(t)) for t in os.listdir(f"/proc/{pid}/task")}


def test_shared_unless_off_and_a_bad_value_names_the_valid_ones(monkeypatch):
    monkeypatch.delenv(pinning.PIN_ENV, raising=False)
    assert pinning.pin_choice() == "shared"
    monkeypatch.setenv(pinning.PIN_ENV, "off")
    assert pinning.pin_choice() == "off" and pinning.rounds_cpus() == frozenset()
    monkeypatch.setenv(pinning.PIN_ENV, "all")
    with pytest.raises(ValueError, match="PERFGATE_PAIRED_PIN='all': valid values are shared, off"):
        pinning.pin_choice()


def test_a_session_of_sixteen_cpus_pins_its_rounds_to_the_last_two_unless_told_off(monkeypatch):
    monkeypatch.delenv(pinning.PIN_ENV, raising=False)
    monkeypatch.setattr(pinning.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert pinning.rounds_cpus() == frozenset({14, 15})
    monkeypatch.setenv(pinning.PIN_ENV, "off")
    assert pinning.rounds_cpus() == frozenset()


@pytest.mark.parametrize(
    "allowed, expected",
    [(range(16), {14, 15}), ({0, 3, 9}, {3, 9}), ({0, 1}, set()), ({5}, set())],
    ids=["last-two-of-16", "a-shards-share", "two-cpus-nothing-to-gain", "one-cpu"],
)
def test_the_rounds_take_the_last_two_cpus_of_this_process(allowed, expected):
    assert pinning.last_cpus(allowed) == frozenset(expected)


@can_pin
def test_every_thread_is_pinned_inside_its_main_one_on_the_lowest_cpu_and_all_back_after(child):
    before = _affinities(child.pid)
    cpus = frozenset(sorted(os.sched_getaffinity(0))[-2:])
    with pinning.Pinned([child.pid, child.pid], cpus) as pinned:  # both sides' pids: one process, saved once
        assert pinned.cpus == cpus and len(before) == 2
        inside = _affinities(child.pid)
        assert inside.pop(child.pid) == {min(cpus)} and all(c == cpus for c in inside.values())
        child.stdin.write("\n")
        child.stdin.flush()
        assert child.stdout.readline().strip() == "more"  # a thread born inside
    after = _affinities(child.pid)
    assert len(after) == 3 and all(c == before[child.pid] for c in after.values())


def test_nothing_moves_where_no_cpu_set_was_chosen_or_the_process_is_gone(child):
    assert pinning.Pinned([child.pid], frozenset()).cpus == frozenset()
    assert pinning.Pinned([10**7], frozenset({0})).cpus == frozenset()  # no such process: nothing to pin


@can_pin
def test_a_main_thread_that_would_not_move_leaves_every_thread_where_it_was(child, monkeypatch):
    """A cgroup without the chosen CPUs refuses them: the rounds are then not pinned, and said so, so that they
    are never judged as pinned ones."""
    before = _affinities(child.pid)
    real = os.sched_setaffinity

    def refuse_main(tid, cpus):
        if tid == child.pid and len(cpus) == 1:
            raise OSError(22, "Invalid argument")
        real(tid, cpus)

    monkeypatch.setattr(os, "sched_setaffinity", refuse_main)
    with pinning.Pinned([child.pid], frozenset(sorted(os.sched_getaffinity(0))[-2:])) as pinned:
        assert pinned.cpus == frozenset() and _affinities(child.pid) == before


@can_pin
@pytest.mark.parametrize("kind", ["gpu", "cpu"])
def test_the_engine_pins_a_gpu_cells_two_workers_for_their_rounds_where_asked(child, monkeypatch, kind):
    """A CPU cell is never pinned: its thread pool wants every core."""
    worker = type("W", (), {"popen": child})()
    fake = type("Duet", (), {"sides": (type("S", (), {"name": "A"})(), type("S", (), {"name": "B"})())})()
    fake.worker = lambda _side: worker
    before = _affinities(child.pid)
    cpus = frozenset(sorted(os.sched_getaffinity(0))[-2:])
    monkeypatch.setattr(pinning, "rounds_cpus", lambda: cpus)
    summary: dict = {"duets": 1}
    with duet._rounds_pinned(fake, summary, kind):
        assert (_affinities(child.pid)[child.pid] == {min(cpus)}) is (kind == "gpu")
    assert summary["pinned"] == (sorted(cpus) if kind == "gpu" else []) and _affinities(child.pid) == before
    monkeypatch.setattr(pinning, "rounds_cpus", lambda: frozenset())  # a second process pair that could not pin
    summary["duets"] = 2
    with duet._rounds_pinned(fake, summary, kind):
        pass
    assert summary["pinned"] == []


def _pairs(n: int, change: float, seed: int) -> tuple[list[float], list[float]]:
    """Round pairs on a level that moves from pair to pair by up to 20 %, shared by a pair's two rounds (a CPU's
    slow spell hits both pinned sides), B `change` slower; and one fast moment, 25 % under the levels, that
    only A's round of its pair caught."""
    rng = np.random.default_rng(seed)
    level = 13.0 * (1 + 0.2 * rng.random(n))
    jitter = 1 + 0.01 * rng.standard_normal((2, n))
    a, b = level * jitter[0], level * (1 + change) * jitter[1]
    a[n // 3] = 10.0
    return list(a), list(b)


def test_the_paired_median_cancels_what_both_sides_shared_where_the_minimum_reads_a_regression():
    rule = paired.PairedRule(WALL, "compiled", 0.05)
    a, b = _pairs(24, 0.0, 1)
    by_median = paired.compare([a], [b], rule, 0.99, estimator="pair_median")
    assert by_median.outcome == "ok" and by_median.halfwidth < 0.015 and abs(by_median.change) < 0.01
    assert paired.compare([a], [b], rule, 0.99, estimator="min").change > 0.25  # B's floor never met A's moment
    slower = paired.compare([a], [list(np.array(b) * 1.08)], rule, 0.99, estimator="pair_median")
    assert slower.outcome == "regression" and slower.pairs == 24


def test_pinned_rounds_are_judged_by_the_paired_median_on_the_wall_and_host_clocks():
    rules = {(r.clock.name, r.side): r.estimator for r in paired.rules_for("gpu", pinned=True)}
    assert rules[("wall", "compiled")] == rules[("host", "eager")] == "pair_median"
    assert rules[("device", "compiled")] == "mean"
    assert all(r.estimator != "pair_median" for r in paired.rules_for("gpu"))
    assert paired.estimators(pinned=True) == "pair_median (device: mean)"
    a, b = _pairs(24, 0.0, 2)
    rounds = {
        "wall": {"a": {"compiled": [a], "eager": [a]}, "b": {"compiled": [b], "eager": [b]}},
        "host": {"a": {"compiled": [], "eager": []}, "b": {"compiled": [], "eager": []}},
        "device": {"a": {"compiled": [], "eager": []}, "b": {"compiled": [], "eager": []}},
    }
    judged = {c.rule.key: c for c in looks.judge(rounds, 0.99, "gpu", pinned=True)}
    assert judged["compiled_ms"].rule.estimator == "pair_median" and judged["compiled_ms"].outcome == "ok"


def test_an_unknown_estimator_names_the_paired_one_too():
    with pytest.raises(ValueError, match="valid: min, q10, q25, median, mean, pair_median"):
        paired.compare([[1.0]], [[1.0]], paired.RULES[0], 0.95, estimator="mode")


@pytest.mark.parametrize(
    "text, cpus, expected",
    [
        (
            "pair_median (device: mean)",
            [15, 14],
            "the median of the round pairs' B/A ratios, both sides on CPUs 14 and 15 (device: each side's mean round)",
        ),
        ("pair_median", [3], "the median of the round pairs' B/A ratios, both sides on CPU 3"),
        ("min (device: mean)", [], "each side's fastest round (device: each side's mean round)"),
        (
            "min (device: min, host: q10)",
            [],
            "each side's fastest round (device: each side's fastest round, host: each side's 10th-percentile round)",
        ),
        ("min", [], "each side's fastest round"),
        ("q05 (odd)", [], "q05 (odd)"),
    ],
    ids=["pinned", "one-cpu", "unpinned", "two-named-clocks", "a-record-judged-by-min-alone", "unknown-names-kept"],
)
def test_a_paired_report_says_in_words_how_each_figure_was_taken(text, cpus, expected):
    from perfgate.ab.verdict import PairedVerdict, estimator_words

    assert estimator_words(text, cpus) == expected
    summary = {"outcome": "ok", "rules": [], "against": "base", "estimator": text, "pinned": cpus, "duets": 1}
    assert (
        f"against the base's, by {expected}, with its interval"
        in PairedVerdict.of([{"cell": "c", "paired": summary}]).markdown()
    )


def test_every_estimator_has_report_words():
    from perfgate.ab.verdict import ESTIMATOR_WORDS

    assert set(ESTIMATOR_WORDS) == set(paired.ESTIMATORS) | set(paired.PAIRED_ESTIMATORS)
