"""`perfgate bisect`: the search (a fake oracle per step), how a probe's A/B verdict reads under a rule
(synthetic processes), re-measuring an unsure probe, resuming, the report, the inputs it refuses, and
the CPU proof (a throwaway repository of 5 commits, one planting a slowdown: `serial`, minutes)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cheap_cell import CHEAP_CELL_ARGS

from perfgate.ab import bisect_report, bisect_run
from perfgate.ab.bisect_run import Step
from perfgate.ab.bisect_verdict import BAD, GOOD, UNSURE, BadRule, BisectError, classify, probes_left, search
from perfgate.ab.process_env import ABError
from perfgate.ab.process_rows import Process
from perfgate.ab.process_verdict import judge_ab
from perfgate.cli import main

import synthetic as syn

REPO = Path(__file__).resolve().parents[1]
GPT2 = syn.cells(models=["gpt2"], phases=["train"])


def bisect_with(oracle, steps: int = 8) -> tuple[object, list[int]]:
    """Run the search to its end against oracle(step) -> verdict; the outcome and the steps probed."""
    verdicts, probed = {}, []
    while (state := search(steps, verdicts)).next is not None:
        probed.append(state.next)
        verdicts[state.next] = oracle(state.next)
    return state, probed


# ---------------------------------------------------------------------------------------------- the search


@pytest.mark.parametrize("culprit", range(1, 8), ids=lambda c: f"culprit-step-{c}")
def test_the_search_finds_the_first_bad_step_in_at_most_4_probes(culprit):
    state, probed = bisect_with(lambda i: BAD if i >= culprit else GOOD)
    assert (state.outcome, state.first_bad, state.last_good) == ("found", culprit, culprit - 1)
    assert probed[0] == 7 and len(probed) <= 1 + 3  # the ends, then log2 of the 6 steps between
    assert len(probed) <= probes_left(8, {})


def test_a_range_whose_last_step_is_good_has_no_bad_step_after_one_probe():
    state, probed = bisect_with(lambda i: GOOD)
    assert (state.outcome, probed) == ("no_bad_step", [7])


@pytest.mark.parametrize(
    "unsure, suspects",
    [({3}, (3, 4)), ({3, 2}, (2, 3, 4)), ({7}, tuple(range(1, 8)))],
    ids=["one-skipped", "two-skipped", "bad-end-unsure"],
)
def test_unsure_steps_are_skipped_and_named_as_suspects(unsure, suspects):
    state, _ = bisect_with(lambda i: UNSURE if i in unsure else BAD if i >= 4 else GOOD)
    assert (state.outcome, state.suspects) == ("unsettled", suspects)


def test_a_skipped_step_is_stepped_around_when_the_answer_lies_elsewhere():
    state, probed = bisect_with(lambda i: UNSURE if i == 3 else BAD if i >= 6 else GOOD)
    assert (state.outcome, state.first_bad) == ("found", 6) and 3 in probed


@pytest.mark.parametrize("steps", [0, 1])
def test_a_range_without_two_ends_is_refused(steps):
    with pytest.raises(BisectError, match="2 steps at least"):
        search(steps, {})


# ---------------------------------------------------------------------------------------------- the rule


@pytest.mark.parametrize(
    "text, metric, threshold",
    [
        ("gate", "gate", None),
        ("speedup", "speedup", None),
        ("device_speedup:2.5", "device_speedup", 0.025),
        ("graph_breaks", "graph_breaks", None),
    ],
)
def test_rules_parse(text, metric, threshold):
    rule = BadRule.parse(text)
    assert (rule.metric, rule.threshold) == (metric, pytest.approx(threshold) if threshold else None)
    assert BadRule.parse(rule.text()) == rule


@pytest.mark.parametrize(
    "text, words",
    [
        ("wall", "unknown metric 'wall'; valid: gate, speedup"),
        ("speedup:x", "not a percentage"),
        ("speedup:0", "above 0"),
        ("graph_breaks:3", "takes no threshold"),
    ],
)
def test_bad_rules_are_refused_with_the_valid_ones(text, words):
    with pytest.raises(BisectError, match=words.replace("(", r"\(")):
        BadRule.parse(text)


def procs(label: str, n: int, speedup: float, run_noise: float = 0.002) -> list[Process]:
    return [
        Process(
            label,
            rep,
            tuple(
                syn.run(
                    rep * 10 + (label == "B"),
                    cell_list=GPT2,
                    noise=0.005,
                    run_noise=run_noise,
                    overrides={GPT2[0].id: {"speedup": speedup}},
                )
            ),
            rep == 1,
        )
        for rep in range(1, n + 1)
    ]


@pytest.mark.parametrize(
    "b_speedup, n, run_noise, rule, verdict",
    [
        (1.5, 3, 0.002, "gate", GOOD),
        (1.2, 3, 0.002, "gate", BAD),
        (1.2, 3, 0.002, "speedup:5", BAD),
        (1.2, 3, 0.002, "graph_breaks", GOOD),
        (1.5, 2, 0.05, "speedup", UNSURE),
        (1.5, 1, 0.002, "gate", UNSURE),
    ],
    ids=[
        "same-is-good",
        "20pct-slower-is-bad",
        "bad-on-its-rule",
        "another-rule-ignores-it",
        "noise-limited-is-unsure",
        "one-process-cannot-compare",
    ],
)
def test_a_probe_reads_good_bad_or_unsure_under_its_rule(b_speedup, n, run_noise, rule, verdict):
    report = judge_ab(
        procs("A", max(n, 2), 1.5, run_noise) + procs("B", n, b_speedup, run_noise), rules=BadRule.parse(rule).rules()
    )
    assert classify(report, BadRule.parse(rule)).verdict == verdict


# ---------------------------------------------------------------------------------------------- the runner


def manifest_of(tmp_path: Path, steps: int = 8, **kw) -> dict:
    step_list = [Step(f"{i:02d}", f"step {i}", "/usr/bin/python3") for i in range(steps)]
    return bisect_run.new_manifest(
        tmp_path / "bisect",
        step_list,
        ["perftests", "-k", "gpt2"],
        BadRule.parse("gate"),
        kw.get("processes", 3),
        kw.get("max_processes", 5),
        [],
        tmp_path,
        kw.get("engine", "processes"),
    )


def fake_prober(culprit: int, calls: list[int], stop_at: int | None = None):
    def prober(manifest, out, index, progress):
        calls.append(index)
        if index == stop_at:
            raise KeyboardInterrupt
        manifest["probes"][str(index)] = {
            "dir": f"probes/{index:02d}",
            "processes": 3,
            "readings": [],
            "verdict": BAD if index >= culprit else GOOD,
            "why": "fake",
        }

    return prober


def test_a_stopped_bisection_resumes_without_probing_a_settled_step_again(tmp_path):
    manifest, calls, out = manifest_of(tmp_path), [], tmp_path / "bisect"
    with pytest.raises(KeyboardInterrupt):
        bisect_run.run_bisect(out, print, manifest=manifest, prober=fake_prober(5, calls, stop_at=3))
    assert calls == [7, 3] and json.loads((out / "bisect.json").read_text())["probes"].keys() == {"7"}
    done = bisect_run.run_bisect(out, print, prober=fake_prober(5, calls))
    assert calls == [7, 3, 3, 5, 4] and done["outcome"] == {
        "outcome": "found",
        "last_good": 4,
        "first_bad": 5,
        "suspects": [],
    }


def test_a_paired_bisection_stopped_mid_probe_resumes_it(tmp_path):
    """A paired probe's entry is saved before its pytest starts, with no process count; --resume must read that
    manifest (the process engine's check wanted one) and probe the unsettled step again."""
    manifest, calls, out = manifest_of(tmp_path, engine="paired"), [], tmp_path / "bisect"
    with pytest.raises(KeyboardInterrupt):
        bisect_run.run_bisect(out, print, manifest=manifest, prober=fake_prober(5, calls, stop_at=3))
    stopped = json.loads((out / "bisect.json").read_text())
    stopped["probes"]["3"] = {"dir": "probes/03-03", "readings": []}  # as bisect_paired saves it before pytest
    (out / "bisect.json").write_text(json.dumps(stopped))
    done = bisect_run.run_bisect(out, print, prober=fake_prober(5, calls))
    assert calls == [7, 3, 3, 5, 4] and done["outcome"]["first_bad"] == 5 and done["engine"] == "paired"


class FakeAB:
    """process_run.run_ab's stand-in: a report per call from `speedups` (B's, A at 1.5), recording processes."""

    def __init__(self, b_speedups, run_noise=0.002):
        self.b_speedups, self.run_noise, self.calls = list(b_speedups), run_noise, []

    def __call__(self, directory, progress, *, sides, common, processes, resume, cwd, rules):
        self.calls.append((processes, resume))
        directory.mkdir(parents=True, exist_ok=True)
        (directory / "manifest.json").write_text('{"runs": []}')
        b = self.b_speedups.pop(0)
        noise = self.run_noise if b else 0.002
        return judge_ab(procs("A", processes, 1.5, noise) + procs("B", processes, b or 1.5, noise), rules=rules)


def test_an_unsure_probe_is_measured_again_with_more_processes_before_it_steers(tmp_path, monkeypatch):
    fake = FakeAB([1.5, 1.2], run_noise=0.03)
    monkeypatch.setattr(bisect_run.process_run, "run_ab", fake)
    manifest = manifest_of(tmp_path, processes=2, max_processes=4)
    manifest["rule"] = "speedup"
    bisect_run.probe(manifest, tmp_path / "bisect", 7, lambda m: None)
    entry = manifest["probes"]["7"]
    assert fake.calls == [(2, False), (4, True)]
    assert [r["verdict"] for r in entry["readings"]] == [UNSURE, BAD] and entry["verdict"] == BAD


def test_a_probe_that_cannot_run_is_skipped_but_the_ends_must_run(tmp_path, monkeypatch):
    def refuse(*args, **kwargs):
        raise ABError("A and B select different tests")

    monkeypatch.setattr(bisect_run.process_run, "run_ab", refuse)
    manifest = manifest_of(tmp_path)
    with pytest.raises(BisectError, match="ends cannot be compared: A and B select different tests"):
        bisect_run.probe(manifest, tmp_path / "bisect", 7, lambda m: None)
    manifest["probes"] = {"7": {"dir": "probes/07", "processes": 3, "readings": [], "verdict": BAD}}
    bisect_run.probe(manifest, tmp_path / "bisect", 3, lambda m: None)
    assert manifest["probes"]["3"]["verdict"] == UNSURE


def test_the_report_names_the_pair_and_the_command_that_reproduces_it(tmp_path):
    manifest, out = manifest_of(tmp_path), tmp_path / "bisect"
    manifest = bisect_run.run_bisect(out, lambda m: None, manifest=manifest, prober=fake_prober(5, []))
    text = bisect_report.write(manifest, out)
    assert text.startswith("**perfgate bisect: first bad step 5: `step 5`**, last good step 4: `step 4`")
    assert (
        "perfgate ab --a-python /usr/bin/python3 --b-python /usr/bin/python3 --processes 3 -- perftests -k gpt2" in text
    )
    assert json.loads((out / "report.json").read_text())["exit_code"] == 1


def test_a_range_with_no_bad_step_reports_it_and_exits_0_after_one_probe(tmp_path):
    """The CPU proof below runs only the slowdown: its step-2 probe is a real A/A reading good already."""
    manifest, calls, out = manifest_of(tmp_path), [], tmp_path / "bisect"
    manifest = bisect_run.run_bisect(out, lambda m: None, manifest=manifest, prober=fake_prober(99, calls))
    text = bisect_report.write(manifest, out)
    assert calls == [7] and text.startswith("**perfgate bisect: no bad step**")
    assert json.loads((out / "report.json").read_text())["exit_code"] == 0


def test_a_report_that_cannot_be_written_names_its_path_and_leaves_nothing_half_written(tmp_path):
    """As every other output (docs/reliability.md): exit 2 naming the path, never a crash or a torn page."""
    from perfgate.core.output import OutputError

    manifest, out = manifest_of(tmp_path), tmp_path / "bisect"
    manifest = bisect_run.run_bisect(out, lambda m: None, manifest=manifest, prober=fake_prober(5, []))
    (tmp_path / "a-file").write_text("")
    with pytest.raises(OutputError, match="a-file"):
        bisect_report.write(manifest, out, markdown_path=str(tmp_path / "a-file" / "report.md"))


def test_environment_steps_keep_their_order_and_say_what_each_side_runs(tmp_path):
    paths = [tmp_path / "tf-4", tmp_path / "tf-5"]
    for path in paths:
        path.mkdir()
    steps = bisect_run.env_steps([], [str(p) for p in paths], [], "/usr/bin/python3", tmp_path / "b")
    assert [dict(s.env)["PYTHONPATH"] for s in steps] == [str(p) for p in paths]
    pips = bisect_run.env_steps(
        [], [], ["transformers==4.57.1", "transformers==5.17.0"], "/usr/bin/python3", tmp_path / "b"
    )
    assert [(s.pip, dict(s.env)["PYTHONPATH"]) for s in pips] == [
        ("transformers==4.57.1", str((tmp_path / "b" / "envs" / "00").resolve())),
        ("transformers==5.17.0", str((tmp_path / "b" / "envs" / "01").resolve())),
    ]
    assert Step.from_json(pips[1].to_json()) == pips[1]


# ---------------------------------------------------------------------------------------------- bad input


def test_no_steps_at_all_says_what_to_give(tmp_path):
    with pytest.raises(BisectError, match="nothing to bisect: give --good and --bad"):
        bisect_run.env_steps([], [], [], "/usr/bin/python3", tmp_path / "b")


@pytest.fixture
def tiny_repo(tmp_path) -> Path:
    """A git repository of 3 empty commits on a branch and 1 on another."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    for n in range(3):
        subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", f"c{n}"], cwd=repo, check=True)
    subprocess.run([*git, "checkout", "-q", "-b", "side", "HEAD~2"], cwd=repo, check=True)
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "s"], cwd=repo, check=True)
    return repo


@pytest.mark.parametrize(
    "args, words",
    [
        (["--good", "main~2"], "--good and --bad go together"),
        (["--good", "nope", "--bad", "main"], "--good 'nope': no such commit"),
        (["--good", "main", "--bad", "side"], "is not an ancestor of --bad side"),
        (["--good", "main", "--bad", "main"], "holds 1 step(s)"),
        (["--good", "main~2", "--bad", "main", "--rule", "wall"], "unknown metric 'wall'"),
        (["--good", "main~2", "--bad", "main", "--processes", "1"], "--processes 1: a probe needs 2"),
        (["--good", "main~2", "--bad", "main", "--processes", "0"], "--processes 0: a probe needs 2"),
        (["--good", "main~2", "--bad", "main^{tree}"], "--bad 'main^{tree}' names a tree, not a commit"),
        (["--good", "main~2", "--bad", "main", "--processes", "4", "--max-processes", "3"], "is below --processes 4"),
        (["--step-path", "/nonexistent", "--step-path", "/"], "--step-path /nonexistent: no such directory"),
        (["--step-path", "/", "--step-python", "/bin/sh"], "one kind of step"),
        (["--good", "main~2", "--bad", "main", "--", "--perf-results=x"], "perfgate ab sets these itself"),
    ],
    ids=[
        "good-without-bad",
        "no-such-commit",
        "not-an-ancestor",
        "one-step",
        "bad-rule",
        "one-process",
        "zero-processes",
        "a-tree",
        "max-below-processes",
        "missing-path",
        "two-kinds",
        "owned-option",
    ],
)
def test_bad_input_is_refused_with_exit_2_before_anything_runs(tiny_repo, monkeypatch, tmp_path, capsys, args, words):
    monkeypatch.chdir(tiny_repo)
    assert main(["bisect", "--out", str(tmp_path / "b"), *args]) == 2
    assert words in capsys.readouterr().err
    assert not (tmp_path / "b" / "bisect.json").exists()


# ---------------------------------------------------------------------------------------------- the CPU proof

PROOF_FILES = ("conftest.py", "pyproject.toml", "perfgate", "perftests", "fixtures")


def throwaway_repo(root: Path, culprit: int, commits: int = 5, plant: str = "addopts") -> Path:
    """This repository's suite as a new git repository of `commits` commits; commit `culprit` plants a
    slowdown: `addopts`, `--perf-inject=slow:30` in pytest's addopts (30 ms of sleep after every ~1 ms compiled
    step), which the pytest session of a process-engine probe reads; `zoo`, 30 ms of sleep in the classifiers'
    inference step (fixtures/vision.py), which a paired probe's side B runs from its own checkout."""
    repo = root / "repo"
    repo.mkdir()
    for name in PROOF_FILES:
        src = REPO / name
        (
            shutil.copytree(src, repo / name, ignore=shutil.ignore_patterns("__pycache__"))
            if src.is_dir()
            else shutil.copy(src, repo / name)
        )
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    for n in range(commits):
        (repo / "NOTES").write_text(f"commit {n}\n")
        if n == culprit and plant == "addopts":
            toml = (repo / "pyproject.toml").read_text()
            (repo / "pyproject.toml").write_text(toml.replace('addopts = "', 'addopts = "--perf-inject=slow:30 ', 1))
        elif n == culprit:
            zoo = (repo / "fixtures" / "vision.py").read_text()
            step = 'def classify(model, batch: dict):\n    return model(batch["images"])'
            assert step in zoo
            slow = step.replace("    return", '    __import__("time").sleep(0.03)\n    return')
            (repo / "fixtures" / "vision.py").write_text(zoo.replace(step, slow))
        subprocess.run([*git, "add", "-A"], cwd=repo, check=True)
        subprocess.run(
            [*git, "commit", "-q", "-m", f"step {n}" + (" plants a slowdown" if n == culprit else "")],
            cwd=repo,
            check=True,
        )
    return repo


