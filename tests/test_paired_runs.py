"""The paired engine end to end on the CPU: two trees of the tiny suite measured side by side (an A/A passes, a
planted slowdown on this tree's side fails), and the paired options and commands (`--perf-against*`,
`--perf-b-*`, `perfgate ab`) refusing what they cannot mean. The verdict itself: test_paired.py."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from perfgate.ab.sides import SideError
from perfgate.core import exits

import tiny_suite

suite = tiny_suite.fixture()
PAIRED = [*tiny_suite.FAST, "--perf-round-ms=20", "-k", "infer", "--perf-against", "HEAD", "--perf-results", "r.jsonl"]
# The host slowdown planted to prove a paired run fails, % of a step's host time. At 100 % a CI run (2026-11-28) read
# +95.8 % in its first process pair, its interval reaching down to +4.5 % (unsure, and so the cell): on the shared
# 2-core box A's process reached its 0.10 ms floor in 3 of 36 rounds and ran 0.18-0.28 ms in the rest, and the
# bootstrap's resamples that left those 3 out read +7 %. At 300 % B's floor (~0.4 ms) lies past the CPU's wall
# line (paired.CPU_WALL_LINE, 40 %) from A's slower rounds too: ~+100 % against their ~0.19 ms.
CPU_PLANT_PCT = 300


def _git_tree(pytester) -> None:
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "base"]):
        subprocess.run(["git", *args], cwd=pytester.path, check=True)


@pytest.mark.serial
def test_paired_run_on_two_trees(suite):
    """A/A: this tree against HEAD's checkout passes; a host slowdown planted in this tree's compiled step (its
    host time four times over) fails on the wall clock, and side A's records stay apart from this tree's. The
    CPU's wall line and the plant's size: paired.CPU_WALL_LINE."""
    _git_tree(suite)
    # The A/A through `perfgate ab --paired`, the CLI's way into the same engine: one pytest, its exit the verdict.
    # With a kept cache, the cell that ran whole marks its picks there, between these two sides.
    paired_args = [a for a in PAIRED if a not in ("--perf-against", "HEAD")] + ["--perf-cache-dir", "kept"]
    same = subprocess.run(
        [sys.executable, "-m", "perfgate", "ab", "--paired", "--a-rev", "HEAD", "--out", "ab", "--", *paired_args],
        cwd=suite.path,
        capture_output=True,
        text=True,
    )
    assert same.returncode == 0, (same.stdout + same.stderr)[-3000:]
    assert "perfgate paired: PASS" in same.stdout and (suite.path / "ab" / "report.json").exists()
    # A cold first pair: the two sides built and warmed up at once, their first compiled calls in turn.
    (aa,) = [json.loads(line) for line in (suite.path / "ab" / "results.jsonl").read_text().splitlines()]
    assert aa["paired"]["prepared"][0] == {"first": "a", "together": False, "staggered": True}
    # A side waited for the other's first compiled call: B for A's, unless A's was done before B reached its own
    # (a race on a shared 2-core box, where B's record then has no "held"); A for B's, after its own, always.
    (a_record,) = [json.loads(line) for line in (suite.path / "ab" / "results.against.jsonl").read_text().splitlines()]
    assert a_record["stages"]["held"] > 0
    (picked,) = (suite.path / "kept" / "perfgate-picked").glob("cpu-mlp-infer-aot_eager-fp32.*.json")
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=suite.path, capture_output=True, text=True).stdout
    assert json.loads(picked.read_text())["pair"] == f"{head[:12]} | this tree"
    # One kept cache and one reference cache for both sides: side A starts in the base's worktree, where the
    # relative "kept" and the default reference cache would be folders of their own (options.anchor_folders).
    assert not [p.name for p in suite.path.glob(".perfgate/against-*/*") if p.name in ("kept", ".perfgate")]
    slowed = suite.runpytest_subprocess(*PAIRED, f"--perf-inject=host_slow:{CPU_PLANT_PCT}")
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


def test_a_suite_below_its_checkouts_top_is_each_sides_same_folder(tmp_path):
    """pytest's rootdir in a subfolder of the repository (a monorepo; a copy of the tree inside another
    checkout): side B is that folder, not the checkout's top, and a revision's side is the same folder of its
    worktree. Both sides starting in the top ran the top's code for this tree."""
    from perfgate.plugin import against

    suite_dir = tmp_path / "perf"
    suite_dir.mkdir()
    (suite_dir / "f").write_text("x")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "one"]):
        subprocess.run(["git", *args], cwd=tmp_path, check=True)
    option = type("O", (), {"numprocesses": None})()
    given = {"--perf-against": "HEAD"}
    config = type("C", (), {"getoption": lambda self, n: given.get(n), "rootpath": suite_dir, "option": option})()
    a, b = against.base_side(config), against.tree_side(config)
    assert b.root == str(suite_dir)
    assert a.root.endswith("/perf") and (Path(a.root) / "f").read_text() == "x" and a.root != b.root
    # A suite folder the revision lacks (untracked, or added since) is a usage error naming it, not a crash
    (tmp_path / "new").mkdir()
    config.rootpath = tmp_path / "new"
    with pytest.raises(SideError, match="--perf-against 'HEAD': that revision has no new/"):
        against.base_side(config)


