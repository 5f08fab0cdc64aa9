"""`perfgate deal`: a pytest run dealt over the GPUs, a session a GPU with its share of the cores, judged as one
run. The sessions here are stand-in processes (a few lines of Python each), so the dealing, the merge, the
compare, the signals and the exit are tested on a CPU box in seconds."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.core.matrix import DATA_PARALLEL_LEFT_OUT
from perfgate.faces import deal
from perfgate.judge.baseline import baseline_path, build_baseline, write_baseline
from perfgate.plan import costs

import synthetic as syn

# A stand-in session: says where it ran, writes the records it is handed, exits as told. On SIGINT it closes
# as an interrupted pytest session does (its records written, exit 2); a shard told to leave data-parallel
# cells says so, as the plugin's closing line does.
SESSION = """
import json, os, signal, sys, time
out, records, code, wait = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
extra, given = sys.argv[5], sys.argv[6]
def closed(*_):
    print("perfgate: the run was interrupted", flush=True); sys.exit(2)
signal.signal(signal.SIGINT, signal.SIG_IGN if os.environ.get("DEAF") else closed)
os.makedirs(out, exist_ok=True)
print("perfgate paired: on", os.environ.get("CUDA_VISIBLE_DEVICES"), sorted(os.sched_getaffinity(0)), extra, flush=True)
print("pytest args:", given, flush=True)
print("dealt:", os.environ.get("PERFGATE_DEALT"), flush=True)
print("started at", time.time(), flush=True)
if "without" in extra and os.environ.get("LEAVE_OUT"):
    print("perfgate: 1 %s" % os.environ["LEAVE_OUT"], flush=True)
with open(os.path.join(out, "results.jsonl"), "a") as f:
    f.writelines(json.dumps(r) + "\\n" for r in records)
time.sleep(wait)
print("ended at", time.time(), flush=True)
if code < 0:  # killed by signal -code
    os.kill(os.getpid(), -code)
