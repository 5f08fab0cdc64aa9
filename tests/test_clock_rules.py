"""The device and host clocks in the gate: a loss on each caught alone, a clock that breaks, an old baseline,
a foreign host CPU (wall advisories for host-bound cells only), the confirm round over every clock, and
the robust run-to-run spread. Synthetic runs are quiet on the wall clock (0.3 % run-to-run) so that no wall
trip mixes into what these tests check; the device and host clocks carry the factory's noise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from perfgate.core.stats import rel_spread
from perfgate.judge import gate
from perfgate.judge.baseline import build_baseline
from perfgate.judge.finding import ADVISORY
from perfgate.judge.rules import HostTimeRule, SpeedupRule

import synthetic as syn

KEY = (syn.H100, "pr")
CELLS = syn.cells()
IDS = [c.id for c in CELLS]
RESNET, BERT = IDS[0], "bert_base-train-inductor_default-amp_bf16"  # 61 % busy (host-bound), 93 % (device)
GPT2_INFER = "gpt2-infer-inductor_default-amp_bf16"
QUIET = {"noise": 0.005, "run_noise": 0.002}


def now(seed=42, **kwargs):
    return syn.run(seed, **{**QUIET, **kwargs})


@pytest.fixture(scope="module")
def base():
    return build_baseline(syn.runs(5, first_seed=11, **QUIET))[KEY]


def device_loss(ids, factor):
    """Overrides that make the device ratio of `ids` truly `factor` times the profile's (0.97 = 3 % loss)."""
    return {
        cid: {"device_speedup": syn.PROFILE[m][1] * syn.EAGER_BUSY / syn.BUSY[m] * factor}
        for cid in ids
        for m in [cid.split("-")[0]]
    }


def kinds(report, pool=("regressions", "improvements", "advisories")):
    return sorted((f.cell, f.metric, f.kind) for name in pool for f in getattr(report, name))


def row(report, cid):
    return next(r for r in report.rows if r.cell == cid)


def test_a_three_percent_device_loss_is_caught_and_aa_is_not(base):
    assert kinds(gate.compare(now(42), base)) == []
    touched = [RESNET, BERT, GPT2_INFER]
    report = gate.compare(now(42, overrides=device_loss(touched, 0.97)), base)
    assert kinds(report) == sorted((c, "device_speedup", "regression") for c in touched)
    assert gate.speedup_suspects(report) == sorted(touched)
    clock = row(report, RESNET).clock("device_speedup")
    assert clock.change == pytest.approx(-0.03, abs=0.006) and clock.threshold < 0.03 and not clock.noise_limited
    assert row(report, RESNET).tripped == ("device_speedup",)
    assert "device speedup" in report.regressions[0].message


def test_host_time_up_twenty_percent_is_caught_while_device_is_unchanged(base):
    report = gate.compare(now(42, overrides={BERT: {"host_growth": 1.2}}), base)
    assert kinds(report) == [(BERT, "host_speedup", "regression")]
    (finding,) = report.regressions
    assert finding.message.startswith("compiled host time per step relative to eager +")
    clock = row(report, BERT).clock("host_speedup")
    # The line: at most the threshold (+15 %), never under half of it in log terms.
    assert clock.change == pytest.approx(0.2, abs=0.06) and math.sqrt(1.15) - 1 <= clock.threshold <= 0.15
    assert abs(row(report, BERT).clock("device_speedup").change) < 0.01
    assert gate.compare(now(42, overrides={BERT: {"host_growth": 1.05}}), base).passed


def test_a_clock_missing_now_is_a_regression(base):
    run = now(42)
    run[0] = syn.without_device(run[0], "profiler error: CUPTI_ERROR_NOT_INITIALIZED")
    report = gate.compare(run, base)
    assert kinds(report) == [(RESNET, "device_speedup", "regression")]
    assert report.regressions[0].message == "device clock missing now: profiler error: CUPTI_ERROR_NOT_INITIALIZED"
    assert report.exit_code == 1 and gate.speedup_suspects(report) == [RESNET]


