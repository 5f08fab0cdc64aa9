"""The paired engine (perfgate.ab): its three-way verdict on synthetic rounds, and, end to end on the CPU, two
trees of the tiny suite measured side by side: an A/A passes, a planted slowdown on this tree's side fails."""

import json
import re
import subprocess
import sys

import numpy as np
import pytest

from perfgate.ab import duet as duet_module
from perfgate.ab import paired
from perfgate.ab.sides import SideError, nonblank, parse_env
from perfgate.ab.verdict import PairedVerdict, combined_exit
from perfgate.core import exits
from perfgate.core.clocks import DEVICE, WALL

import tiny_suite

suite = tiny_suite.fixture()
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


DEVICE_RULE = paired.PairedRule(DEVICE, "compiled", 0.01)


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
def test_a_regression_must_show_in_every_process_pair(levels, expected):
    a = [steady(8, 47.3, 1), steady(8, 47.3, 2)]
    b = [steady(8, 47.3 * levels[0], 3), steady(8, 47.3 * levels[1], 4)]
    got = paired.across_pairs(a, b, DEVICE_RULE, paired.look_confidence(6))
    assert got.outcome == expected, got
    assert len(got.by_pair) == 2 and got.as_json()["by_pair"][0] == pytest.approx(levels[0] - 1, abs=0.003)


def test_one_process_pairs_regression_is_measured_again():
    one = paired.across_pairs([steady(8, 47.3, 1)], [steady(8, 48.3, 2)], DEVICE_RULE, 0.99)
    assert one.outcome == "regression" and not one.by_pair
    assert not paired.final([one], pairs=1) and paired.final([one], pairs=2)


class FakeWorker:
    """A side's worker that answers a job with `ready` (or a failed record) and `finish` with its record."""

    def __init__(self, name: str, fails: bool):
        self.name, self.fails, self.sent, self.finish_asked = name, fails, [], False
        self.popen = type("P", (), {"pid": 1 if name == "a" else 2})()

    def send(self, message: dict) -> None:
        self.sent.append(message)

    def expect(self, key, limit_s, progress=None) -> dict:
        last = self.sent[-1]
        if "job" in last:
            return {"record": {"status": "failed", "reason": f"{self.name} broke"}} if self.fails else {"ready": {}}
        return {"record": {"status": "ok", "solo": last.get("solo")}}


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

    from perfgate.ab import duet, pair_workers

    worker = pair_workers.Worker.__new__(pair_workers.Worker)
    worker.side, worker.finish_asked = type("S", (), {"name": "B"})(), False
    worker.popen = type("P", (), {"stdin": io.BytesIO()})()
    worker.expect = lambda key, limit_s, progress=None: {"record": {"status": "ok"}}
    worker.send({"job": {}})
    assert not worker.finish_asked
    worker.send({"op": "finish", "solo": False})
    assert duet._finish(worker, lambda _m: None) == {"status": "ok"}
    assert worker.popen.stdin.getvalue().count(b'"finish"') == 1
    worker.send({"job": {}})  # the next cell: its own finish is asked again
    duet._finish(worker, lambda _m: None)
    assert worker.popen.stdin.getvalue().count(b'"finish"') == 2


@pytest.mark.parametrize("together", [False, True], ids=["one-after-the-other", "at-once"])
@pytest.mark.parametrize("fails", ["", "a", "b", "ab"], ids=["none-fails", "base-fails", "tree-fails", "both-fail"])
def test_a_side_that_fails_to_prepare_leaves_the_other_timed_alone(fails, together):
    from perfgate.ab import duet

    job = type("J", (), {"to_json": lambda self: "{}", "limit_s": 1.0})()
    fake = FakeDuet(fails)
    record_a, record_b, ready = duet._prepare(fake, job, job, lambda _m: None, "a", together)
    assert (ready is None) == bool(fails) and fake.renewed == bool(fails)
    if not fails:
        return
    assert record_b["status"] == ("failed" if "b" in fails else "ok")
    assert record_b.get("solo") is (None if "b" in fails else True)  # this tree's cell times itself alone
    if "a" in fails:
        assert record_a["status"] == "failed"
    else:  # the base, prepared first, finishes its own record alone
        assert record_a == {"status": "ok", "solo": True}


