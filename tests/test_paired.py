"""The paired engine (perfgate.ab): its three-way verdict on synthetic rounds, and the coordinator against fake
workers (process pairs, a side that fails or runs out of memory, what each worker steps). The runs of two trees
of the tiny suite, and the paired options and commands: test_paired_runs.py."""

import sys

import numpy as np
import pytest

from perfgate.ab import duet as duet_module
from perfgate.ab import looks, paired, paired_work
from perfgate.ab.sides import SideError, nonblank, parse_env
from perfgate.ab.verdict import PairedVerdict, combined_exit
from perfgate.core import exits
from perfgate.core.clocks import DEVICE, WALL

RULE = paired.PairedRule(WALL, "compiled", 0.05)


def stalls(n: int, floor: float, seed: int) -> np.ndarray:
    """Rounds of a host-bound step as seen on H100 leases: a floor, and positive heavy-tailed stalls on top."""
    rng = np.random.default_rng(seed)
    return floor * (1 + rng.pareto(1.5, n) * 0.05)


@pytest.mark.parametrize(
    "growth, expected",
    [(1.0, "ok"), (1.15, "regression"), (1.05, "unsure")],
    ids=["aa-ok", "15pct-regression", "at-the-line-unsure"],
)
def test_three_outcomes_on_stalled_rounds(growth, expected):
    a = stalls(40, 25.0, 1)
    b = stalls(40, 25.0 * growth, 2)
    got = paired.compare([a], [b], RULE, paired.look_confidence(6))
    assert got.outcome == expected, got


def test_low_quantile_is_narrower_than_the_median_under_stalls():
    a, b = stalls(40, 25.0, 3), stalls(40, 25.0, 4)
    width = {e: paired.compare([a], [b], RULE, 0.95, estimator=e).halfwidth for e in ("q10", "median")}
    assert width["q10"] < width["median"]


def test_pairs_are_resampled_within_their_duet():
    a1, b1 = stalls(12, 25.0, 5), stalls(12, 25.0, 6)
    a2, b2 = stalls(12, 30.0, 7), stalls(12, 30.0, 8)  # a second process pair on a slower host
    got = paired.compare([a1, a2], [b1, b2], RULE, 0.95)
    assert got.pairs == 24 and abs(got.change) < 0.05


def steady(n: int, ms: float, seed: int) -> np.ndarray:
    """Device rounds of one process: within 0.1 % of the process's own level."""
    return ms * (1 + np.random.default_rng(seed).normal(0, 0.0005, n))


class FakeWorker:
    """A side's worker that answers a job with `ready` (or a failed record) and `finish` with its record."""

    def __init__(self, name: str, fails: bool):
        self.name, self.fails, self.sent, self.finish_asked = name, fails, [], False
        self.popen = type("P", (), {"pid": 1 if name == "a" else 2})()

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def expect(self, key, limit_s, progress=None) -> dict:
        last = self.sent[-1]
        if "job" in last or last.get("op") == "go":
            if self.fails:
                return {"record": {"status": "failed", "reason": f"{self.name} broke"}}
            # A held job (a staggered prepare): held before its first compiled call, then after it, then ready.
            goes = sum(m.get("op") == "go" for m in self.sent)
            held = last.get("hold") or 0 < goes < 2
            return _asked({"hold": ("compile", "compiled")[goes]} if held else {"ready": {}}, key)
        return {"record": {"status": "ok", "solo": last.get("solo")}}


def _asked(message: dict, key) -> dict:
    """A fake worker's answer, as the real Worker.expect returns it: a message it was not asked for would be read
    past (a held side's hold, asked only for "ready", would hang the coordinator to its limit)."""
    keys = (key,) if isinstance(key, str) else key
    assert "record" in message or any(k in message for k in keys), f"{message} answered, {keys} asked"
    return message


class FakeDuet:
    def __init__(self, fails: str):
        self.workers = {name: FakeWorker(name, name in fails) for name in "ab"}
        self.sides = (type("S", (), {"name": "A"})(), type("S", (), {"name": "B"})())
        self.renewed = False

    def worker(self, side):
        return self.workers[side.name.lower()]

    def start(self, *sides):
        return [self.worker(side) for side in sides]

    def renew(self):
        self.renewed = True

    def spawn_spares(self):
        pass

    def greet_spares(self):
        pass