def test_a_record_of_an_older_schema_missing_a_clock_is_named_as_such(base):
    """Issue 57: a schema-2 record read "device clock missing now: no reason given"."""
    run = now(42)
    run[0] = syn.before_clocks(run[0])
    messages = {f.metric: f.message for f in gate.compare(run, base).regressions}
    assert messages == {
        "device_speedup": "device clock missing now: older record schema 2",
        "host_speedup": "host clock missing now: older record schema 2",
    }


def test_a_baseline_without_a_clock_does_not_compare_it_and_says_so():
    old = build_baseline([[syn.before_clocks(r) for r in run] for run in syn.runs(3, first_seed=11, **QUIET)])[KEY]
    assert old["host_cpus"] == [syn.XEON] and old["cells"][RESNET]["device_speedup"] is None
    report = gate.compare(now(42, overrides=device_loss([RESNET], 0.8)), old)
    assert report.passed and kinds(report) == []
    assert row(report, RESNET).clock("device_speedup").threshold is None
    notes = [n for n in report.notes if "predates" in n]
    assert [n.split(" clock")[0] for n in notes] == [
        "the baseline predates the device",
        "the baseline predates the host",
    ]
    assert "10 cell(s)" in notes[0] and "remake the baseline" in notes[0]


def test_cpu_records_have_no_device_clock_and_pass():
    cpu = [syn.without_device(r) for r in syn.run(1, **QUIET)]
    base = build_baseline([[syn.without_device(r) for r in run] for run in syn.runs(3, first_seed=11, **QUIET)])[KEY]
    assert base["cells"][RESNET]["bound"] is None and base["cells"][RESNET]["host_speedup_spread"] is not None
    report = gate.compare(cpu, base)
    assert report.passed and not [n for n in report.notes if "predates" in n]


def test_a_foreign_host_cpu_turns_wall_findings_of_host_bound_cells_into_advisories(base):
    epyc = syn.env(cpu_model=syn.EPYC)
    slower = {cid: {"speedup": syn.PROFILE[cid.split("-")[0]][1] * 0.85} for cid in (RESNET, BERT)}
    slower[BERT]["busy_compiled"] = 0.95  # still device-bound: its kernels got slower
    run = now(42, environment=epyc, overrides={**slower, GPT2_INFER: device_loss([GPT2_INFER], 0.95)[GPT2_INFER]})
    report = gate.compare(run, base)
    assert (row(report, RESNET).bound, row(report, BERT).bound) == ("host", "device")
    assert kinds(report, ["advisories"]) == [(RESNET, "speedup", ADVISORY)]
    # The device-bound cell and the device clock gate as usual.
    assert kinds(report, ["regressions"]) == [
        (BERT, "speedup", "regression"),
        (GPT2_INFER, "device_speedup", "regression"),
    ]
    assert row(report, RESNET).verdict == "advisory" and RESNET not in gate.speedup_suspects(report)
    assert syn.XEON in report.advisories[0].message and syn.EPYC in report.advisories[0].message
    note = next(n for n in report.notes if n.startswith("host CPU"))
    assert syn.EPYC in note and syn.XEON in note
    # On the baseline's own CPU the same loss fails the gate.
    same = gate.compare(now(42, overrides=slower), base)
    assert kinds(same) == [(BERT, "speedup", "regression"), (RESNET, "speedup", "regression")]


def test_a_run_measured_in_another_process_kind_than_the_baseline_says_so_and_gates_as_usual(base):
    """The baseline's runs ran in pytest's process (the factory's default); a run in the isolated worker gets a
    note naming both, and its verdicts are the same as in pytest's process."""
    worker = gate.compare(now(42, process="worker"), base)
    note = next(n for n in worker.notes if n.startswith("this run's cells ran in worker"))
    assert "the baseline's in pytest" in note and "--perf-isolate" in note
    same = gate.compare(now(42), base)
    assert not any(n.startswith("this run's cells ran in") for n in same.notes)
    assert worker.exit_code == same.exit_code and kinds(worker) == kinds(same)


