"""What a gated run lost is neither a pass nor the PR's regression: a cell whose process was stopped mid-cell (a
CI step's limit, Ctrl-C), a paired outcome no engine writes; and `perfgate report` heads its page with a paired
run's verdict, as the live gate's exit is the baseline's and the pair's (perfgate.judge.gate, perfgate.ab.verdict,
perfgate.render.html_report)."""

from __future__ import annotations

import pytest

from perfgate.ab.verdict import PairedVerdict
from perfgate.cli import main
from perfgate.core import exits
from perfgate.judge import gate
from perfgate.judge.baseline import baseline_path, build_baseline, write_baseline
from perfgate.render import html_report
from perfgate.render.report_files import write_reports

import synthetic as syn

RESNET = "resnet50-train-inductor_default-amp_bf16"
GPT2 = "gpt2-infer-inductor_default-amp_bf16"


@pytest.fixture
def baselines(tmp_path):
    folder = tmp_path / "baselines"
    for key, baseline in build_baseline(syn.runs(3, first_seed=21, noise=0.005, run_noise=0.002)).items():
        write_baseline(baseline_path(folder, *key), baseline)
    return folder


def _cut(record: dict) -> dict:
    """The checkpoint a stopped process leaves: its cell failed, "did not finish" where it stopped."""
    return {**record, "status": "failed", "reason": "did not finish: the process ended during 'compiling'"}


@pytest.mark.parametrize(
    "slowed, expected", [(False, exits.UNUSABLE), (True, exits.REGRESSION)], ids=["cut-alone-2", "and-a-red-1"]
)
def test_a_cell_cut_mid_measure_is_not_judged_and_the_run_never_passes(baselines, tmp_path, slowed, expected):
    """The checkpoint read as "ok in the baseline, failed now": exit 1 for a CI step's timeout. It is listed as
    not finished and the run is unsure, unless another cell shows a regression."""
    overrides = {RESNET: {"speedup": 2.3 * 0.8}} if slowed else {}
    run = [_cut(r) if r["cell"] == GPT2 else r for r in syn.run(7, noise=0.005, run_noise=0.002, overrides=overrides)]
    outcome = gate.gate_run(run, baselines)
    assert outcome.exit_code == expected and outcome.unfinished == [f"{GPT2}: {_cut({})['reason']}"]
    assert not any(f.cell == GPT2 for report in outcome.reports for f in report.regressions)
    text = write_reports(outcome, str(tmp_path / "report.md"), None)
    assert text.startswith("**1 cell(s) did not finish**") and GPT2 in text
    only = gate.gate_run([_cut(r) for r in syn.run(7)], baselines)
    assert only.exit_code == exits.UNUSABLE and only.errors[0].startswith("no cell was judged")


@pytest.mark.parametrize(
    "slowed, expected", [(False, exits.BUG), (True, exits.REGRESSION)], ids=["broke-alone-3", "and-a-red-1"]
)
def test_a_cell_perfgates_own_engine_failed_to_run_is_a_crash_not_the_prs_regression(baselines, slowed, expected):
    """The paired engine's own exception made B's record a failed cell, which StatusRule read as the PR's."""
    overrides = {RESNET: {"speedup": 2.3 * 0.8}} if slowed else {}
    broke = {"status": "failed", "reason": "perfgate's paired engine failed: KeyError: 'rounds'"}
    run = [
        {**r, **broke} if r["cell"] == GPT2 else r
        for r in syn.run(7, noise=0.005, run_noise=0.002, overrides=overrides)
    ]
    outcome = gate.gate_run(run, baselines)
    assert outcome.exit_code == expected and outcome.broken == [f"{GPT2}: {broke['reason']}"]
    assert not any(f.cell == GPT2 for report in outcome.reports for f in report.regressions)
    every = gate.gate_run([{**r, **broke} for r in syn.run(7)], baselines)  # nothing judged, and perfgate broke
    assert every.exit_code == exits.BUG and len(every.broken) == len(run)
    skipped = [{**r, **broke} if r["cell"] == GPT2 else {**r, "status": "skipped", "reason": "no CUDA"} for r in run]
    alone = gate.gate_run(skipped, baselines)  # the rest skipped: still a crash, and the broken cell named
    assert alone.exit_code == exits.BUG and alone.broken == [f"{GPT2}: {broke['reason']}"]


@pytest.mark.parametrize("outcome", [None, "Regression", "error"], ids=["null", "capitalised", "foreign"])
def test_a_paired_outcome_no_engine_writes_is_unsure(outcome):
    verdict = PairedVerdict.of([{"cell": "c", "status": "ok", "paired": {"outcome": outcome, "rules": []}}])
    assert verdict.unsure() == ["c"] and verdict.exit_code == exits.UNUSABLE


@pytest.mark.parametrize(
    "outcome, head, failed", [("regression", "FAIL", True), ("unsure", "UNSURE", False)], ids=["red", "unsure"]
)
def test_the_report_of_a_paired_run_heads_with_the_paired_verdict(baselines, tmp_path, outcome, head, failed):
    """`perfgate report --baseline` on a paired run read "PASS ... 0 regression(s)" over a cell the pair found
    red: the baseline judges no clock of a paired record. The pair's verdict now heads the gate's lines, and a
    paired red fails the page."""
    records = [
        {**r, "paired": {"outcome": outcome if r["cell"] == RESNET else "ok", "rules": [], "against": "main"}}
        for r in syn.run(7, noise=0.005, run_noise=0.002)
    ]
    digest = tmp_path / "digest.md"
    assert main(["report", syn.write_run(tmp_path / "r.jsonl", records), "--baseline", str(baselines),
                 "--markdown", str(digest)]) == 0  # fmt: skip
    lines = [line for line in digest.read_text().splitlines() if line.startswith("- ")]
    assert lines[0].startswith(f"- perfgate paired: {head}") and RESNET in lines[1]
    page = html_report.build(records, baseline=baselines, paired=PairedVerdict.of(records))
    assert page.gate_failed is failed