@pytest.mark.parametrize(
    "a, b, expected",
    [(732, 732, "ok"), (732, 762, "regression"), (732, 690, "fewer"), (0, 2, "regression"), (6350, 6364, "ok")],
    ids=["same", "30-more-kernels", "fewer-kernels", "from-none", "one-process-python-drift"],
)
def test_counts_are_judged_b_against_a_within_their_band(a, b, expected):
    one = {"cell": "c", "status": "ok"}
    record_a, record_b = {**one, "compiled_kernels": a}, {**one, "compiled_kernels": b, "eager_kernels": 9}
    got = {c["count"]: c for c in paired.counts(record_a, record_b)}
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
    from perfgate.ab.verdict import baseline_rules
    from perfgate.judge.rules import CountBandRule, SpeedupRule

    assert not [r for r in baseline_rules() if isinstance(r, (CountBandRule, SpeedupRule))]


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


def _git_tree(pytester) -> None:
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=pytester.path, check=True)


PAIRED = [*tiny_suite.FAST, "--perf-round-ms=20", "-k", "infer", "--perf-against", "HEAD", "--perf-results", "r.jsonl"]


@pytest.mark.serial
def test_paired_run_on_two_trees(suite):
    """A/A: this tree against HEAD's checkout passes; a host slowdown planted in this tree's compiled step (its
    host time doubled) fails on the wall clock, and side A's records stay apart from this tree's. The CPU's
    wall line and the plant's size: paired.CPU_WALL_LINE."""
    _git_tree(suite)
    # The A/A through `perfgate ab --paired`, the CLI's way into the same engine: one pytest, its exit the verdict.
    paired_args = [a for a in PAIRED if a not in ("--perf-against", "HEAD")]
    same = subprocess.run(
        [sys.executable, "-m", "perfgate", "ab", "--paired", "--a-rev", "HEAD", "--out", "ab", "--", *paired_args],
        cwd=suite.path,
        capture_output=True,
        text=True,
    )
    assert same.returncode == 0, (same.stdout + same.stderr)[-3000:]
    assert "perfgate paired: PASS" in same.stdout and (suite.path / "ab" / "report.json").exists()
    slowed = suite.runpytest_subprocess(*PAIRED, "--perf-inject=host_slow:100")
    assert slowed.ret == 1, slowed.stdout.str()[-3000:]
    slowed.stdout.fnmatch_lines(
        ["*cell(s) planned*beside their base (paired)*", "*perfgate paired: FAIL*", "*regression: compiled wall*"]
    )
    records = [json.loads(line) for line in (suite.path / "r.jsonl").read_text().splitlines()]
    final = [r for r in records if r.get("paired")]
    assert final and all(r["paired"]["rules"] for r in final)
    spent = [r["paired"]["seconds"] for r in final]  # where each cell's seconds went, for the time account
    assert all(s["total"] >= sum(s["prepare"] + s["looks"] + s["finish"]) > 0 and s["wall_rounds"] > 0 for s in spent)
    assert (suite.path / "r.against.jsonl").exists()


@pytest.mark.serial
def test_a_paired_run_that_compares_no_cell_never_passes(suite):
    """Every cell skipped (GPU cells where this interpreter's torch sees no CUDA): the paired verdict holds
    nothing, so the run exits 2, where it passed (a bisection's probe then read good)."""
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("needs a box whose torch sees no CUDA")
    _git_tree(suite)
    out = suite.runpytest_subprocess(
        *tiny_suite.FAST, "-m", "gpu", "--perf-against", "HEAD", "--perf-results", "r.jsonl"
    )
    assert out.ret == 2, out.stdout.str()[-2000:]
    out.stdout.fnmatch_lines(["*no cell was compared beside the base*"])


@pytest.mark.parametrize(
    "argv, option",
    [
        (["ab", "--a-rev", "", "--", "perftests"], "--a-rev"),
        (["ab", "--a-python", " ", "--", "perftests"], "--a-python"),
        (["bisect", "--step-pip", "", "--step-pip", "", "--", "perftests"], "--step-pip"),
    ],
    ids=["ab-empty-rev", "ab-blank-python", "bisect-empty-steps"],
)
def test_an_empty_revision_or_step_is_exit_2_naming_the_option(argv, option, capsys, tmp_path, monkeypatch):
    from perfgate.cli import main

    monkeypatch.chdir(tmp_path)
    assert main(argv) == exits.UNUSABLE
    assert option in capsys.readouterr().err


def _ab_args(**given):
    from perfgate.cli import build_parser

    args = build_parser().parse_args(["ab", "--paired", "--", "perftests", "-m", "gpu and pr"])
    for name, value in given.items():
        setattr(args, name, value)
    return args