def test_the_two_workers_start_at_once_and_a_base_that_predates_the_engine_runs_on_this_one(tmp_path):
    """Side A's tree has a perfgate without the paired engine (a base revision older than it): its worker is
    started again on this tree's engine, says so, and both stay alive for the next cell."""
    import os
    from pathlib import Path

    import perfgate
    from perfgate.ab.pair_workers import Duet
    from perfgate.ab.sides import Side

    base = tmp_path / "base"
    (base / "perfgate").mkdir(parents=True)
    (base / "perfgate" / "__init__.py").write_text("")
    engine = os.path.dirname(perfgate.__file__)
    here = str(Path(engine).parent)
    duet = Duet(Side("A", str(base)), Side("B", here), tmp_path / "duet", here, sys.path, engine)
    try:
        a, b = duet.start(*duet.sides)
        assert a.popen.poll() is None and b.popen.poll() is None
        assert os.path.realpath(a.hello["hello"]["perfgate"]) == os.path.realpath(engine)
        assert "predates the paired engine" in duet.notes["A"]
        assert duet.start(*duet.sides) == [a, b]  # live workers are kept, not started again
        refused = (tmp_path / "duet" / "A.stderr").read_text().count("found under the perfgate of")
        duet.spawn_spares()  # A's spare starts on this tree's engine at once, not refused first
        duet.greet_spares()
        assert os.path.realpath(duet.spares["A"].hello["hello"]["perfgate"]) == os.path.realpath(engine)
        assert (tmp_path / "duet" / "A.stderr").read_text().count("found under the perfgate of") == refused
    finally:
        duet.close()


def test_a_fresh_process_pair_takes_the_spares_started_while_the_last_one_prepared(tmp_path):
    """A second process pair costs no start: its workers were started (and greeted) beside the first pair."""
    import os
    from pathlib import Path

    import perfgate
    from perfgate.ab.pair_workers import Duet
    from perfgate.ab.sides import Side

    engine = os.path.dirname(perfgate.__file__)
    here = str(Path(engine).parent)
    duet = Duet(Side("A", here), Side("B", here), tmp_path / "duet", here, sys.path, engine)
    try:
        duet.spawn_spares()  # the session's first pair, importing during the precompile
        first = duet.start(*duet.sides)
        assert not duet.spares and all(w.hello for w in first)
        duet.spawn_spares()
        duet.greet_spares()
        spares = [duet.spares["A"], duet.spares["B"]]
        duet.renew()
        assert all(w.popen.poll() is not None for w in first)
        assert duet.start(*duet.sides) == spares and not duet.spares
    finally:
        duet.close()
    assert all(w.popen.poll() is not None for w in spares)


def test_a_side_already_asked_to_finish_is_not_asked_again():
    """Sides that finish at once are both asked first, then read: reading one must not ask it a second time
    (a worker takes the line after its record as its next cell's job)."""
    import io

    from perfgate.ab import pair_workers

    worker = pair_workers.Worker.__new__(pair_workers.Worker)
    worker.side, worker.finish_asked = type("S", (), {"name": "B"})(), False
    worker.popen = type("P", (), {"stdin": io.BytesIO()})()
    worker.expect = lambda key, limit_s, progress=None: {"record": {"status": "ok"}}
    worker.send({"job": {}})
    assert not worker.finish_asked
    worker.send({"op": "finish", "solo": False})
    assert pair_workers.finish(worker, lambda _m: None) == {"status": "ok"}
    assert worker.popen.stdin.getvalue().count(b'"finish"') == 1
    worker.send({"job": {}})  # the next cell: its own finish is asked again
    pair_workers.finish(worker, lambda _m: None)
    assert worker.popen.stdin.getvalue().count(b'"finish"') == 2


