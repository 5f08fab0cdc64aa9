"""What a paired look asks of the two workers and keeps: eager's wall step in a few round pairs where it is
shown, not judged; and where a cell's GPU time went, each side's kernels by name from the device clock's profiled
rounds, with the kernels whose ms moved B against A named in a device rule's verdict; and how many process pairs
a cell's comparisons call for."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from perfgate.ab import duet, looks, pair_workers, paired, paired_work
from perfgate.ab.verdict import PairedVerdict


def _work(spin_ns: int = 0) -> dict:
    """Two profiled rounds a side of one step each: (start ns, end ns, name) of their GPU work."""

    def round_(mm_ns: int) -> list:
        out = [(0, mm_ns, "gemm"), (mm_ns, mm_ns + 200_000, "triton_poi_fused_add_0")]
        return out + ([(10**7, 10**7 + spin_ns, "spin_kernel")] if spin_ns else [])

    return {
        "perfgate-clock:eager:0": round_(1_000_000),
        "perfgate-clock:compiled:0": round_(900_000),
        "perfgate-clock:eager:1": round_(1_000_000),
        "perfgate-clock:compiled:1": round_(920_000),
    }


def test_each_sides_kernels_are_summed_by_name_with_the_median_over_rounds():
    pytest.importorskip("torch")
    from perfgate.measure.clocks import kernel_ms

    table = kernel_ms(_work(), steps=1)
    assert table["eager"] == {"gemm": 1.0, "triton_poi_fused_add_0": 0.2}
    assert table["compiled"]["gemm"] == pytest.approx(0.91)  # the median of 0.90 and 0.92
    assert list(kernel_ms(_work(), steps=2, keep=1)["eager"]) == ["gemm"]  # the dearest kept, per step
    assert kernel_ms(_work(), steps=2)["eager"]["gemm"] == 0.5


def test_the_kernel_that_grew_is_named_first_and_a_device_regression_names_it():
    pytest.importorskip("torch")
    from perfgate.measure.clocks import kernel_ms

    base, planted = kernel_ms(_work(), 1), kernel_ms(_work(spin_ns=150_000), 1)
    moved = paired_work.kernels_moved([{"a": base, "b": planted}, {"a": base}])  # the second pair: no B table
    assert [(m["pair"], m["side"]) for m in moved] == [(1, "compiled"), (1, "eager")]
    first = moved[0]["moved"][0]
    assert (first["kernel"], first["a_ms"], first["b_ms"]) == ("spin_kernel", 0.0, 0.15)
    rule = {"clock": "device", "side": "compiled", "outcome": "regression", "change": 0.14, "lo": 0.13, "hi": 0.15}
    summary = {"against": "base", "outcome": "regression", "rules": [{**rule, "threshold": 0.01}], "kernels": moved}
    verdict = PairedVerdict.of([{"cell": "c", "paired": summary}])
    assert "compiled GPU time by kernel, pair 1: spin_kernel +0.150 ms (0.000 -> 0.150)" in verdict.lines()[1]
    assert "eager GPU time" not in verdict.lines()[1]  # only the sides of the device rules not ok
    assert "c: compiled GPU time by kernel, pair 1: spin_kernel" in verdict.markdown()


def test_the_coordinator_keeps_each_workers_latest_kernel_table():
    """A device round pair's answers carry each worker's kernels; a worker of an older engine sends none."""
    tables = {"A": {"compiled": {"k": 1.0}}, "B": None}

    class Worker:
        def __init__(self, side):
            self.side, self.hello = side, {"hello": {"wall_sides": True}}

        def send(self, message):
            pass

        def expect(self, key, limit_s, progress=None):
            got = {key: {"eager": [2.0], "compiled": [1.0]}}
            return {**got, "kernels": tables[self.side]} if tables[self.side] else got

    pair = type("Pair", (), {"sides": ("A", "B"), "worker": lambda self, side: Worker(side)})()
    rounds = {clock: {s: {"eager": [[]], "compiled": [[]]} for s in "ab"} for clock in duet.CLOCKS}
    kept: dict = {}
    ready = {"a": {"device_clock": True}, "b": {"device_clock": True}}
    duet._look_once(
        pair,
        rounds,
        1,
        random.Random(0),
        ready,
        {"device": {"eager", "compiled"}},
        dict.fromkeys(duet.CLOCKS, 0.0),
        kept,
    )
    assert kept == {"a": {"compiled": {"k": 1.0}}}
    assert rounds["device"]["b"]["compiled"] == [[1.0]]
    assert paired_work.kernels_moved([kept]) == []


@pytest.mark.parametrize(
    "base_relayouts, variant, expected",
    [(True, "inductor_default", True), (False, "inductor_default", False), (True, "inductor_reduce_overhead", False)],
    ids=["both-engines", "base-predates-it", "cuda-graphs"],
)
def test_device_rounds_take_fresh_memory_layouts_on_both_sides_or_neither(base_relayouts, variant, expected):
    """Each device round in a fresh layout of GPU memory (perfgate.measure.layout) where both engines can: a base
    whose engine predates it keeps one layout a process, and so must B, or the two sides' rounds would differ
    in kind (upernet_convnext_t train's eager step: 63.4 ms in a process's first layout, up to 64.0 in later
    ones). A compiled step that replays CUDA graphs runs in their own memory pool, which no layout moves."""
    asked: list[dict] = []

    class Worker:
        def __init__(self, side):
            self.hello = {"hello": {"wall_sides": True, "relayout": base_relayouts or side == "B"}}

        def send(self, message):
            asked.append(message)

        def expect(self, key, limit_s, progress=None):
            return {key: {"eager": [2.0], "compiled": [1.0]}}

    workers = {"A": Worker("A"), "B": Worker("B")}
    pair = type("Pair", (), {"sides": ("A", "B"), "worker": lambda self, side: workers[side]})()
    layouts = pair_workers.layouts_of(pair, variant)
    assert layouts is expected
    rounds = {clock: {s: {"eager": [[]], "compiled": [[]]} for s in "ab"} for clock in duet.CLOCKS}
    ready = {"a": {"device_clock": True}, "b": {"device_clock": True}}
    wanted = {"device": {"eager", "compiled"}}
    spent = dict.fromkeys(duet.CLOCKS, 0.0)
    duet._look_once(pair, rounds, 1, random.Random(0), ready, wanted, spent, {}, duet.WALL_PAIRS, layouts)
    assert [m["relayout"] for m in asked] == [expected] * 2


def _looked_at(
    older_base: bool, wanted: dict, eager_pairs: int = duet.WALL_PAIRS, pairs: int = duet.WALL_PAIRS
) -> tuple[dict, list[dict]]:
    """(rounds, requests) of one look over two fake workers, side A's engine older than per-side stepping where
    `older_base`: its hello does not say wall_sides."""
    asked: list[dict] = []

    class Worker:
        def __init__(self, side):
            self.hello = {} if older_base and side == "A" else {"hello": {"wall_sides": True}}

        def send(self, message):
            asked.append(message)

        def expect(self, key, limit_s, progress=None):
            return {key: {"eager": 20.0, "compiled": 10.0}}

    pair = type("Pair", (), {"sides": ("A", "B"), "worker": lambda self, side: Worker(side)})()
    rounds = {clock: {s: {"eager": [[]], "compiled": [[]]} for s in "ab"} for clock in duet.CLOCKS}
    spent = dict.fromkeys(duet.CLOCKS, 0.0)
    duet._look_once(pair, rounds, 2, random.Random(0), {}, wanted, spent, {}, eager_pairs, pairs=pairs)
    return rounds, asked


@pytest.mark.parametrize("pairs, shown", [(12, 4), (20, 7), (24, 8)], ids=["12-pairs", "20-pairs", "24-pairs"])
@pytest.mark.parametrize(
    "older_base, eager_judged",
    [(False, False), (True, False), (False, True)],
    ids=["pr-gate", "base-predates-it", "ab-judges-eager"],
)
def test_a_first_look_steps_eager_in_a_few_pairs_where_its_wall_step_is_only_shown(
    older_base, eager_judged, pairs, shown
):
    """The PR gate shows eager's wall step and never judges it: of a first look's wall round pairs, eager runs in
    EAGER_SHOWN_PAIRS of WALL_PAIRS, spread over the look (the records' own speedup and the shown change),
    compiled in all; a look of shorter rounds and more pairs (duet.wall_shape) keeps that share. A base whose
    engine steps both sides whatever it is asked, and an A/B that judges eager, step it in every pair."""
    rounds, asked = _looked_at(
        older_base, {"wall": {"eager", "compiled"}}, duet.eager_pairs(pairs, 0, eager_judged), pairs
    )
    stepped_eager = pairs if older_base or eager_judged else shown
    for s in "ab":
        assert len(rounds["wall"][s]["compiled"][0]) == pairs
        assert len(rounds["wall"][s]["eager"][0]) == stepped_eager
    asked_eager = [i for i, m in enumerate(asked[::2]) if "eager" in m["sides"]]
    assert len(asked_eager) == stepped_eager
    if not (older_base or eager_judged):  # spread over the look, not bunched at its start
        assert asked_eager[-1] >= pairs - pairs // shown - 1


@pytest.mark.parametrize("older_base", [False, True], ids=["both-engines-step-one-side", "base-predates-it"])
def test_a_later_look_steps_only_the_wall_side_still_unsure(older_base):
    """After the first look only the unsure rule's side is stepped. A base on an engine before that (its hello
    does not say wall_sides) steps both sides whatever it is asked, so B is asked for both too: the two sides'
    rounds must run alike."""
    unsure = paired.Comparison(paired.RULES[0], 0.03, -0.01, 0.07, "unsure", 12, 0.99)
    assert paired.RULES[0].key == "compiled_ms"
    assert looks.unsure([unsure]) == {"wall": {"compiled"}}
    rounds, asked = _looked_at(older_base, {"wall": {"compiled"}})
    expected = ["compiled", "eager"] if older_base else ["compiled"]
    assert {m["op"] for m in asked} == {"wall"} and all(m["sides"] == expected for m in asked)
    assert len(rounds["wall"]["a"]["compiled"][0]) == len(rounds["wall"]["b"]["compiled"][0]) == duet.WALL_PAIRS
    assert len(rounds["wall"]["a"]["eager"][0]) == (duet.WALL_PAIRS if older_base else 0)


def _steady(n: int, ms: float, seed: int) -> list[float]:
    rng = random.Random(seed)
    return [ms * (1 + 0.001 * rng.random()) for _ in range(n)]


@pytest.mark.parametrize("clock, confirm", [("wall", 3), ("device", 2)], ids=["wall-three-pairs", "device-two-pairs"])
def test_a_regression_stands_only_once_its_clocks_process_pairs_all_show_it(clock, confirm):
    """A host-bound step's wall clock carries a process effect of up to ~20 % (both of B's processes +21.3 and
    +20.0 % in an H100 A/A): a wall regression must show in three process pairs, a device one in two. A pair that
    does not show it leaves the rule unsure, and no more pairs are taken."""
    from perfgate.core.clocks import DEVICE, WALL

    rule = paired.PairedRule(WALL if clock == "wall" else DEVICE, "compiled", 0.05 if clock == "wall" else 0.01)
    a, b = [], []
    for pair in range(1, paired.MAX_PAIRS + 1):
        a.append(_steady(12, 10.0, pair))
        b.append(_steady(12, 12.0, 100 + pair))  # B 20 % slower in every pair
        got = paired.across_pairs(a, b, rule, 0.99)
        assert got.outcome == "regression"
        assert paired.final([got], pair) == (pair >= confirm), pair
    faded = paired.across_pairs(a[:2] + [_steady(12, 10.0, 9)], b[:2] + [_steady(12, 10.0, 10)], rule, 0.99)
    assert faded.outcome == "unsure" and paired.final([faded], 3)
    unsure = paired.Comparison(rule, 0.03, -0.01, 0.07, "unsure", 12, 0.99)
    assert paired.pairs_needed([unsure]) == 2 and paired.pairs_needed([replace(unsure, outcome="ok")]) == 1


@pytest.mark.parametrize(
    "later, outcome, needed",
    [
        ([10.0], "unsure", 3),  # red, then ok: a third pair may outvote it
        ([10.0, 10.0], "ok", 1),  # red, ok, ok: outvoted
        ([10.0, 12.0], "unsure", 2),  # red, ok, red: no more pairs
        ([[10.3] + [10.8] * 11], "unsure", 2),  # red, then unsure (+3 to +8 %): no third pair could outvote it
    ],
    ids=["red-ok", "red-ok-ok", "red-ok-red", "red-unsure"],
)
def test_a_wall_red_that_fresh_pairs_read_ok_against_is_outvoted(later, outcome, needed):
    """One process pair's wall red (a host-bound step's process effect: +7 to +28 % in A/As whose next pair read
    ok) against later pairs' own intervals inside the line: ok once those are most of the pairs and their pooled
    rounds read ok; a pair that is neither leaves the rule unsure, and no third pair is taken for it."""
    from perfgate.core.clocks import WALL

    rule = paired.PairedRule(WALL, "compiled", 0.05)
    a = [_steady(12, 10.0, pair) for pair in range(1 + len(later))]
    b = [_steady(12, 12.0, 100)] + [
        ms if isinstance(ms, list) else _steady(12, ms, 101 + i) for i, ms in enumerate(later)
    ]
    got = paired.across_pairs(a, b, rule, 0.99)
    assert got.outcome == outcome and got.by_pair_outcomes[0] == "regression"
    assert got.as_json()["by_pair_outcomes"] == list(got.by_pair_outcomes)
    assert paired.pairs_needed([got]) == needed
    assert paired.final([got], len(a)) == (len(a) >= needed)


def test_a_pairs_red_alone_leaves_its_unsure_rules_measured_to_the_pairs_last_look():
    """A pair's looks end when nothing is unsure, a regression stands (its clock's pairs all show it), or the
    pooled device rule reads red. A wall red of this pair alone may fade in the next, and the cell's verdict then
    rests on the other rules: those still unsure are measured on (the device rule of a planted loss stopped at 3
    rounds a side by its wall's red)."""
    from perfgate.core.clocks import DEVICE, WALL

    red = paired.Comparison(paired.PairedRule(WALL, "compiled", 0.05), 0.2, 0.15, 0.25, "regression", 12, 0.99)
    device = paired.Comparison(
        paired.PairedRule(DEVICE, "compiled", 0.01, pooled=True), 0.01, 0.0, 0.02, "unsure", 3, 0.99
    )
    assert not looks.decided([red, device]) and looks.wanted([red, device], 1, None) == {
        "device": {"eager", "compiled"}
    }
    assert looks.decided([red, replace(device, outcome="ok")])
    stands = replace(red, by_pair=(0.2, 0.2, 0.2), by_pair_outcomes=("regression",) * 3)
    assert looks.decided([stands, device])
    # A device red (pooled: the next pairs' rounds pool with this one's) ends the pair's looks as before.
    assert looks.decided([replace(red, outcome="unsure"), replace(device, outcome="regression")])


def test_a_third_pair_decides_only_the_rules_that_called_for_it():
    """A third process pair is taken for a wall rule (a red both pairs showed, or one the second read ok against,
    where that could leave the cell ok): its first look measures every clock, so each worker's record is served
    whole, but its looks decide that rule alone. Another rule keeps what two pairs read, so no look past the
    error budget of the first two pairs turns it red or ok."""
    from perfgate.core.clocks import DEVICE, WALL

    wall = paired.Comparison(
        paired.PairedRule(WALL, "compiled", 0.05),
        0.03,
        -0.01,
        0.04,
        "unsure",
        24,
        0.99,
        (0.09, 0.0),
        ("regression", "ok"),
    )
    device = paired.Comparison(paired.PairedRule(DEVICE, "compiled", 0.01, pooled=True), 0.0, -0.2, 0.2, "ok", 6, 0.99)
    assert paired.pairs_needed([wall, device]) == 3
    # With the device rule unsure after two pairs, no third pair could leave the cell ok: none is taken.
    assert paired.pairs_needed([wall, replace(device, outcome="unsure")]) == 2
    assert looks.calling_rules([wall, device], 2) is None
    calling = looks.calling_rules([wall, device], 3)
    assert calling == {wall.rule}
    assert looks.wanted([wall, device], 0, calling) == looks.everything()
    assert looks.wanted([wall, replace(device, outcome="unsure")], 1, calling) == {"wall": {"compiled"}}
    red_now = [replace(wall, outcome="ok"), replace(device, outcome="regression")]  # judged on the third pair's rounds
    assert [c.outcome for c in looks.settle_others(red_now, [wall, device], calling)] == ["ok", "ok"]
    assert looks.settle_others(red_now, [wall, device], None) == red_now


def test_a_regression_that_a_later_pair_could_not_measure_stays_unsure():
    """A device regression from pair 1 whose pair 2 lost its device rounds (a side's profiler failed) rests on
    one pair: measuring ends, and the verdict reads it unsure, never red."""
    from perfgate.core.clocks import DEVICE

    rule = paired.PairedRule(DEVICE, "compiled", 0.01)
    one = paired.across_pairs([_steady(4, 10.0, 1), []], [_steady(4, 10.3, 2), []], rule, 0.99)
    assert one.outcome == "regression" and paired.measured_pairs(one) == 1
    assert paired.final([one], 2) and [c.outcome for c in paired.settled([one])] == ["unsure"]


def _measured_red(
    monkeypatch,
    died_in_pair2: bool,
    kernels_b: int = 100,
    outvoted: bool = False,
    picked: bool = False,
    holds: bool = False,
    pin: bool = False,
) -> tuple:
    """duet.measure of one cell whose wall rule reads a regression at every look, over two fake workers whose
    records carry `kernels_b` compiled kernels on B against A's 100; B's worker dies in pair 2's rounds where
    `died_in_pair2`. `outvoted`: judged for real instead, B's compiled step 20 % slower in pair 1 alone; returns
    the workers' requests too. `pin`: PERFGATE_PAIRED_PIN=shared (the caller fakes perfgate.ab.pinning.Pinned:
    the fake workers' pids are no workers' to move)."""
    from perfgate.ab.sides import Side
    from perfgate.core.clocks import WALL
    from perfgate.core.job import Job, RunOptions
    from perfgate.core.matrix import Cell

    class Worker:
        def __init__(self, name):
            self.name, self.jobs, self.finish_asked, self.sent = name, 0, False, []
            self.popen = type("P", (), {"pid": 1 if name == "a" else 2})()
            self.hello = {"hello": {"wall_sides": True, "holds": holds}}
            self.side = Side(name.upper(), ".")

        def send(self, message):
            self.sent.append(message)
            self.jobs += "job" in message
            self.finish_asked = message.get("op") == "finish"

        def expect(self, key, limit_s, progress=None):
            last = self.sent[-1]
            job = max(i for i, m in enumerate(self.sent) if "job" in m)
            goes = sum(m.get("op") == "go" for m in self.sent[job:])  # a held job's turns (duet._staggered)
            if (self.sent[job].get("hold") and goes < 2) and ("job" in last or last.get("op") == "go"):
                return {"hold": ("compile", "compiled")[goes]}
            if "job" in last or last.get("op") == "go":
                return {"ready": {"eager_ms": 20.0, "compiled_ms": 10.0, "device_clock": False}}
            if last.get("op") == "finish":
                kernels = kernels_b if self.name == "b" else 100
                return {"record": {"status": "ok", "cell": "c", "pair": self.jobs, "compiled_kernels": kernels}}
            if died_in_pair2 and self.name == "b" and self.jobs == 2:
                return {"record": {"status": "failed", "reason": "worker died"}}
            slow = outvoted and self.name == "b" and self.jobs == 1
            return {key: {"eager": 20.0, "compiled": 12.0 if slow else 10.0}}

    workers = {"a": Worker("a"), "b": Worker("b")}
    monkeypatch.setenv("PERFGATE_PAIRED_PIN", "shared" if pin else "off")
    fake = type("Duet", (), {})()
    fake.sides, fake.first, fake.notes = (Side("A", "."), Side("B", ".")), "a", {}
    fake.worker = lambda side: workers[side.name.lower()]
    fake.start = lambda *sides: [workers[s.name.lower()] for s in sides]
    fake.renew = fake.spawn_spares = fake.greet_spares = lambda: None
    red = paired.Comparison(paired.PairedRule(WALL, "compiled", 0.05), 0.2, 0.15, 0.25, "regression", 12, 0.99)
    # Red in every pair measured so far: across_pairs keeps each pair's change in by_pair.
    if not outvoted:
        monkeypatch.setattr(
            looks,
            "judge",
            lambda rounds, *args, **kwargs: [replace(red, by_pair=(0.2,) * len(rounds["wall"]["b"]["compiled"]))],
        )
    job = Job(Cell("mlp", "train", "aot_eager", "fp32", "gpu"), RunOptions(device="cuda"), tf32=False)
    got = duet.measure(fake, job, lambda _m: None, picked=picked)
    return (*got, workers) if outvoted else got


def test_a_worker_lost_in_a_later_process_pair_keeps_the_last_whole_pairs_records(monkeypatch):
    """Pair 1 reads a wall regression, so pair 2 is taken; B's worker dies in its rounds. This tree's cell keeps
    pair 1's record (not a failed one: the gate would read a failed cell as a regression), and the cell is
    unsure, naming why."""
    record_b, record_a, summary = _measured_red(monkeypatch, died_in_pair2=True)
    assert record_b["pair"] == 1 and record_a["pair"] == 1 and record_b["status"] == "ok"
    assert summary["outcome"] == "unsure" and "ended its cell mid-rounds" in summary["error"]


@pytest.mark.parametrize(
    "kernels_b, pairs, outcome",
    [(100, 3, "regression"), (110, 1, "regression")],
    ids=["wall-red-in-three-pairs", "a-count-red-ends-it-at-one"],
)
def test_a_wall_red_takes_three_pairs_unless_a_count_already_shows_the_regression(
    monkeypatch, kernels_b, pairs, outcome
):
    """A wall red is measured in three process pairs; a cell whose B step already runs more kernels than A's
    (a count past its band: counts repeat across processes) is red after its first."""
    _record_b, _record_a, summary = _measured_red(monkeypatch, died_in_pair2=False, kernels_b=kernels_b)
    assert summary["duets"] == pairs and summary["outcome"] == outcome
    # A 10 ms step: rounds of 3 steps (~25 ms), 20 pairs a look for the seconds of 12 rounds of 5 (duet.wall_shape).
    assert summary["steps_per_round"] == 3 and summary["wall_pairs"] == [20] * pairs
    # Each pair keeps which side prepared first (alternating, A first) and whether the two prepared at once
    # (not in a first pair unless the cache holds the cell's launch-config picks; always in a later one).
    assert summary["prepared"] == [{"first": "ab"[i % 2], "together": i > 0} for i in range(pairs)]


@pytest.mark.parametrize("steps_sides", [True, False], ids=["this-engine", "an-engine-that-steps-both"])
def test_a_pairs_rounds_are_sized_by_steps_timed_alone_not_by_a_warm_up_beside_the_other_side(steps_sides):
    """Two sides that warmed up at once read a 10 ms step as 20: sized from that, a round took one step (~10 ms)
    where the gate means ~25 ms (dcbf00b5, 0caedecf). B times a round of each side alone first, which reaches
    no record (one side a round); a worker that steps both sides whatever it is asked keeps its warm-up's."""
    from perfgate.ab.sides import Side
    from perfgate.core.job import Job, RunOptions
    from perfgate.core.matrix import Cell

    class Worker:
        side, sent = Side("B", "."), []
        hello = {"hello": {"wall_sides": steps_sides}}

        def send(self, message):
            self.sent.append(message)

        def expect(self, key, limit_s, progress=None):
            return {key: {side: {"eager": 20.0, "compiled": 10.0}[side] for side in self.sent[-1]["sides"]}}

    job = Job(Cell("mlp", "train", "aot_eager", "fp32", "gpu"), RunOptions(device="cuda"), tf32=False)
    shared = {"eager_ms": 40.0, "compiled_ms": 20.0, "device_clock": True}
    worker = Worker()
    assert duet.wall_shape(shared, job) == (1, 24)
    alone = duet.sized(worker, shared, job)
    if steps_sides:
        assert alone == {**shared, "eager_ms": 20.0, "compiled_ms": 10.0} and duet.wall_shape(alone, job) == (3, 20)
        assert worker.sent == [
            {"op": "wall", "steps": 1, "first": side, "sides": [side]} for side in ("compiled", "eager")
        ]
    else:
        assert alone == shared and worker.sent == []


@pytest.mark.parametrize("picked", [False, True], ids=["picks-to-make", "picks-in-the-cache"])
def test_a_first_pair_prepares_at_once_only_where_the_cache_holds_the_picks(monkeypatch, picked):
    """Two sides that time a kernel's launch configs beside each other pick apart (10 cold first pairs to
    2026-11-28): one after the other, B loads A's picks; where an earlier run left them, both load the same."""
    _record_b, _record_a, summary = _measured_red(monkeypatch, died_in_pair2=False, picked=picked)
    assert summary["prepared"][0]["together"] is picked and all(p["together"] for p in summary["prepared"][1:])


@pytest.mark.parametrize(
    "holds, asked, staggered",
    [(False, "", False), (True, "", True), (True, "sequential", False)],
    ids=["engine-without-holds", "engines-that-hold", "sequential-asked"],
)
def test_a_cold_first_pair_compiles_in_turn_where_both_engines_can_hold(monkeypatch, holds, asked, staggered):
    """Without the picks in the cache, a first pair's two sides build and warm up eager at once and take turns
    only for their first compiled calls, where both engines can hold a job (their hello says so); a base whose
    engine cannot, or PERFGATE_PAIRED_PREPARE=sequential (to time the two ways on one machine), prepares wholly
    before B. A later pair prepares at once."""
    monkeypatch.setenv("PERFGATE_PAIRED_PREPARE", asked)
    _record_b, _record_a, summary = _measured_red(monkeypatch, died_in_pair2=False, holds=holds)
    assert summary["prepared"][0] == {"first": "a", "together": False, **({"staggered": True} if staggered else {})}
    assert all(p == {"first": p["first"], "together": True} for p in summary["prepared"][1:])


def test_a_wall_red_the_next_two_pairs_read_ok_against_is_outvoted_with_whole_records(monkeypatch):
    """B's process slow for its life in pair 1 alone (a host-bound step's process effect): pairs 2 and 3 read ok,
    and the cell is ok. The third pair's first look steps eager's wall rounds too, so each worker serves its
    record from the pair's rounds rather than timing the cell itself beside the other side."""
    record_b, _record_a, summary, workers = _measured_red(monkeypatch, died_in_pair2=False, outvoted=True)
    assert summary["duets"] == 3 and summary["outcome"] == "ok" and record_b["pair"] == 3
    wall = next(r for r in summary["rules"] if r["rule"] == "compiled_ms")
    assert wall["by_pair_outcomes"] == ["regression", "ok", "ok"]
    sent = workers["b"].sent
    start = max(i for i, m in enumerate(sent) if "job" in m)  # the third pair's cell
    third = [m for m in sent[start:] if m.get("op") == "wall"]
    assert third and any("eager" in m["sides"] for m in third)
    assert sent[-1] == {"op": "finish", "solo": False}
    # each pair's rounds sized by B's steps timed alone (duet.sized), before its first look
    sizing = {"op": "wall", "steps": 3, "first": "eager", "sides": ["eager"]}
    assert sent.count(sizing) == 3 and sizing not in workers["a"].sent


def test_pinned_rounds_are_judged_by_the_paired_median_and_the_record_says_on_which_cpus(monkeypatch):
    """Under PERFGATE_PAIRED_PIN=shared each process pair's two workers are pinned for their looks (and only
    then), the wall rule is judged by the paired median, and the summary names the CPUs and the estimator."""
    from perfgate.ab import pinning

    entered = []

    class Pinned:
        def __init__(self, pids, cpus):
            self.pids, self.cpus = pids, cpus

        def __enter__(self):
            entered.append((tuple(self.pids), sorted(self.cpus)))
            return self

        def __exit__(self, *_exc):
            entered.append("left")

    monkeypatch.setattr(pinning, "Pinned", Pinned)
    monkeypatch.setattr(pinning, "last_cpus", lambda _allowed: frozenset({14, 15}))
    _record_b, _record_a, summary, _workers = _measured_red(monkeypatch, False, outvoted=True, pin=True)
    assert entered == [((1, 2), [14, 15]), "left"] * summary["duets"]
    assert summary["pinned"] == [14, 15] and summary["estimator"] == "pair_median (device: mean)"
    wall = next(r for r in summary["rules"] if r["rule"] == "compiled_ms")
    assert wall["estimator"] == "pair_median"
    entered.clear()
    _record_b, _record_a, summary, _workers = _measured_red(monkeypatch, False, outvoted=True)
    assert entered == [((1, 2), []), "left"] * summary["duets"] and summary["pinned"] == []
    assert summary["estimator"] == "min (device: mean)"  # the device's mean with or without fresh layouts
    wall = next(r for r in summary["rules"] if r["rule"] == "compiled_ms")
    assert wall["estimator"] == "min"