def test_paired_ab_is_one_pytest_run_against_side_a(tmp_path):
    from perfgate.faces.ab import paired_argv

    command, env = paired_argv(_ab_args(a_rev="origin/main", a_env=["X=1"], b_env=["Y=2"], b_rev="HEAD~1"), tmp_path)
    assert command[:3] == [sys.executable, "-m", "pytest"] and command[3:6] == ["perftests", "-m", "gpu and pr"]
    assert command[command.index("--perf-against") + 1] == "origin/main"
    assert command[command.index("--perf-against-env") + 1] == "X=1"
    # B's variables are B's worker's, not the session's, whose path both sides' workers would inherit
    assert command[command.index("--perf-b-env") + 1] == "Y=2" and "Y" not in env
    assert command[command.index("--perf-b-rev") + 1] == "HEAD~1"
    assert "--perf-judge-eager-wall" in command  # an A/B of environments judges eager's wall step


def test_a_sides_own_pythonpath_follows_its_root_and_is_not_dropped():
    """An upgrade's A/B puts the old release on A's PYTHONPATH: the worker's path, computed whole, kept the
    root and the session's extra entries and dropped it, so both sides ran the new release."""
    import os

    from perfgate.ab.pair_workers import worker_path
    from perfgate.ab.sides import Side

    old = Side("A", "/repo/a", env={"PYTHONPATH": os.pathsep.join(["/tmp/oldtf", "/tmp/more"])})
    assert worker_path(old, ["/repo/a", "/tests/registry"]) == ["/repo/a", "/tmp/oldtf", "/tmp/more", "/tests/registry"]
    assert worker_path(old, ["/overlay", "/repo/a"]) == ["/overlay", "/repo/a", "/tmp/oldtf", "/tmp/more"]
    assert worker_path(Side("B", "/repo/b"), ["/repo/b", "/x"]) == ["/repo/b", "/x"]


@pytest.mark.parametrize(
    "given, words",
    [
        ({"a_rev": "x", "processes": 3}, "--processes"),
        ({"a_rev": " "}, "--a-rev is empty"),
        ({"b_rev": ""}, "--b-rev is empty"),
        ({"b_env": ["1X=2"]}, "--b-env '1X=2'"),
    ],
    ids=["process-only-option", "blank-rev", "blank-b-rev", "bad-b-env"],
)
def test_paired_ab_refuses_what_it_cannot_mean(given, words, tmp_path):
    from perfgate.faces.ab import paired_argv

    with pytest.raises(SideError, match=words):
        paired_argv(_ab_args(**given), tmp_path)


@pytest.mark.serial
def test_a_base_side_that_fails_leaves_this_trees_record_and_an_unsure_verdict(suite):
    """The base compiles nothing (dynamo disabled in its process only): this tree's cell is still measured
    alone and ok, and the paired verdict is unsure (exit 2), never a pass."""
    run = suite.runpytest_subprocess(
        *tiny_suite.FAST, "-k", "infer", "--perf-against-env", "TORCHDYNAMO_DISABLE=1", "--perf-results", "r.jsonl"
    )
    assert run.ret == 2, run.stdout.str()[-3000:]
    run.stdout.fnmatch_lines(["*perfgate paired: UNSURE*", "*side A failed: ran eager*"])
    (record,) = [json.loads(line) for line in (suite.path / "r.jsonl").read_text().splitlines()][-1:]
    assert record["status"] == "ok" and record["paired"]["outcome"] == "unsure"


def _run_dir_with(tmp_path, **sides_changed):
    """A well-formed process-A/B run directory whose manifest's sides are changed as given."""
    side = {"label": "A", "python": sys.executable, "rev": None, "env": {}, "args": [], "root": str(tmp_path)}
    side |= {"import_root": str(tmp_path), "versions": {}, "sha": None, "tests": []}
    sides = {"A": {**side, **sides_changed}, "B": {**side, "label": "B"}}
    manifest = {"schema": 1, "sides": sides, "runs": [], "processes": 2, "common_args": ["perftests"]}
    out = tmp_path / "ab"
    out.mkdir()
    (out / "manifest.json").write_text(json.dumps(manifest))
    return out


