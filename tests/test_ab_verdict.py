"""The A/B verdict on synthetic processes: Student's t, each rule B against A, the exit codes, the reports,
and (seeded simulations, tests/ab_power.py) its false alarms and its power with 3 processes a side."""

from __future__ import annotations

import json
import math

import pytest

from perfgate.ab import process_report
from perfgate.ab.process_rows import Process
from perfgate.ab.process_rules import ALPHA, StepTimeRule, ab_rules
from perfgate.ab.process_verdict import judge_ab
from perfgate.core.stats import t_quantile, t_sf, two_sample
from perfgate.judge.finding import REGRESSION
from perfgate.judge.rules import SpeedupRule
from perfgate.render.wording import ab_words

import ab_power
import synthetic as syn

GPT2 = syn.cells(models=["gpt2"], phases=["train"])
GPT2_ID = GPT2[0].id
QUIET = {"noise": 0.005, "run_noise": 0.002}


def side(label: str, n: int = 3, first_seed: int = 0, cells=GPT2, per_process=None, **kwargs) -> list[Process]:
    """n processes of one side; per_process(rep) -> record() keywords for that process's cells."""
    out = []
    for rep in range(1, n + 1):
        extra = per_process(rep) if per_process else {}
        records = syn.run(
            first_seed + 100 * rep + (0 if label == "A" else 7),
            cell_list=cells,
            overrides={c.id: extra for c in cells},
            **{**QUIET, **kwargs},
        )
        out.append(Process(label, rep, tuple(records), cold=rep == 1))
    return out


def findings(report, metric=None):
    return [f for f in report.regressions + report.improvements if metric is None or f.metric == metric]


# ---------------------------------------------------------------------------------------------- Student's t


@pytest.mark.parametrize(
    "df, p, table",
    [
        (1, 0.975, 12.706),
        (2, 0.999, 22.327),
        (4, 0.975, 2.776),
        (4, 0.999, 7.173),
        (7, 0.995, 3.499),
        (30, 0.975, 2.042),
    ],
)
def test_t_quantiles_match_the_tables(df, p, table):
    assert t_quantile(p, df) == pytest.approx(table, abs=5e-4)
    assert t_sf(table, df) == pytest.approx(1 - p, rel=2e-3)


def test_two_sample_pools_equal_sides_and_floors_the_spread():
    test = two_sample([1.0, 1.02, 0.98], [0.9, 0.91, 0.89])
    assert test.df == 4 and test.diff < 0 and test.t < -5
    lo, hi = test.interval()
    assert lo < test.diff < hi < 0
    floored = two_sample([1.0, 1.0], [1.0, 1.0], floor_a=0.01, floor_b=0.02)
    assert floored.se == pytest.approx(math.sqrt(0.01**2 / 2 + 0.02**2 / 2)) and floored.t == 0
    assert two_sample([1.0, 1.1, 1.2], [1.0, 1.5]).df < 3  # unequal sides: Welch's df, rounded down
    with pytest.raises(ValueError, match="2 or more"):
        two_sample([1.0], [1.0, 1.1])


# ---------------------------------------------------------------------------------------------- the rules


def test_a_a_passes_with_every_rule_compared():
    report = judge_ab(side("A") + side("B"))
    assert report.exit_code == 0 and not report.regressions and not report.errors
    (row,) = report.rows
    assert [c.metric for c in row.comparisons] == [
        r.metric for r in ab_rules() if isinstance(r, SpeedupRule) and r.phases is None
    ]  # not the data-parallel cells' compute
    assert all(c.change is not None and c.lo <= c.change <= c.hi for c in row.comparisons)
    assert all(c.df == 4 and c.n_a == c.n_b == 3 for c in row.comparisons)


def test_a_wall_loss_is_a_regression_with_its_interval():
    report = judge_ab(side("A") + side("B", speedup=syn.PROFILE["gpt2"][1] * 0.85))
    assert report.exit_code == 1
    wall = next(f for f in report.regressions if f.metric == "speedup")
    assert wall.kind == REGRESSION and wall.current < wall.baseline
    assert "95% interval" in wall.message and "on 4 df, 3 vs 3 processes" in wall.message
    c = report.rows[0].comparison("speedup")
    assert c.hi < 0 and c.change == pytest.approx(-0.15, abs=0.02)


def test_eager_and_compiled_slower_alike_is_caught_by_the_step_times_alone():
    report = judge_ab(side("A") + side("B", eager_ms=33.0 * 1.2))  # the same speedup, every step 20 % slower
    assert {f.metric for f in report.regressions} == {"eager_ms", "compiled_ms"}
    assert "eager ms per step 33" in next(f.message for f in report.regressions if f.metric == "eager_ms")


def test_faster_b_is_an_improvement_and_passes():
    report = judge_ab(side("A") + side("B", speedup=syn.PROFILE["gpt2"][1] * 1.2))
    assert report.exit_code == 0 and "speedup" in {f.metric for f in report.improvements}
    assert report.rows[0].verdict == "improvement"