@pytest.mark.parametrize("how", ["sequential", "together", "staggered"])
@pytest.mark.parametrize("fails", ["", "a", "b", "ab"], ids=["none-fails", "base-fails", "tree-fails", "both-fail"])
def test_a_side_that_fails_to_prepare_leaves_the_other_timed_alone(fails, how):
    from perfgate.ab import pair_prepare

    job = type("J", (), {"to_json": lambda self: "{}", "limit_s": 1.0})()
    fake = FakeDuet(fails)
    record_a, record_b, ready = pair_prepare.prepare(fake, job, job, lambda _m: None, "a", how)
    assert (ready is None) == bool(fails) and fake.renewed == bool(fails)
    if not fails:
        return
    assert record_b["status"] == ("failed" if "b" in fails else "ok")
    assert record_b.get("solo") is (None if "b" in fails else True)  # this tree's cell times itself alone
    if "a" in fails:
        assert record_a["status"] == "failed"
    else:  # the base, prepared first, finishes its own record alone
        assert record_a == {"status": "ok", "solo": True}


class TurnWorker:
    """A held worker (perfgate.measure.duet): held before its first compiled call, then after it (a stream
    model: ready at once), then ready; each "go" noted in the shared `log` with what the other side was doing.
    `fails_at`: the state in which it ends its cell with a failed record instead."""

    def __init__(self, name: str, log: list, stream: bool, fails_at: str = ""):
        self.name, self.log, self.stream, self.state, self.other = name, log, stream, "idle", None
        self.fails_at, self.finish_asked = fails_at, False
        self.popen = type("P", (), {"pid": 1 if name == "a" else 2})()

    def send(self, message: dict) -> None:
        if "job" in message:
            self.state = "preparing"  # builds and warms up eager, the other side alike
        elif message.get("op") == "go":
            self.state = {"held:compile": "compiling", "held:compiled": "warming"}[self.state]
            self.log.append((self.name, self.state, self.other.state))
        elif message.get("op") == "finish":
            self.state, self.solo = "finishing", message["solo"]

    def expect(self, keys, limit_s, progress=None) -> dict:
        assert limit_s > 0
        if self.state == self.fails_at:
            self.state = "failed"
            return {"record": {"status": "failed", "side": self.name}}
        if self.state == "finishing":
            return {"record": {"status": "ok", "side": self.name, "solo": self.solo}}
        if self.state == "preparing":
            self.state = "held:compile"
        elif self.state == "compiling":
            self.state = "ready" if self.stream else "held:compiled"
        elif self.state == "warming":
            self.state = "ready"
        point = self.state.partition(":")[2]
        return _asked({"hold": point} if point else {"ready": {"side": self.name}}, keys)


def _in_turn(stream: bool, fails: dict | None = None) -> tuple:
    """pair_prepare.prepare, staggered, over two TurnWorkers: (its result, the log of turns, the fake duet)."""
    from perfgate.ab import pair_prepare

    log: list = []
    workers = {name: TurnWorker(name, log, stream, (fails or {}).get(name, "")) for name in "ab"}
    workers["a"].other, workers["b"].other = workers["b"], workers["a"]
    fake = FakeDuet("")
    fake.workers = workers
    job = type("J", (), {"to_json": lambda self: "{}", "limit_s": 1.0})()
    return pair_prepare.prepare(fake, job, job, lambda _m: None, "a", "staggered"), log, fake


@pytest.mark.parametrize("stream", [False, True], ids=["one-batch", "stream-model"])
def test_a_cold_first_pair_compiles_in_turn_with_the_other_side_held(stream):
    """The two sides of a cold first pair build and warm up eager at once; each one's first compiled call, where
    its kernels' launch configs are timed, runs while the other side is held, A first so that B loads A's picks;
    then both warm up at once. A stream model compiles its later shapes in its warm-up: its turn lasts to ready."""
    (record_a, record_b, ready), log, _fake = _in_turn(stream)
    assert (record_a, record_b) == (None, None) and ready == {"a": {"side": "a"}, "b": {"side": "b"}}
    turns = [("a", "compiling", "held:compile"), ("b", "compiling", "ready" if stream else "held:compiled")]
    assert log == turns + ([] if stream else [("a", "warming", "held:compiled"), ("b", "warming", "warming")])