@pytest.mark.parametrize(
    "argv_of, words",
    [
        (lambda t: ["ab", "--out", str(t / "f")], "--out .*/f is a file"),
        (lambda t: ["ab", "--judge", str(t / "missing")], "--judge .*missing: no such run directory"),
        (
            lambda t: ["ab", "--resume", str(_run_dir_with(t, root=str(t / "gone")))],
            "'root' .*gone.* is no directory here",
        ),
        (lambda t: ["ab", "--resume", str(_run_dir_with(t, env="notalist"))], "'env' \\(an object\\)"),
    ],
    ids=["out-is-a-file", "judge-missing-dir", "resume-gone-root", "resume-env-not-object"],
)
def test_process_ab_refuses_unusable_run_directories_by_name(argv_of, words, tmp_path, capsys):
    from perfgate.cli import main

    (tmp_path / "f").write_text("x")
    assert main(argv_of(tmp_path)) == exits.UNUSABLE
    assert re.search(words, capsys.readouterr().err), words


def test_process_ab_refuses_a_side_without_cuda_whose_cells_are_all_gpu_cells():
    from perfgate.ab.process_env import ABEnvironment, ABError, check_runnable

    side = ABEnvironment("A", sys.executable, None, (), ())
    gpu = [
        f"perftests/test_compile_speedup.py::test_train_step[{m}-inductor_default-amp_bf16]"
        for m in ("gpt2", "vit_b16")
    ]
    gpu.append("perftests/test_compile_speedup.py::test_ddp_step[gpt2-inductor_ddp_optimizer-amp_bf16]")
    with pytest.raises(ABError, match="no CUDA device, and all 3 selected cells are GPU cells"):
        check_runnable(side, False, gpu)
    check_runnable(side, False, [*gpu, "perftests/x.py::test_train_step[cpu-mlp-aot_eager-fp32]"])  # CPU cells run
    check_runnable(side, True, gpu)
    check_runnable(side, False, ["test_zoo.py::test_cell[3]"])  # not a perf cell: nothing to say of it


@pytest.mark.parametrize("isolate", ["gpu", "all", "off"])
def test_a_paired_cell_never_runs_in_the_sessions_isolated_child(isolate):
    """Its two sides' workers are processes of their own: an isolated child started for it would idle beside
    them (and import torch during the precompile). A data-parallel cell, never paired, keeps the option's say."""
    from types import SimpleNamespace

    from perfgate.core.matrix import Cell
    from perfgate.plugin.session import PerfSession

    config = SimpleNamespace(getoption=lambda name: isolate)
    paired_session = SimpleNamespace(pairing=object(), config=config)
    plain = SimpleNamespace(pairing=None, config=config)
    for session in (paired_session, plain):
        session.measures_paired = lambda cell, session=session: PerfSession.measures_paired(session, cell)
    cell = Cell("gpt2", "train", "inductor_default", "amp_bf16")
    ddp = Cell("gpt2", "ddp", "inductor_ddp_optimizer", "amp_bf16")
    assert not PerfSession.isolates(paired_session, cell)
    assert PerfSession.isolates(paired_session, ddp) == PerfSession.isolates(plain, ddp) == (isolate != "off")
    assert PerfSession.isolates(plain, cell) == (isolate != "off")


def test_a_cell_the_pairing_leaves_out_is_skipped_where_side_b_is_not_this_session():
    """A data-parallel cell runs in the session, on its tree and interpreter: where side B is another
    (--perf-b-*), its record would carry A's code under B's name, so it is skipped with the reason."""
    from types import SimpleNamespace

    from perfgate.core.matrix import Cell
    from perfgate.plugin.session import PerfSession

    ddp, cell = Cell("gpt2", "ddp", "inductor_ddp_optimizer", "amp_bf16"), Cell("gpt2", "train", "x", "amp_bf16")
    for elsewhere, expected in ((True, "perfgate ab --processes N"), (False, "")):
        session = SimpleNamespace(pairing=SimpleNamespace(b_elsewhere=elsewhere))
        session.measures_paired = lambda c, s=session: PerfSession.measures_paired(s, c)
        assert (
            expected in PerfSession.unpaired_elsewhere(session, ddp)
            and bool(PerfSession.unpaired_elsewhere(session, ddp)) == elsewhere
        )
        assert PerfSession.unpaired_elsewhere(session, cell) == ""