def test_a_device_loss_of_3_percent_is_caught_with_3_processes():
    device = syn.PROFILE["gpt2"][1] * syn.EAGER_BUSY / syn.BUSY["gpt2"]
    report = judge_ab(side("A") + side("B", device_speedup=device * 0.97))
    assert [f.metric for f in report.regressions] == ["device_speedup"]


def test_a_clock_lost_in_b_is_a_regression():
    lost = [
        Process("B", p.rep, tuple(syn.without_device(r, "profiler failed") for r in p.records), p.cold)
        for p in side("B")
    ]
    report = judge_ab(side("A") + lost)
    (finding,) = findings(report, "device_speedup")
    assert finding.kind == REGRESSION and "missing in B (profiler failed)" in finding.message


def test_counts_numerics_and_memory_use_the_gates_rules_in_ab_words():
    report = judge_ab(side("A") + side("B", graph_breaks=2, recompiles=1, numerics="fail", peak_mem_compiled_mb=9000.0))
    found = {f.metric: f.message for f in report.regressions}
    assert found["graph_breaks"] == "graph breaks 0 -> 2" and found["recompiles"] == "recompiles 0 -> 1"
    assert found["numerics"].startswith("numerics pass -> fail")
    assert found["peak_mem_compiled_mb"].startswith("peak_mem_compiled_mb 7000 -> 9000")
    text = process_report.markdown(report)
    assert "baseline" not in text.lower()


def test_a_cell_failing_in_one_b_process_fails_b():
    report = judge_ab(side("A") + side("B")[:2] + [Process("B", 3, (syn.failed(GPT2[0], "CUDA out of memory"),))])
    (finding,) = findings(report)
    assert finding.metric == "status" and report.exit_code == 1
    assert finding.message == "ok in A, failed in B: failed in 1 of 3 processes: CUDA out of memory"
    assert not report.rows[0].comparisons  # no timing judged on a cell that did not run everywhere


def test_cold_compile_is_the_first_process_of_each_side():
    def compiles(first: float):
        return lambda rep: {"compile_s": first if rep == 1 else 5.0, "compile_cache": "persistent"}

    slow = judge_ab(side("A", per_process=compiles(40.0)) + side("B", per_process=compiles(70.0)))
    (finding,) = findings(slow)
    assert finding.metric == "compile_s" and "40 -> 70" in finding.message
    warm = [Process(p.side, p.rep, p.records, cold=False) for p in side("A") + side("B", per_process=compiles(70.0))]
    report = judge_ab(warm)
    assert not findings(report) and any("no cold compile on side A, B" in n for n in report.notes)


@pytest.mark.parametrize(
    "precompiled_b, verdict_words",
    [
        pytest.param(70.0, "40 -> 70", id="the-precompile's-first-call-is-the-cold-compile"),
        pytest.param(None, None, id="a-cache-hit-without-a-precompile-figure-is-no-cold-compile"),
    ],
)
def test_a_precompiling_first_process_gives_its_precompiles_first_call(precompiled_b, verdict_words):
    """`perfgate ab --precompile N`: the first process's cells find their graphs in the cache (a 2 s first
    call), so the cold compile is the precompile's; a hit with no precompile figure is never read as cold."""

    def hits(rep: int) -> dict:
        return {"compile_s": 2.0, "compile_cache": "persistent", "compile_cache_hits": 9, "compile_cache_misses": 0}

    def precompiling(processes: list[Process], first_call_s: float | None) -> list[Process]:
        figures = {} if first_call_s is None else {GPT2_ID: first_call_s}
        return [Process(p.side, p.rep, p.records, p.cold, figures if p.cold else {}) for p in processes]

    report = judge_ab(
        precompiling(side("A", per_process=hits), 40.0) + precompiling(side("B", per_process=hits), precompiled_b)
    )
    compile_findings = findings(report, "compile_s")
    if verdict_words:
        (finding,) = compile_findings
        assert verdict_words in finding.message
        assert any("A-1, B-1: its precompile's first calls, compiled several at once" in n for n in report.notes)
    else:
        assert not compile_findings and report.rows[0].b["compile_cache"] == "warm"
        assert any("no cold compile on side B" in n for n in report.notes)


def test_different_cells_or_too_few_processes_cannot_compare():
    other = syn.cells(models=["vit_b16"], phases=["train"])
    report = judge_ab(side("A") + side("B", cells=GPT2 + other))
    assert report.exit_code == 2 and report.only_in_b == [other[0].id] and other[0].id in report.errors[0]
    short = judge_ab(side("A") + side("B", n=1, graph_breaks=2))
    assert short.exit_code == 2 and "B has 1 complete process" in short.errors[0]
    # What a cut run measured is still shown: the counts judged, the timed figures side by side, not judged
    assert [f.metric for f in short.regressions] == ["graph_breaks"]
    wall = short.rows[0].comparison("speedup")
    assert wall.a and wall.b and wall.change is None and wall.kind is None
    assert wall.note == "3 + 1 processes: not compared (2 a side at least)"


def test_the_models_own_wall_threshold_is_used():
    loose = side("B", speedup=syn.PROFILE["gpt2"][1] * 0.9, gate={"speedup_threshold": 0.25})
    assert "speedup" not in {f.metric for f in judge_ab(side("A") + loose).regressions}