@pytest.mark.parametrize("side", ["a", "b"])
@pytest.mark.parametrize("at", ["preparing", "compiling", "warming"])
def test_a_side_that_fails_at_any_point_of_its_turns_leaves_the_other_timed_alone(side, at):
    """Whether a side ends its cell before its turn, in its first compiled call or in its warm-up, the other one
    is let go through its own turns to its warm state and times the cell alone; the pair is renewed."""
    (record_a, record_b, ready), log, fake = _in_turn(False, {side: at})
    records = {"a": record_a, "b": record_b}
    assert ready is None and fake.renewed
    assert records[side] == {"status": "failed", "side": side}
    survivor = "b" if side == "a" else "a"
    assert records[survivor] == {"status": "ok", "side": survivor, "solo": True}
    # Each first compiled call ran with the other side held, done or ended: never beside its work.
    compiles = [(name, beside) for name, state, beside in log if state == "compiling"]
    assert survivor in {name for name, _ in compiles}
    assert all(beside in ("held:compile", "held:compiled", "ready", "failed") for _, beside in compiles)


@pytest.mark.parametrize(
    "a, b, expected",
    [(732, 732, "ok"), (732, 762, "regression"), (732, 690, "fewer"), (0, 2, "regression"), (6350, 6364, "ok")],
    ids=["same", "30-more-kernels", "fewer-kernels", "from-none", "one-process-python-drift"],
)
def test_counts_are_judged_b_against_a_within_their_band(a, b, expected):
    one = {"cell": "c", "status": "ok"}
    record_a, record_b = {**one, "compiled_kernels": a}, {**one, "compiled_kernels": b, "eager_kernels": 9}
    got = {c["count"]: c for c in paired_work.counts(record_a, record_b)}
    assert list(got) == ["kernels"] and got["kernels"]["outcome"] == expected  # eager: A has none, so not judged
    verdict = PairedVerdict.of(
        [{"cell": "c", "paired": {**_summary(paired.worst([expected])), "counts": list(got.values())}}]
    )
    assert ("**worse**" in verdict.markdown()) == (expected == "regression")
    if expected == "regression":
        assert (
            verdict.exit_code == exits.REGRESSION
            and f"compiled step runs {b:,} GPU kernels, base {a:,}" in verdict.lines()[1]
        )


def test_a_paired_run_leaves_the_counts_to_the_pair_not_the_baseline():
    from perfgate.judge.gate import DEFAULT_RULES, baseline_rules_for
    from perfgate.judge.rules import CountBandRule, SpeedupRule

    judged = baseline_rules_for(DEFAULT_RULES, {"cell": "c", "paired": _summary("ok")})
    assert judged and not [r for r in judged if isinstance(r, (CountBandRule, SpeedupRule))]


def _summary(outcome: str) -> dict:
    return {"against": "abc", "outcome": outcome, "rules": [], "duets": 2, "looks": 6}


@pytest.mark.parametrize(
    "outcomes, code",
    [(["ok", "ok"], exits.PASS), (["ok", "unsure"], exits.UNUSABLE), (["unsure", "regression"], exits.REGRESSION)],
    ids=["all-ok-pass", "unsure-never-passes", "regression-wins"],
)
def test_an_unsure_cell_never_passes(outcomes, code):
    records = [{"cell": f"c{i}", "paired": _summary(o)} for i, o in enumerate(outcomes)]
    verdict = PairedVerdict.of(records)
    assert verdict.exit_code == code
    assert combined_exit(exits.PASS, verdict) == code
    assert combined_exit(exits.REGRESSION, verdict) == exits.REGRESSION


def test_device_rule_reads_the_device_rounds():
    assert paired.PairedRule(DEVICE, "compiled", 0.01).key == "compiled_device_ms"


@pytest.mark.parametrize("value", ["", "  ", None], ids=["empty", "blank", "unset"])
def test_an_empty_side_is_refused_by_name(value):
    with pytest.raises(SideError, match="--perf-against is empty"):
        nonblank("--perf-against", value)


def test_a_malformed_env_is_refused_by_name():
    with pytest.raises(SideError, match="--perf-against-env '=x'"):
        parse_env("--perf-against-env", ["=x"])