@pytest.mark.parametrize("given", ["kept", "sub/kept", "off"])
def test_the_folders_a_cells_process_uses_are_absolute_from_where_pytest_started(given, tmp_path):
    """A paired side's worker starts in its own tree: a relative --perf-cache-dir, --perf-reference-cache or
    --perf-profile is made absolute from pytest's starting folder, so that both sides use one. "off" (no reference
    cache) stays off; an absolute folder stays as given."""
    from perfgate.plugin import folders

    started = tmp_path / "checkout"
    config = _folders_config(started, perf_cache_dir=given, perf_reference_cache=given, perf_profile=str(tmp_path))
    folders.anchor(config)
    assert config.option.perf_cache_dir == str(started / given)
    assert config.option.perf_reference_cache == ("off" if given == "off" else str(started / given))
    assert config.option.perf_profile == str(tmp_path)


@pytest.mark.parametrize("option", ["--perf-cache-dir", "--perf-reference-cache", "--perf-profile"])
def test_a_blank_folder_is_refused_by_name(option, tmp_path):
    """An unset shell variable: a blank --perf-cache-dir meant cold compiles, a blank reference cache wrote
    references into each side's working folder."""
    from perfgate.plugin import folders

    config = _folders_config(tmp_path, **{option.lstrip("-").replace("-", "_"): " "})
    with pytest.raises(ValueError, match=f"{option}=' ' is empty: give a folder"):
        folders.anchor(config)


def _folders_config(started, **given):
    values = {"perf_cache_dir": None, "perf_reference_cache": None, "perf_profile": None, **given}
    return type("C", (), {"option": type("O", (), values)(), "invocation_params": type("I", (), {"dir": started})})()


def test_judging_eager_wall_without_a_pairing_is_said_to_do_nothing():
    from perfgate.plugin import options

    given = {"--perf-judge-eager-wall": True}
    lines = options.ineffective(lambda name: given.get(name))
    assert any("--perf-judge-eager-wall has no effect" in line for line in lines)
    given["--perf-against"] = "HEAD"
    assert not any("eager-wall" in line for line in options.ineffective(lambda name: given.get(name)))


def test_sessions_started_at_once_against_one_base_share_its_worktree(tmp_path, monkeypatch):
    """One pytest a GPU, each `--perf-against REV`: a session that finds another adding the base's worktree
    waits for it and reuses it, rather than adding it again ("already exists": 3 of 6 sessions started together
    failed so). Here the test holds the lock as the other session, adds the worktree, then lets go."""
    import fcntl
    import threading

    from perfgate.ab import sides

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "f").write_text("x\n")
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "a"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    into = repo / ".perfgate"
    sha = sides.commit_of("--perf-against", "HEAD", str(repo))
    tree = into / f"against-{sha[:12]}"
    into.mkdir()
    got: list = []
    resolved = threading.Event()  # the waiter is past its git calls and at the lock (or, without one, adding)
    commit_of = sides.commit_of
    monkeypatch.setattr(sides, "commit_of", lambda *args: (commit_of(*args), resolved.set())[0])
    with open(sides.checkout_lock(tree), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        waiter = threading.Thread(
            target=lambda: got.append(sides.checkout("--perf-against", "HEAD", str(repo), into)), daemon=True
        )
        waiter.start()
        assert resolved.wait(30)
        waiter.join(0.5)
        assert waiter.is_alive() and not got  # waits while the other session holds the lock
        sides.git(str(repo), "worktree", "add", "--detach", "--force", str(tree), sha)
    waiter.join(30)
    assert got == [(str(tree), sha)] and (tree / "f").read_text() == "x\n"