def test_advisories_alone_pass_the_gate(base):
    run = now(
        42, environment=syn.env(cpu_model=syn.EPYC), overrides={RESNET: {"speedup": syn.PROFILE["resnet50"][1] * 0.8}}
    )
    report = gate.compare(run, base)
    assert report.passed and report.exit_code == 0 and len(report.advisories) == 1
    unknown = gate.compare(
        now(42, environment=syn.env(cpu_model=None), overrides={RESNET: {"speedup": syn.PROFILE["resnet50"][1] * 0.8}}),
        base,
    )
    assert not unknown.passed  # an unknown CPU is no evidence of a foreign one


def test_confirm_covers_the_device_and_host_clocks(base):
    first = gate.compare(now(42, overrides={**device_loss([RESNET], 0.96), BERT: {"host_growth": 1.3}}), base)
    assert kinds(first) == [(BERT, "host_speedup", "regression"), (RESNET, "device_speedup", "regression")]
    assert gate.speedup_suspects(first) == sorted([RESNET, BERT])
    # The re-measure: resnet50's device loss is real; bert's host time was a bad round.
    again = [r for r in now(43, overrides=device_loss([RESNET], 0.96)) if r["cell"] in (RESNET, BERT)]
    report = gate.confirm(first, again)
    assert kinds(report) == [(RESNET, "device_speedup", "regression")]
    assert f"confirmed for {RESNET} (device)" in report.notes[-1] and f"cleared for {BERT} (host)" in report.notes[-1]


def test_a_clock_that_trips_only_in_the_confirm_round_is_not_counted(base):
    first = gate.compare(now(42, overrides=device_loss([RESNET], 0.95)), base)
    assert gate.speedup_suspects(first) == [RESNET]
    # Re-measured: the device loss is gone, and the host clock trips for the first time.
    again = [r for r in now(43, overrides={RESNET: {"host_growth": 1.4}}) if r["cell"] == RESNET]
    report = gate.confirm(first, again)
    assert report.passed
    assert f"not counted: {RESNET} (host)" in report.notes[-1] and f"cleared for {RESNET} (device)" in report.notes[-2]


def test_thresholds_per_clock_are_configurable(base):
    run = now(42, overrides={**device_loss([RESNET], 0.96), BERT: {"host_growth": 1.25}})
    assert not gate.compare(run, base).passed
    assert gate.compare(run, base, gate.default_rules(device=0.06, host=0.40)).passed
    wall, device, compute, host = (r for r in gate.DEFAULT_RULES if isinstance(r, SpeedupRule))
    assert (compute.metric, compute.threshold, compute.phases) == ("compute_speedup", 0.025, ("ddp",))
    assert (wall.metric, wall.threshold, device.metric, device.threshold) == ("speedup", 0.05, "device_speedup", 0.025)
    assert isinstance(host, HostTimeRule) and host.threshold == 0.15
    assert host.log_threshold({}) == pytest.approx(-math.log(1 - (1 - 1 / 1.15)))  # host_speedup -13.0 %


def test_a_record_speedup_threshold_moves_the_wall_line_only():
    rule_wall, rule_device = SpeedupRule(), SpeedupRule("device_speedup", threshold=0.03)
    cur = {"gate": {"speedup_threshold": 0.2}}
    assert rule_wall.nominal_threshold(cur) == 0.2 and rule_device.nominal_threshold(cur) == 0.03


def test_robust_spread_ignores_one_outlier_run():
    # An H100 baseline's vit_b16 infer runs; the sample sd of their logs is 8.5 %.
    runs = [1.23, 1.23, 1.24, 1.50, 1.23]
    assert float(np.std(np.log(runs), ddof=1)) > 0.08
    assert rel_spread(runs) < 0.005
    # Without an outlier it estimates the sd: 1.4826 x the MAD x the small-sample factor.
    assert rel_spread([1.0, 1.01, 1.02]) == pytest.approx(1.4826 * 1.495 * math.log(1.02 / 1.01), rel=1e-6)
    assert rel_spread([2.0]) is None and rel_spread([]) is None


def test_robust_spread_is_about_unbiased_on_normal_runs():
    rng = np.random.default_rng(5)
    for n in (3, 5, 8, 12):
        estimates = [rel_spread(np.exp(rng.normal(0, 0.02, n))) for _ in range(3000)]
        assert np.mean(estimates) == pytest.approx(0.02, rel=0.08), n