@pytest.mark.serial
def test_cpu_proof_a_planted_slowdown_is_bisected_to_its_commit(tmp_path, monkeypatch, capsys):
    """Paired probes, the default: each one pytest run of the bad end's checkout with the good end (A) and the
    step (B) alive in it. Step 1's probe is an A/A and must read good, so this covers a no-change probe too.
    Three commits, two probes: the search over a longer range is the unit tests'. The process engine's probes
    (--processes N) are the unit tests' too, and its runs test_ab_run's."""
    pytest.importorskip("torch")
    culprit = 2
    repo = throwaway_repo(tmp_path, culprit, commits=3, plant="zoo")  # 2 probes: 2 bad, 1 good
    monkeypatch.chdir(repo)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # two torch thread pools on 2 shared cores: see test_ab_run.py
    out = tmp_path / "b"
    code = main(["bisect", "--good", "HEAD~2", "--bad", "HEAD", "--out", str(out), "--", *CHEAP_CELL_ARGS])
    report = json.loads((out / "report.json").read_text())
    logs = "".join(p.read_text()[-2000:] for p in out.glob("probes/*/pytest.log"))
    assert (code, report["outcome"]["first_bad"], report["outcome"]["last_good"]) == (1, culprit, culprit - 1), logs
    assert [report["probes"][str(i)]["verdict"] for i in (2, 1)] == [BAD, GOOD]
    # The planted sleep adds Python calls a step: that count is red in the first process pair, which ends the
    # probe (counts repeat across processes); the wall clock's red would want three pairs.
    assert "compiled Python calls regression" in report["probes"]["2"]["why"]
    printed = capsys.readouterr().out
    assert "plants a slowdown" in printed and "perfgate ab --a-python" in printed and "--processes" not in printed
    trees = subprocess.run(["git", "worktree", "list"], capture_output=True, text=True).stdout.splitlines()
    assert len(trees) == 2, trees  # the repository and the good end's checkout: the probed steps' are gone