def test_ab_words():
    assert ab_words("ok in the baseline, failed now: boom") == "ok in A, failed in B: boom"
    assert ab_words("graph breaks 2 -> 1; refresh the baseline (perfgate baseline update)") == "graph breaks 2 -> 1"


def test_step_time_rule_is_lower_better():
    rule = StepTimeRule("eager_ms", threshold=0.05)
    assert rule.log_drop(10.0, 11.0) > 0 and rule.change(10.0, 11.0) == pytest.approx(0.1)
    assert rule.fraction(math.log(1.05)) == pytest.approx(0.05)
    assert rule.fraction(math.log(1.05), loss=False) == pytest.approx(1 - 1 / 1.05)


def test_a_line_from_absurd_round_times_does_not_overflow():
    rule = StepTimeRule("eager_ms", threshold=0.05)
    assert rule.fraction(1000.0) > 1e300 and rule.fraction(-1000.0, loss=False) < -1e300


# ---------------------------------------------------------------------------------------------- reports


def test_markdown_escapes_and_orders_regressions_first():
    reason = "boom | <details> *bold* [link](x) `code`"
    both = syn.cells(models=["gpt2", "vit_b16"], phases=["train"])
    b_side = side("B", cells=both)
    vit_failed = tuple(syn.failed(both[1], reason) if r["cell"] == both[1].id else r for r in b_side[0].records)
    report = judge_ab(side("A", cells=both) + [Process("B", 1, vit_failed, True), *b_side[1:]])
    text = process_report.markdown(report)
    assert text.startswith("**perfgate A/B FAIL**: 1 regression(s)") and "B against A, 3 + 3 processes" in text
    assert "<details>" not in text and "\\<details\\>" in text and "boom \\| " in text
    rows = [line for line in text.splitlines() if line.startswith(("| gpt2", "| vit"))]
    assert [r.split(" | ")[0] for r in rows] == [
        "| vit\\_b16-train-inductor\\_default-amp\\_bf16",
        "| gpt2-train-inductor\\_default-amp\\_bf16",
    ] * 2
    columns = {line.count("|") - line.count("\\|") for line in rows[:2]}
    assert columns == {len(process_report.TIMED) * 2 + 3}  # the escaped | in the reason splits no column
    payload = json.loads(json.dumps(process_report.to_json(report)))
    assert payload["exit_code"] == 1 and payload["alpha"] == ALPHA
    assert [r["verdict"] for r in payload["rows"]] == ["ok", "regression"]  # rows by cell; tables by verdict


# ---------------------------------------------------------------------------------------------- rates


def test_a_a_with_realistic_noise_almost_never_fails():
    """The PR slice (10 cells), 3 processes a side, every cell's wall speedup moving 3 % between processes
    (the host-bound end seen on H100 leases; 1 % is typical of device-bound cells): no run of 40 fails."""
    for noise in (0.01, 0.03):
        rates = ab_power.simulate(trials=20, n=3, noise=noise, seed=1)
        assert rates.runs_failed == 0, (noise, rates)


def test_a_10_percent_loss_with_1_percent_noise_is_caught():
    rates = ab_power.simulate(trials=10, n=3, noise=0.01, loss=0.10, seed=2)
    assert rates.runs_failed == rates.runs
    assert rates.cells_caught / rates.cells >= 0.98, rates


def test_a_liberal_alpha_would_cry_wolf():
    """The same A/A trials judged at one-sided 5 %: the simulation can tell a too-liberal test apart."""
    procs = ab_power.processes("A", 0, 3, 0.03) + ab_power.processes("B", 1000, 3, 0.03)
    strict, liberal = judge_ab(procs), judge_ab(procs, alpha=0.05)
    assert len(liberal.regressions) + len(liberal.improvements) > len(strict.regressions) + len(strict.improvements)


def test_html_report_has_a_section_per_side_and_the_verdict_on_top(tmp_path):
    report = judge_ab(side("A") + side("B", graph_breaks=1))
    process_report.html(report, tmp_path / "ab.html")
    page = (tmp_path / "ab.html").read_text()
    assert page.index('class="gate fail"') < page.index("(A · ") < page.index("(B · ")
    assert "regression gpt2-train-inductor_default-amp_bf16: graph breaks 0 -&gt; 1" in page


def test_records_are_checked_as_the_gate_checks_them():
    """A NaN speedup on an ok record is a failed cell (perfgate.core.validate); xdist-unfit timings cannot be
    compared at all."""
    nan = judge_ab(side("A") + side("B", per_process=lambda rep: {"speedup": float("nan")} if rep == 2 else {}))
    (finding,) = findings(nan)
    assert finding.metric == "status" and "failed in 1 of 3 processes: bad figures: " in finding.message
    unfit = judge_ab(side("A") + side("B", unfit="2 xdist workers shared 2 CPU cores"))
    assert unfit.exit_code == 2 and "3 record(s) are unfit for a timing verdict (B-1" in unfit.errors[0]