def _rounds(wall_b_over_a: dict, pairs: int = 12) -> dict:
    """Rounds of one process pair: A's wall steps at 10 ms (compiled) and 20 ms (eager) with B's scaled by
    `wall_b_over_a`; device rounds alike on both sides."""
    rounds = {clock: {s: {"eager": [[]], "compiled": [[]]} for s in "ab"} for clock in duet_module.CLOCKS}
    for side, ms in (("compiled", 10.0), ("eager", 20.0)):
        rounds["wall"]["a"][side][0] = list(steady(pairs, ms, 1))
        rounds["wall"]["b"][side][0] = list(steady(pairs, ms * wall_b_over_a.get(side, 1.0), 2))
        for s, seed in (("a", 3), ("b", 4)):
            rounds["device"][s][side][0] = list(steady(4, ms, seed))
    return rounds


def test_eagers_wall_step_is_shown_never_judged():
    """Eager is the reference: its wall step 20 % slower in B is shown, and the cell is decided on the rest."""
    got = {c.rule.key: c for c in looks.judge(_rounds({"eager": 1.2}), 0.99, "gpu")}
    assert got["eager_ms"].outcome == "shown" and got["eager_ms"].change == pytest.approx(0.2, abs=0.01)
    assert paired.worst([c.outcome for c in got.values()]) == "ok"
    slower = looks.judge(_rounds({"compiled": 1.2}), 0.99, "gpu")
    assert paired.worst([c.outcome for c in slower]) == "regression"
    # an A/B of two environments (perfgate ab) judges it: an upgrade's slower eager host path shows nowhere else
    judged = {c.rule.key: c for c in looks.judge(_rounds({"eager": 1.2}), 0.99, "gpu", eager_wall=True)}
    assert judged["eager_ms"].outcome == "regression"
    assert {r.threshold for r in paired.rules_for("cpu", eager_wall=True) if r.clock is WALL} == {paired.CPU_WALL_LINE}


def _measured_out_of_memory(short: str) -> tuple:
    """duet.measure of one cell where side `short` ("a" or "b") runs out of GPU memory on its first job only."""
    from perfgate.ab import duet
    from perfgate.ab.sides import Side
    from perfgate.core.job import Job, RunOptions
    from perfgate.core.matrix import Cell

    jobs = []

    class Tight(FakeWorker):
        def expect(self, key, limit_s, progress=None):
            if "job" in self.sent[-1] and self.name == short:
                jobs.append(self.name)
                if len(jobs) == 1:
                    return {"record": {"status": "failed", "reason": "CUDA out of memory. Tried to allocate 2 GiB"}}
                return {"ready": {}}
            return super().expect(key, limit_s, progress)

    fake = FakeDuet("")
    fake.workers = {name: Tight(name, False) for name in "ab"}
    fake.sides, fake.first, fake.notes = (Side("A", "."), Side("B", ".")), "a", {}
    job = Job(Cell("mlp", "train", "aot_eager", "fp32", "gpu"), RunOptions(device="cuda"), tf32=False)
    return duet.measure(fake, job, lambda _m: None)


def test_a_tree_that_runs_out_of_memory_beside_the_base_is_measured_alone_and_left_unsure():
    """Two sides that do not fit one GPU together: B's out-of-memory beside a live A is no failure of this
    tree's cell (the gate would read a failed cell as a regression); B is measured alone, and the cell is
    unsure, naming the process-alternating A/B that can compare it."""
    from perfgate.ab import duet

    record_b, record_a, summary = _measured_out_of_memory("b")
    assert record_b == {"status": "ok", "solo": True} and record_a == {"status": "ok", "solo": True}
    assert summary["outcome"] == "unsure" and summary["error"] == duet.NO_ROOM
    assert "perfgate ab --processes" in summary["error"]


