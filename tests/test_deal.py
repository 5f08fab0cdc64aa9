"""`perfgate deal`: a pytest run dealt over the GPUs, a session a GPU with its CPU share, judged as one run. The
shards here are stand-in processes (a few lines of Python each), so the dealing, the merge, the compare and the
exit are tested on a CPU box in a second or two."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.faces import deal
from perfgate.judge.baseline import baseline_path, build_baseline, write_baseline

import synthetic as syn

# A stand-in shard: says where it ran, writes the records it is handed, exits as told; on SIGTERM it closes as an
# interrupted session does (exit 2, having written its records).
SHARD = """
import json, os, signal, sys, time
out, records, code, wait = sys.argv[1], json.loads(sys.argv[2]), int(sys.argv[3]), float(sys.argv[4])
def closed(*_):
    print("perfgate: the run was interrupted", flush=True); sys.exit(2)
signal.signal(signal.SIGTERM, closed)
os.makedirs(out, exist_ok=True)
print("perfgate paired: shard on", os.environ.get("CUDA_VISIBLE_DEVICES"), sorted(os.sched_getaffinity(0)), flush=True)
with open(os.path.join(out, "results.jsonl"), "w") as f:
    f.writelines(json.dumps(r) + "\\n" for r in records)
time.sleep(wait)
sys.exit(code)
"""


def _stand_in(monkeypatch, records_by_shard, codes, wait_s=0.0):
    def args(self, pytest_args):
        records = json.dumps(records_by_shard[self.index])
        return [sys.executable, "-c", SHARD, str(self.out), records, str(codes[self.index]), str(wait_s)]

    monkeypatch.setattr(deal.Shard, "args", args)


@pytest.mark.parametrize(
    "asked, gpus, cpus, shards",
    [
        ("all", ["0", "1", "2", "3"], range(64), [("0", (0, 15)), ("1", (16, 31)), ("2", (32, 47)), ("3", (48, 63))]),
        ("2", ["4", "6", "7"], range(8), [("4", (0, 3)), ("6", (4, 7))]),
        ("all", ["0", "1"], [0], [("0", None), ("1", None)]),  # fewer CPUs than shards: none pinned
        ("all", [], range(2), [(None, None)]),  # no GPU: the plain run, its GPU cells skip with their reason
        ("1", ["0", "1"], range(2), [("0", None)]),
    ],
    ids=["4-gpus", "first-2-of-3", "one-cpu", "no-gpu", "one-asked"],
)
def test_each_shard_gets_a_gpu_and_an_equal_share_of_the_cpus(tmp_path, asked, gpus, cpus, shards):
    planned = deal.plan(asked, gpus, list(cpus), tmp_path)
    got = [(s.gpu, (s.cpus[0], s.cpus[-1]) if s.cpus else None) for s in planned]
    assert got == shards and {s.count for s in planned} == {len(shards)}
    if len(planned) == 1:  # the plain run writes where one session would
        assert planned[0].out == tmp_path and "--perf-shard" not in planned[0].args(["perftests"])
    else:
        assert planned[1].args(["perftests", "--perf-baseline=b"])[-6:] == [
            "--perf-shard",
            f"2/{len(shards)}",
            "--perf-results",
            str(tmp_path / "shard-1" / "results.jsonl"),
            "--perf-report",
            str(tmp_path / "shard-1"),
        ]


@pytest.mark.parametrize(
    "asked, gpus, valid",
    [
        ("5", ["0", "1"], "all or 1 to 2"),
        ("x", ["0"], "all or 1 to 1"),
        ("2", [], "no GPU is visible here"),
        ("0", ["0"], "all or 1 to 1"),
    ],
)
def test_a_gpu_count_past_the_machine_is_refused_by_name(tmp_path, asked, gpus, valid):
    with pytest.raises(ValueError, match=f"--gpus '{asked}': valid: .*{valid}"):
        deal.plan(asked, gpus, [0, 1], tmp_path)


def test_the_options_deal_sets_itself_are_refused(tmp_path, capsys):
    code = main(["deal", "--out", str(tmp_path), "--", "perftests", "--perf-shard=1/2"])
    assert (
        code == 2
        and "--perf-shard=1/2: deal sets --perf-shard, --perf-results, --perf-report" in capsys.readouterr().err
    )


@pytest.mark.parametrize("codes, expected", [([0, 0], 0), ([0, 2], 2), ([2, 1], 1), ([3, 0], 3), ([], 0)], ids=str)
def test_the_shards_exit_as_one_session(codes, expected):
    assert deal.combined(codes) == expected


def test_shards_run_at_once_on_their_gpus_and_their_records_are_judged_as_one_run(tmp_path, monkeypatch, capsys):
    """Two shards on GPUs 3 and 5 (CUDA_VISIBLE_DEVICES), a CPU each: their records merge into results.jsonl and
    `perfgate compare` against the committed baseline writes the run's report; a slowed cell in one shard fails
    the run even though its shard's own stand-in exit said pass."""
    key = (syn.H100, "pr")
    baselines = tmp_path / "baselines"
    write_baseline(baseline_path(baselines, *key), build_baseline(syn.runs(3, first_seed=21))[key])
    resnet = "resnet50-train-inductor_default-amp_bf16"
    run = syn.run(9, overrides={resnet: {"speedup": syn.PROFILE["resnet50"][1] * 0.8}})
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,5")
    monkeypatch.setattr(deal.os, "sched_getaffinity", lambda pid: {0, 1})
    _stand_in(monkeypatch, [run[0::2], run[1::2]], codes=[0, 0])
    out = tmp_path / "out"
    code = main(["deal", "--out", str(out), "--", "perftests", "--perf-baseline", str(baselines)])
    printed = capsys.readouterr().out
    assert code == 1 and "shard 1/2 on GPU 3, CPUs 0-0: exit 0" in printed and "shard 2/2 on GPU 5, CPUs 1-1" in printed
    assert "perfgate paired: shard on 5 [1]" in (out / "shard-1" / "log.txt").read_text()
    merged = [json.loads(line)["cell"] for line in (out / "results.jsonl").read_text().splitlines()]
    assert sorted(merged) == sorted(r["cell"] for r in run)
    assert resnet in (out / "report.md").read_text() and json.loads((out / "report.json").read_text())["exit_code"] == 1


