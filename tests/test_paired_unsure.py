"""What an unsure paired cell says would decide it (perfgate.ab.verdict.what_decides), in the terminal's lines
and in the Markdown of the job summary and PR comment. The cases are the committed records' own."""

import pytest

from perfgate.ab.verdict import PairedVerdict

AGAIN = 'the cell measured again (-k "c0")'


def _verdict(by_pair, lo, hi, clock="wall", threshold=0.05) -> PairedVerdict:
    rule = {
        "rule": f"compiled_{'device_' if clock == 'device' else ''}ms",
        "clock": clock,
        "side": "compiled",
        "threshold": threshold,
        "change": by_pair[-1] if by_pair else (lo + hi) / 2,
        "lo": lo,
        "hi": hi,
        "outcome": "unsure",
        "by_pair": by_pair,
    }
    summary = {"against": "0123456789ab", "outcome": "unsure", "rules": [rule], "duets": 2, "looks": 6}
    return PairedVerdict.of([{"cell": "c0", "paired": summary}])


@pytest.mark.parametrize(
    "by_pair, lo, hi, clock, threshold, says",
    [
        # H100 cf962799's vit_b16 infer A/A: one process of B slow for its life
        ([0.266, 0.001], 0.001, 0.011, "wall", 0.05, "both sides of the +5.0 % line (a host-bound step's speed"),
        # its segformer_b2 infer A/A: both of B's processes slower, the first's interval across the line
        ([0.105, 0.587], 0.182, 0.591, "wall", 0.05, "lies past the +5.0 % line, but a regression stands only"),
        # 4xH200 2aa41d77's resnet50 infer A/A: one kernel slower in one process
        ([0.0295, -0.002], 0.027, 0.0295, "device", 0.01, "lies past the +1.0 % line"),
        ([0.02, -0.004], -0.002, 0.02, "device", 0.01, "both sides of the +1.0 % line (each process's kernels"),
        ([0.043, 0.047], -0.01, 0.07, "wall", 0.05, "its interval spans the +5.0 % line: more rounds would"),
        ([], -0.01, 0.07, "wall", 0.05, "its interval spans the +5.0 % line: more rounds would"),
    ],
    ids=["wall-pairs-across", "wall-past-the-line", "device-past-the-line", "device-pairs-across", "spans", "one-pair"],
)
def test_an_unsure_cell_says_what_would_decide_it(by_pair, lo, hi, clock, threshold, says):
    verdict = _verdict(by_pair, lo, hi, clock, threshold)
    line = verdict.lines()[1]
    assert "after 2 process pair(s) and 6 look(s)" in line and says in line and AGAIN in line
    assert ("host that holds its speed" in line) == (clock == "wall" and bool(by_pair) and "spans" not in says)
    assert says in verdict.markdown()  # the PR comment says it too


def test_a_cell_measured_unpaired_that_no_baseline_judges_never_passes(tmp_path):
    """A data-parallel cell in a paired run is measured unpaired (its ranks hold the GPUs): without a baseline
    nothing judged it, and the run passed on its paired cells alone. Now it is unsure (exit 2), named, in the
    terminal's lines and the report; with a baseline, the baseline judges it."""
    ok = {"against": "0123456789ab", "outcome": "ok", "rules": [], "duets": 1, "looks": 1}
    ddp = "gpt2-ddp-inductor_ddp_optimizer-amp_bf16"
    records = [{"cell": "c0", "status": "ok", "paired": ok}, {"cell": ddp, "status": "ok"}]
    assert PairedVerdict.of(records).exit_code == 0
    alone = PairedVerdict.of(records, baseline=False)
    assert alone.exit_code == 2 and alone.unjudged == [ddp]
    assert alone.lines()[0].startswith("perfgate paired: UNSURE") and ddp in alone.lines()[-1]
    assert "--perf-baseline" in alone.markdown() and ddp in alone.markdown()
    only = PairedVerdict.of(records[1:], baseline=False)  # perfgate deal's data-parallel session
    assert only.exit_code == 2 and ddp in only.lines()[0] and ddp in only.markdown()
    only.write_reports(str(tmp_path))
    assert (tmp_path / "report.json").read_text().count(ddp) == 1