def test_a_worker_steps_only_the_sides_asked_and_keeps_whole_rounds_for_its_record():
    """The worker's side of "sides": a round names the sides it steps (none named: both); the record's own wall
    clock keeps only the rounds of both sides, since its speedup pairs eager and compiled round by round."""
    pytest.importorskip("torch")
    import torch

    from perfgate.measure import duet as worker

    requests = [
        {"op": "wall", "steps": 1, "first": "eager"},
        {"op": "wall", "steps": 1, "first": "compiled", "sides": ["compiled"]},
        {"op": "wall", "steps": 1, "first": "eager", "sides": []},  # none asked: none stepped, not both
        {"op": "finish", "solo": False},
    ]
    sent = []
    channel = type("Ch", (), {"receive": lambda self: requests.pop(0), "send": lambda self, m: sent.append(m)})()
    ms = {"eager": 20.0, "compiled": 10.0}
    run = type(
        "Run",
        (),
        {
            "device": torch.device("cpu"),
            "timed": [0],
            "eager_step": "eager",
            "compiled_step": "compiled",
            "step_clock": staticmethod(lambda step, steps, device: ms[step]),
        },
    )()
    wall, _host, _device = worker.server(channel)(run, 20.0, 10.0)
    assert [m.get("wall") for m in sent[1:]] == [{"eager": 20.0, "compiled": 10.0}, {"compiled": 10.0}, {}]
    assert (wall.eager_ms, wall.compiled_ms) == ([20.0], [10.0])


def test_counts_over_other_steps_are_not_compared():
    """A base from before the captioner counted its first 3 batches (it counted its 8-length stream) reads other
    caption lengths: its counts per step are no measure of B's, so none is judged, and the summary says why."""
    a = {"cell": "c", "status": "ok", "counts_steps": 8, "compiled_kernels": 860.0}
    b = {"cell": "c", "status": "ok", "counts_steps": 3, "compiled_kernels": 900.0}
    assert paired_work.counts(a, b) == [] and "A counted 8 steps a side, B 3" in paired_work.uncounted_alike(a, b)
    assert paired_work.counts({**a, "counts_steps": 3}, b)[0]["outcome"] == "regression"


def test_a_base_that_runs_out_of_memory_says_the_sides_may_not_fit():
    from perfgate.ab import duet

    record_b, _record_a, summary = _measured_out_of_memory("a")
    assert record_b["status"] == "ok" and summary["outcome"] == "unsure"
    assert summary["error"].startswith("side A failed") and duet.TOGETHER in summary["error"]


def test_a_gpu_wall_round_is_half_an_unpaired_one_and_a_cpu_round_whole():
    """Shorter paired rounds reach a host-bound step's floor more often for the seconds (duet.ROUND_SHARE); the CPU
    tier's wall line was set on whole rounds. --perf-round-ms sets both (the plan's round)."""
    from dataclasses import replace

    from perfgate.core.job import Job, RunOptions
    from perfgate.core.matrix import Cell

    gpu = Job(Cell("mlp", "train", "aot_eager", "fp32", "gpu"), RunOptions(device="cuda"), tf32=False)
    cpu = replace(gpu, cell=replace(gpu.cell, device_kind="cpu"))
    longer = replace(gpu, options=replace(gpu.options, plan=gpu.options.plan.replace(target_round_ms=100.0)))
    assert (duet_module.round_ms(gpu), duet_module.round_ms(cpu), duet_module.round_ms(longer)) == (25.0, 50.0, 50.0)
    # A look keeps the seconds of 12 whole rounds in more, shorter ones (at most 24): 2 steps x 24 for 5 x 12.
    shape = duet_module.wall_shape
    assert shape({"eager_ms": 30.0, "compiled_ms": 11.0}, gpu) == (2, 24)
    assert shape({"eager_ms": 9.0, "compiled_ms": 6.3}, gpu) == (4, 24)  # 8 steps x 12
    assert shape({"eager_ms": 30.0, "compiled_ms": 22.0}, gpu) == (1, 24)  # the nearest count: 22 ms, not 44
    assert shape({"eager_ms": 90.0, "compiled_ms": 60.0}, gpu) == (1, 12)  # one step either way
    assert shape({"eager_ms": 30.0, "compiled_ms": 11.0, "stream": 8}, gpu) == (8, 12)  # whole passes
    assert shape({"eager_ms": 9.0, "compiled_ms": 6.1}, cpu) == (9, 12)  # the CPU tier's whole round: ceil(50 / 6.1)