def test_an_interrupt_lets_every_shard_close_and_never_passes(tmp_path, monkeypatch):
    """SIGTERM (a CI step's limit) reaches each shard's session, which judges what it measured and keeps its
    records; the run exits 2."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    _stand_in(monkeypatch, [[{"cell": "a"}], [{"cell": "b"}]], codes=[0, 0], wait_s=60)
    timer = threading.Timer(1.5, os.kill, (os.getpid(), signal.SIGTERM))
    timer.start()
    try:
        code = main(["deal", "--out", str(tmp_path)])
    finally:
        timer.cancel()
    assert code == 2
    for k in (0, 1):
        shard = Path(tmp_path / f"shard-{k}")
        assert "interrupted" in (shard / "log.txt").read_text() and (shard / "results.jsonl").exists()


def test_a_paired_run_without_a_baseline_gets_one_verdict_over_its_shards(tmp_path, monkeypatch):
    paired = {"against": "origin/main", "outcome": "ok", "duets": 1, "looks": 1, "rules": []}
    run = [{**r, "paired": {**paired, "outcome": "unsure" if i == 3 else "ok"}} for i, r in enumerate(syn.run(9))]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0,1")
    _stand_in(monkeypatch, [run[0::2], run[1::2]], codes=[0, 2])
    assert main(["deal", "--out", str(tmp_path), "--", "perftests", "--perf-against", "origin/main"]) == 2
    report = json.loads((tmp_path / "report.json").read_text())
    assert report["exit_code"] == 2 and len(report["paired"]["cells"]) == len(run)
    assert run[3]["cell"] in (tmp_path / "report.md").read_text()