sys.exit(code)
"""


def _stand_in(monkeypatch, records: dict, codes: dict, wait_s=0.0):
    """Sessions by name ("shard 1/2", "data-parallel cells") write `records[name]` and exit `codes[name]`."""

    def args(self, pytest_args):
        extra = " ".join(self.extra)
        payload = json.dumps(records.get(self.name, []))
        code = str(codes.get(self.name, 0))
        return [sys.executable, "-c", SESSION, str(self.out), payload, code, str(wait_s), extra, " ".join(pytest_args)]

    monkeypatch.setattr(deal.Session, "args", args)


CORES_64 = [(c,) for c in range(64)]


@pytest.mark.parametrize(
    "asked, gpus, cores, expected",
    [
        ("all", ["0", "1", "2", "3"], CORES_64, [("0", "0-15"), ("1", "16-31"), ("2", "32-47"), ("3", "48-63")]),
        ("2", ["4", "6", "7"], [(c,) for c in range(7)], [("4", "0-3"), ("6", "4-6")]),  # the remainder: first
        ("all", ["0", "1"], [(0, 2), (1, 3)], [("0", "0,2"), ("1", "1,3")]),  # a core's two threads together
        ("all", ["0", "1"], [(0,)], [("0", ""), ("1", "")]),  # fewer cores than shards: none pinned
        ("all", [], CORES_64, [(None, "")]),  # no GPU: the plain run, whose GPU cells skip with their reason
        ("all", ["0"], CORES_64, [(None, "")]),  # one GPU: the plain run
        ("1", ["0", "1"], CORES_64, [("0", "")]),  # one of two asked: the plain run on it
    ],
    ids=["4-gpus", "first-2-of-3", "siblings", "one-core", "no-gpu", "one-gpu", "one-asked"],
)
def test_each_shard_gets_a_gpu_and_an_equal_share_of_whole_cores(tmp_path, asked, gpus, cores, expected):
    planned = deal.plan(asked, gpus, cores, tmp_path)
    assert [(s.gpus, deal._ranges(s.cpus)) for s in planned] == expected
    if len(planned) == 1:  # the plain run writes where one session would, with no option of deal's
        assert planned[0].plain and planned[0].out == tmp_path and "--perf-shard" not in planned[0].args([])
    else:
        assert planned[1].args(["perftests", "--perf-baseline=b"])[-8:] == [
            "--perf-shard",
            f"2/{len(expected)}",
            "--perf-data-parallel",
            "without",
            "--perf-results",
            str(tmp_path / "shard-1" / "results.jsonl"),
            "--perf-report",
            str(tmp_path / "shard-1"),
        ]
        assert "--perf-report" not in planned[1].args(["perftests"])  # nothing gated, no report


@pytest.mark.parametrize(
    "asked, gpus, valid",
    [("5", ["0", "1"], "all or 1 to 2"), ("x", ["0"], "all or 1 to 1"), ("2", [], "no GPU is visible here")],
)
def test_a_gpu_count_past_the_machine_is_refused_by_name(tmp_path, asked, gpus, valid):
    with pytest.raises(ValueError, match=f"--gpus '{asked}': valid: .*{valid}"):
        deal.plan(asked, gpus, CORES_64, tmp_path)


@pytest.mark.parametrize("listed, gpus", [("3,5", ["3", "5"]), ("0,-1,2", ["0"]), ("", []), ("GPU-ab12", ["GPU-ab12"])])
def test_the_visible_gpus_are_read_as_cuda_reads_them(monkeypatch, listed, gpus):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", listed)
    assert deal.visible_gpus() == gpus


@pytest.mark.parametrize(
    "args, says",
    [
        (["perftests", "--perf-shard=1/2"], "deal sets --perf-shard, --perf-results, --perf-report"),
        (["perftests", "--perf-save-baseline", "b"], "perfgate baseline update DIR/results.jsonl"),
        (["perftests", "--junitxml=j.xml"], "each session would write it over the others'"),
        (["perftests", "-n2"], "deal is the parallelism"),
        ([], "give the pytest args after --"),
    ],
    ids=["owned", "baseline", "junit", "xdist", "none"],
)
def test_what_several_sessions_cannot_share_is_refused_by_name(tmp_path, capsys, args, says):
    assert main(["deal", "--out", str(tmp_path), "--", *args]) == 2 and says in capsys.readouterr().err


def test_shards_run_at_once_on_their_gpus_and_their_records_are_judged_as_one_run(tmp_path, monkeypatch, capsys):
    """Two shards on GPUs 3 and 5, a core each: their records merge into results.jsonl (an earlier run's
    records in the same folder gone) and `perfgate compare` against the committed baseline writes the run's
    report; a slowed cell in one shard fails the run though its stand-in's own exit said pass."""
    key = (syn.H100, "pr")
    baselines = tmp_path / "baselines"
    write_baseline(baseline_path(baselines, *key), build_baseline(syn.runs(3, first_seed=21))[key])
    resnet = "resnet50-train-inductor_default-amp_bf16"
    run = syn.run(9, overrides={resnet: {"speedup": syn.PROFILE["resnet50"][1] * 0.8}})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(deal.os, "sched_getaffinity", lambda pid: {0, 1})
    monkeypatch.setattr(deal, "cores", lambda cpus: [(c,) for c in cpus])
    out = tmp_path / "out"
    (out / "shard-0").mkdir(parents=True)
    (out / "shard-0" / "results.jsonl").write_text(json.dumps({"cell": "from-an-earlier-run"}) + "\n")
    _stand_in(monkeypatch, {"shard 1/2": run[0::2], "shard 2/2": run[1::2]}, {})
    code = main(["deal", "--out", str(out), "--", "perftests", "--perf-baseline", str(baselines)])
    printed = capsys.readouterr().out
    assert code == 1 and "shard 1/2 on GPU 3, CPUs 0: exit 0" in printed and "shard 2/2 on GPU 5, CPUs 1" in printed
    assert "perfgate paired: on 5 [1] --perf-shard 2/2" in (out / "shard-1" / "log.txt").read_text()
    merged = [json.loads(line)["cell"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(merged) == sorted(r["cell"] for r in run)
    assert resnet in (out / "report.md").read_text() and json.loads((out / "report.json").read_text())["exit_code"] == 1


def test_the_data_parallel_cells_a_shard_left_out_run_after_on_every_gpu(tmp_path, monkeypatch, capsys):
    """They run unpaired (their ranks hold the GPUs): with no baseline to judge them, their session is unsure
    (exit 2, as the plugin's session end says) and the run's report names them, though every paired cell
    passed."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("LEAVE_OUT", DATA_PARALLEL_LEFT_OUT)
    paired = {"against": "origin/main", "outcome": "ok", "duets": 1, "looks": 1, "rules": []}
    run = [{**r, "paired": paired} for r in syn.run(9)]
    ddp = {**syn.run(9)[0], "cell": "gpt2-ddp-inductor_ddp_optimizer-amp_bf16"}  # measured, unpaired
    records = {"shard 1/2": run[:5], "shard 2/2": run[5:], "data-parallel cells": [ddp]}
    _stand_in(monkeypatch, records, {"data-parallel cells": 2})
    assert main(["deal", "--out", str(tmp_path), "--", "perftests", "--perf-against", "origin/main"]) == 2
    log = (tmp_path / "data-parallel" / "log.txt").read_text()
    assert "perfgate paired: on 0,1" in log and "--perf-data-parallel only" in log
    assert "data-parallel cells on GPU 0,1" in capsys.readouterr().out
    assert json.loads((tmp_path / "report.json").read_text())["paired"]["unjudged"] == [ddp["cell"]]
    assert not (tmp_path / "report.md").read_text().startswith("**perfgate deal")  # its 2 is a verdict, not a loss


def test_a_run_neither_paired_nor_gated_writes_no_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    _stand_in(monkeypatch, {"shard 1/2": syn.run(9)[:5], "shard 2/2": syn.run(9)[5:]}, {})
    assert main(["deal", "--out", str(tmp_path), "--", "perftests"]) == 0
    assert not (tmp_path / "report.md").exists() and (tmp_path / "results.jsonl").exists()


@pytest.mark.parametrize("given", [["--perf-precompile", "4"], ["--perf-precompile=4"]], ids=["spaced", "equals"])
def test_one_precompile_for_every_shard_comes_first_and_the_shards_precompile_nothing(tmp_path, monkeypatch, given):
    """A shard's precompile removes every launch-config pick written since it began: shards that each
    precompiled removed the picks another shard's cells had just timed. One collect-only session compiles the
    cells on every dealt GPU, as many processes a GPU as asked, before any shard starts."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("PERFGATE_DEALT", "1")  # deal's own environment's (a nested run) reaches no session
    paired = {"against": "origin/main", "outcome": "ok", "duets": 1, "looks": 1, "rules": []}
    run = [{**r, "paired": paired} for r in syn.run(9)]
    _stand_in(monkeypatch, {"shard 1/2": run[:5], "shard 2/2": run[5:]}, {}, wait_s=0.5)
    args = ["perftests", "--perf-against", "origin/main", "--perf-cache-dir", "c", *given, "-k", "pr"]
    assert main(["deal", "--out", str(tmp_path), "--", *args]) == 0
    first = (tmp_path / "precompile" / "log.txt").read_text()
    assert "on 0,1" in first and "--collect-only -q --perf-data-parallel without --perf-precompile 8" in first
    assert "dealt: None" in first  # the one session that precompiles
    for shard in ("shard-0", "shard-1"):
        log = (tmp_path / shard / "log.txt").read_text()
        assert "pytest args: perftests --perf-against origin/main --perf-cache-dir c -k pr" in log
        assert "dealt: 1" in log  # never precompiles, whatever a config file says
        assert _at("ended", first) <= _at("started", log)  # each 0.5 s long: at once, a shard would start first


def _at(event: str, log: str) -> float:
    return float(next(line for line in log.splitlines() if line.startswith(event)).split()[-1])


@pytest.mark.parametrize("value", ["0", "257", "x"])
def test_a_precompile_value_deal_cannot_use_is_left_to_each_shards_pytest_which_names_it(value):
    given = ["perftests", "--perf-precompile", value]
    assert deal.precompile_of(given) == (None, given)


def test_a_paired_run_without_a_baseline_gets_one_verdict_over_its_shards(tmp_path, monkeypatch):
    paired = {"against": "origin/main", "outcome": "ok", "duets": 1, "looks": 1, "rules": []}
    run = [{**r, "paired": {**paired, "outcome": "unsure" if i == 3 else "ok"}} for i, r in enumerate(syn.run(9))]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1,2")
    # The third shard was dealt no cell (pytest's exit 5): no verdict of its own, and no pass taken from it.
    _stand_in(monkeypatch, {"shard 1/3": run[0::2], "shard 2/3": run[1::2]}, {"shard 2/3": 2, "shard 3/3": 5})
    assert main(["deal", "--out", str(tmp_path), "--", "perftests", "--perf-against", "origin/main"]) == 2
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == 2 and len(report["paired"]["cells"]) == len(run)
    assert run[3]["cell"] in (tmp_path / "report.md").read_text()


@pytest.mark.parametrize(
    "signals, precompile", [(1, False), (2, False), (1, True)], ids=["sigterm", "sigterm-then-sigint", "in-precompile"]
)
def test_an_interrupt_lets_every_shard_close_and_never_passes(tmp_path, monkeypatch, signals, precompile):
    """SIGTERM (a CI step's limit) reaches each shard's pytest as SIGINT, which judges what it measured and
    keeps its records; a second signal kills what is left at once. The run exits 2 either way, and starts no
    session for the data-parallel cells its shards left out, nor any shard when it came in the precompile."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("LEAVE_OUT", DATA_PARALLEL_LEFT_OUT)
    monkeypatch.setattr(deal, "STOP_S", 30.0)
    _stand_in(monkeypatch, {"shard 1/2": [{"cell": "a"}], "shard 2/2": [{"cell": "b"}]}, {}, wait_s=60)
    if signals == 2:  # sessions deaf to the first signal: only the second ends them, at once
        monkeypatch.setenv("DEAF", "1")
    timers = [
        threading.Timer(1.5 + i, os.kill, (os.getpid(), sig))
        for i, sig in enumerate([signal.SIGTERM, signal.SIGINT][:signals])
    ]
    for timer in timers:
        timer.start()
    try:
        code = main(["deal", "--out", str(tmp_path), "--", "perftests", *["--perf-precompile=2"] * precompile])
    finally:
        for timer in timers:
            timer.cancel()
    assert code == 2 and not (tmp_path / "data-parallel").exists()
    if precompile:
        assert "interrupted" in (tmp_path / "precompile" / "log.txt").read_text()
        assert not (tmp_path / "shard-0").exists()
        return
    for k in (0, 1):
        shard = Path(tmp_path / f"shard-{k}")
        assert (shard / "results.jsonl").exists()
        assert ("interrupted" in (shard / "log.txt").read_text()) == (signals == 1)


@pytest.mark.parametrize(
    "codes, ddp_runs, expected",
    [({"shard 2/2": 5}, True, 0), ({"shard 1/2": 5, "shard 2/2": 5}, True, 0), ({"shard 1/2": 3}, False, 3)],
    ids=["one-shard-empty", "every-shard-empty", "a-shard-crashed"],
)
def test_an_empty_shard_is_no_verdict_and_no_reason_to_skip_the_data_parallel_cells(
    tmp_path, monkeypatch, codes, ddp_runs, expected
):
    """A shard the deal left no cell exits 5 (pytest's "no tests"): it neither stops the data-parallel
    session nor reaches the run's exit; a crashed shard does both."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("LEAVE_OUT", DATA_PARALLEL_LEFT_OUT)
    run = syn.run(9)
    ddp = {"data-parallel cells": run[:2]}
    records = {name: run[2:] for name in ("shard 1/2", "shard 2/2") if name not in codes} | ddp
    _stand_in(monkeypatch, records, codes)
    assert main(["deal", "--out", str(tmp_path), "--", "perftests"]) == expected
    assert (tmp_path / "data-parallel").exists() == ddp_runs


@pytest.mark.parametrize("code, own", [(0, 0), (1, 1), (2, 2), (3, 3), (4, 2), (6, 3)])
def test_a_sessions_exit_reads_as_one_of_perfgates(code, own):
    assert deal._own(code) == own


def test_a_baseline_base_and_precompile_set_in_a_config_file_are_read_as_the_sessions_read_them(tmp_path, monkeypatch):
    """[tool.perfgate], then the file's pytest addopts, then PYTEST_ADDOPTS, then the command line, a later one
    winning: deal's precompile, its report's baseline and whether the run is paired come from where the dealt
    sessions' pytest takes them. What no session may write alone is refused wherever it was set."""
    from perfgate.faces import deal_args

    table = (
        '[tool.perfgate]\nbaseline = "b1"\nprecompile = 4\n[tool.pytest.ini_options]\naddopts = "--perf-baseline=b2"\n'
    )
    (tmp_path / "pyproject.toml").write_text(table)
    below = tmp_path / "perftests"
    below.mkdir()
    monkeypatch.setenv("PYTEST_ADDOPTS", "--perf-against origin/main")
    seen = deal_args.configured(["perftests", "--perf-baseline", "b3"], where=below)
    assert deal_args.baseline_in(seen) == "b3" and deal_args.paired_in(seen) and deal_args.precompile_of(seen)[0] == 4
    assert deal_args.baseline_in(deal_args.configured(["perftests"], where=below)) == "b2"
    monkeypatch.setenv("PYTEST_ADDOPTS", "-k 'unclosed")  # pytest's to refuse in each session, not deal's to crash on
    assert deal_args.configured(["perftests"], where=below)[-1:] == ["perftests"]
    monkeypatch.delenv("PYTEST_ADDOPTS")
    assert not deal_args.paired_in(deal_args.configured([], where=below))
    (tmp_path / "pyproject.toml").write_text("[tool.perfgate\n")  # unreadable: each session refuses it by name
    assert deal_args.configured(["perftests"], where=below) == ["perftests"]
    inherited = deal_args.refused(["perftests"], ["--perf-history=h.db", "--perf-results=r.jsonl", "-n", "4"])
    assert inherited == [
        "--perf-history=h.db (set in pyproject.toml or PYTEST_ADDOPTS): add the run's records once: "
        "perfgate history add DIR/results.jsonl",
        "-n (set in pyproject.toml or PYTEST_ADDOPTS): a dealt session is one process a GPU: deal is the parallelism",
    ]  # deal's own --perf-results overrides a config file's
    assert deal_args.refused(["perftests", "-n", "0"], ["-n", "auto"]) == []  # the command line's xdist off wins
    assert deal_args.refused(["perftests", "-n0"]) == [] and deal_args.refused(["--numprocesses=2"])
    assert deal_args.baseline_in(["--perf-baseline=b", "--perf-baseline="]) is None  # a file's switched off
    assert deal_args.paired_in(["--perf-b-python", "/opt/new/bin/python"]) and deal_args.gated(["--perf-baseline=b"])


def test_a_baseline_from_the_config_file_judges_the_merged_report_data_parallel_cells_included(tmp_path, monkeypatch):
    """A data-parallel cell is measured unpaired: the baseline that [tool.perfgate] gives judges it in its own
    session and in the run's one report, which names no cell unjudged."""
    key = (syn.H100, "pr")
    baselines = tmp_path / "baselines"
    write_baseline(baseline_path(baselines, *key), build_baseline(syn.runs(3, first_seed=21))[key])
    (tmp_path / "pyproject.toml").write_text(f'[tool.perfgate]\nbaseline = "{baselines}"\n')
    monkeypatch.chdir(tmp_path)
    assert "--perf-report" in deal.Session("shard", "0", (), tmp_path, ("x",)).args(["perftests"])  # gated there
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.setenv("LEAVE_OUT", DATA_PARALLEL_LEFT_OUT)
    paired = {"against": "origin/main", "outcome": "ok", "duets": 1, "looks": 1, "rules": []}
    run = [{**r, "paired": paired} for r in syn.run(9)]
    ddp = {**syn.run(9)[0], "cell": "gpt2-ddp-inductor_ddp_optimizer-amp_bf16"}
    _stand_in(monkeypatch, {"shard 1/2": run[:5], "shard 2/2": run[5:], "data-parallel cells": [ddp]}, {})
    assert main(["deal", "--out", "out", "--", "perftests", "--perf-against", "origin/main"]) == 0
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    assert report["exit_code"] == 0 and not (report.get("paired") or {}).get("unjudged")


@pytest.mark.parametrize("given", [[], ["--perf-costs", "mine.sqlite"]], ids=["kept", "given"])
def test_the_shards_deal_by_a_copy_of_the_costs_their_kept_cache_holds(tmp_path, monkeypatch, given):
    """Dealt by the priors per phase, two H200s' warm shards took 4:44 and 2:36: a cache restored on the runner
    holds what each cell cost there, and every shard deals by one copy of it taken before they start (their
    own lines, appended as they run, must not make them deal apart). A --perf-costs the sessions read wins."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    monkeypatch.chdir(tmp_path)
    (tmp_path / "c").mkdir()
    (tmp_path / "c" / costs.KEPT_COSTS).write_text(json.dumps({"cell": "a", "seconds": 9.0, "paired": True}) + "\n")
    _stand_in(monkeypatch, {"shard 1/2": syn.run(9)[:5], "shard 2/2": syn.run(9)[5:]}, {})
    assert main(["deal", "--out", "out", "--", "perftests", "--perf-cache-dir", "c", *given]) == 0
    for shard in ("shard-0", "shard-1"):
        args = next(line for line in (tmp_path / "out" / shard / "log.txt").read_text().splitlines() if "args:" in line)
        copied = f"--perf-costs {Path('out') / costs.KEPT_COSTS}" in args
        assert copied == (not given) and ("mine.sqlite" in args) == bool(given)
    assert costs.cost_lines(tmp_path / "out" / costs.KEPT_COSTS) == ([] if given else costs.cost_lines("c/costs.jsonl"))


@pytest.mark.parametrize(
    "code, exit, says", [(3, 3, "exit 3"), (-9, 2, "killed by signal 9")], ids=["crashed", "killed"]
)
def test_a_shard_that_crashed_leaves_a_report_that_never_reads_pass(tmp_path, monkeypatch, code, exit, says):
    """Shard 2/2 wrote two records and crashed, or was killed: the merged report judged only what the run kept
    and read PASS, which the PR workflow posts as its comment. It now says, above its verdict, the run's exit."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    paired = {"against": "origin/main", "outcome": "ok", "duets": 1, "looks": 1, "rules": []}
    run = [{**r, "paired": paired} for r in syn.run(9)]
    _stand_in(monkeypatch, {"shard 1/2": run[:5], "shard 2/2": run[5:7]}, {"shard 2/2": code})
    assert main(["deal", "--out", str(tmp_path), "--", "perftests", "--perf-against", "origin/main"]) == exit
    report = (tmp_path / "report.md").read_text()
    assert report.startswith(f"**perfgate deal: exit {exit}, not this report's 0**")
    banner = report.splitlines()[0]
    assert "shard 2/2 on GPU 1" in banner and says in banner and "shard 1/2" not in banner
    assert json.loads((tmp_path / "report.json").read_text())["exit_code"] == exit


def test_an_out_that_names_a_file_is_refused_by_name(tmp_path, capsys):
    (tmp_path / "out").write_text("")
    assert main(["deal", "--out", str(tmp_path / "out"), "--", "perftests"]) == 2
    assert f"--out {tmp_path / 'out'} is a file" in capsys.readouterr().err


def test_one_gpu_leaves_no_earlier_runs_report_behind(tmp_path, monkeypatch):
    """On one GPU deal is the plain run, which wrote into DIR over an earlier run's files: a run that died before
    its report left the old PASS for the workflow's comment step to post, and appended to the old records."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    for name in ("report.md", "report.json", "results.jsonl"):
        (tmp_path / name).write_text("an earlier run's\n")
    _stand_in(monkeypatch, {"the run": []}, {"the run": 4})
    assert main(["deal", "--out", str(tmp_path), "--", "perftests", "--perf-against", "origin/main"]) == 4
    assert not any((tmp_path / name).exists() for name in ("report.md", "report.json"))
    assert (tmp_path / "results.jsonl").read_text() == ""  # the stand-in's own, appended to nothing earlier