def test_perfgate_ab_is_paired_unless_it_is_given_processes(tmp_path, monkeypatch, capsys):
    """The PR gate's engine is `perfgate ab`'s too: one pytest run against side A, unless --processes N (or
    --resume, --judge) asks for whole processes; what only that mode means is refused by name otherwise."""
    from perfgate.cli import main
    from perfgate.faces import ab

    ran: list[list[str]] = []
    monkeypatch.setattr(
        ab.subprocess, "run", lambda command, env: ran.append(command) or type("D", (), {"returncode": 0})
    )
    out = str(tmp_path / "ab")
    assert main(["ab", "--a-rev", "origin/main", "--out", out, "--", "perftests", "-m", "gpu and pr"]) == exits.PASS
    (command,) = ran
    assert command[command.index("--perf-against") + 1] == "origin/main" and command[3:4] == ["perftests"]
    for argv, words in (
        (["--a-rev", "x", "--html", "r.html"], "--html: only with --processes N"),
        (["--a-rev", "x", "--b-python", str(tmp_path / "nope")], "--b-python"),
        (["--paired", "--processes", "3", "--a-rev", "x"], "--paired with --processes"),
    ):
        assert main(["ab", "--out", out, *argv, "--", "perftests"]) == exits.UNUSABLE
        assert words in capsys.readouterr().err
    assert len(ran) == 1
    # No side A option: A is this checkout under perfgate's own interpreter, B differs by its own (an A/A
    # where it has none), as with whole processes.
    assert main(["ab", "--b-env", "TORCHINDUCTOR_FREEZING=1", "--out", out, "--", "perftests"]) == exits.PASS
    assert ran[-1][ran[-1].index("--perf-against-python") + 1] == sys.executable


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
    got = {c.rule.key: c for c in duet_module._judge(_rounds({"eager": 1.2}), 0.99, "gpu")}
    assert got["eager_ms"].outcome == "shown" and got["eager_ms"].change == pytest.approx(0.2, abs=0.01)
    assert paired.worst([c.outcome for c in got.values()]) == "ok"
    slower = duet_module._judge(_rounds({"compiled": 1.2}), 0.99, "gpu")
    assert paired.worst([c.outcome for c in slower]) == "regression"
    # an A/B of two environments (perfgate ab) judges it: an upgrade's slower eager host path shows nowhere else
    judged = {c.rule.key: c for c in duet_module._judge(_rounds({"eager": 1.2}), 0.99, "gpu", eager_wall=True)}
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


def test_side_b_may_be_a_revision_beside_side_a(tmp_path):
    """--perf-b-rev makes side B a revision's checkout (a bisection's step) while this session coordinates;
    without it, B is this checkout. Blank values are refused by name, as side A's are."""
    from perfgate.plugin import against

    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    (tmp_path / "f").write_text("x")
    for args in (["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True).stdout.strip()

    def config(**given):
        values = {name: given.get(name.lstrip("-").replace("-", "_")) for name in against.OPTIONS + against.B_OPTIONS}
        option = type("O", (), {"numprocesses": None})()
        return type("C", (), {"getoption": lambda self, n: values[n], "rootpath": tmp_path, "option": option})()

    b = against.tree_side(config(perf_against="HEAD", perf_b_rev="HEAD", perf_b_env=["X=1"]))
    assert (b.name, b.revision, b.env) == ("B", sha, {"X": "1"}) and b.root != str(tmp_path)
    assert against.base_side(config(perf_b_rev="HEAD")).root == str(tmp_path)  # A: this checkout
    assert against.tree_side(config(perf_against="HEAD")).root == str(tmp_path)
    assert against.base_side(config()) is None
    with pytest.raises(SideError, match="--perf-b-rev is empty"):
        against.tree_side(config(perf_against="HEAD", perf_b_rev=" "))


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
    assert paired.counts(a, b) == [] and "A counted 8 steps a side, B 3" in paired.uncounted_alike(a, b)
    assert paired.counts({**a, "counts_steps": 3}, b)[0]["outcome"] == "regression"


def test_a_base_that_runs_out_of_memory_says_the_sides_may_not_fit():
    from perfgate.ab import duet

    record_b, _record_a, summary = _measured_out_of_memory("a")
    assert record_b["status"] == "ok" and summary["outcome"] == "unsure"
    assert summary["error"].startswith("side A failed") and duet.TOGETHER in summary["error"]


def test_judging_eager_wall_without_a_pairing_is_said_to_do_nothing():
    from perfgate.plugin import options

    given = {"--perf-judge-eager-wall": True}
    lines = options.ineffective(lambda name: given.get(name))
    assert any("--perf-judge-eager-wall has no effect" in line for line in lines)
    given["--perf-against"] = "HEAD"
    assert not any("eager-wall" in line for line in options.ineffective(lambda name: given.get(name)))