def test_a_paired_probe_names_both_sides_and_judges_eager_only_between_environments(tmp_path):
    from perfgate.ab import bisect_paired

    good, step = Step("0", "0 good", "/py", rev="aaa"), Step("1", "1", "/py", rev="bbb", env=(("X", "1"),))
    words = bisect_paired.command(good, step, ["perftests", "-k", "gpt2"], tmp_path, tmp_path / "cache")
    after = lambda option: words[words.index(option) + 1]  # noqa: E731
    assert (after("--perf-against"), after("--perf-b-rev"), after("--perf-b-env")) == ("aaa", "bbb", "X=1")
    assert after("--perf-cache-dir") == str(tmp_path / "cache") and "--perf-judge-eager-wall" not in words
    envs = bisect_paired.command(
        Step("0", "old", "/old"), Step("1", "new", "/new"), ["t", "--perf-cache-dir=c"], tmp_path, tmp_path
    )
    assert "--perf-judge-eager-wall" in envs and envs.count("--perf-cache-dir") == 0  # the user's own cache stays


@pytest.mark.parametrize(
    "code, outcome, status, verdict, words",
    [
        (0, "ok", "ok", GOOD, "no regression in 1 cell"),
        (1, "regression", "ok", BAD, "c: compiled wall ms regression, +20.0%"),
        (2, "unsure", "ok", UNSURE, "c: compiled wall ms unsure"),
        (4, "ok", "ok", UNSURE, "pytest exit 4 with every compared cell ok"),
        (1, "ok", "failed", UNSURE, "c: cell unsure: numerics failed"),  # a failed test, not a slower step
        (0, None, "ok", UNSURE, "no cell was compared"),  # every cell skipped: never good
    ],
    ids=["pass", "regression", "unsure", "usage-error", "failed-cell", "nothing-compared"],
)
def test_a_paired_probe_reads_its_records_and_names_the_rule(tmp_path, code, outcome, status, verdict, words):
    from perfgate.ab import bisect_paired

    import synthetic as syn

    rule = {"rule": "compiled_ms", "side": "compiled", "clock": "wall", "threshold": 0.05, "outcome": outcome}
    rule.update(change=0.2, lo=0.15, hi=0.25)
    shown = {**rule, "rule": "eager_ms", "side": "eager", "outcome": "shown"}
    cell = syn.cells(models=("gpt2",), phases=("infer",))[0]
    record = syn.record(cell, rng=np.random.default_rng(0))
    if status == "failed":
        record = syn.failed(cell, "numerics failed")
    if outcome is not None:
        record["paired"] = {"outcome": outcome, "rules": [rule, shown], "counts": []}
    syn.write_run(tmp_path / "results.jsonl", [record])
    got, why, rows, compared = bisect_paired.reading(tmp_path, code)
    assert got == verdict and words.replace("c:", f"{cell.id}:") in why, why
    assert compared == (outcome is not None) and "eager_ms" not in [r["metric"] for r in rows]  # shown: no row


@pytest.mark.parametrize(
    "extra, words", [(["--rule", "speedup:5"], "give --processes N"), (["--html", "x.html"], "--html")], ids=str
)
def test_a_paired_bisection_refuses_a_rule_of_one_metric_and_html(
    tiny_repo, monkeypatch, tmp_path, capsys, extra, words
):
    monkeypatch.chdir(tiny_repo)
    assert main(["bisect", "--good", "HEAD~1", "--bad", "HEAD", "--out", str(tmp_path / "o"), *extra, "--", "t"]) == 2
    assert words in capsys.readouterr().err
