"""`perfgate settle` (perfgate.judge.settle, perfgate.settle_run): which regressions of a gate report are
host-side, and that only those go to an A/B on the runner, on synthetic gate runs written as the plugin
writes report.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from perfgate import ab_run
from perfgate.cli import main
from perfgate.judge import gate
from perfgate.judge.baseline import build_baseline
from perfgate.judge.settle import read_report, settlement
from perfgate.judge.triage import PERF_TESTS
from perfgate.render.report import SETTLE_HINT, markdown
from perfgate.render.report_files import write_reports

import synthetic as syn

REPO = Path(__file__).resolve().parents[1]
KEY = (syn.H100, "pr")
GPT2, VIT = "gpt2-train-inductor_default-amp_bf16", "vit_b16-infer-inductor_default-amp_bf16"
GPT2_NODE = f"{PERF_TESTS}::test_train_step[gpt2-inductor_default-amp_bf16]"
QUIET = {"noise": 0.005, "run_noise": 0.002}


@pytest.fixture(scope="module")
def base():
    return build_baseline(syn.runs(3, first_seed=11, **QUIET))[KEY]


def report_file(tmp_path: Path, base: dict, overrides: dict, name: str = "report.json") -> Path:
    """The report.json of a quiet run with `overrides` ({cell: fields}), as pytest --perf-report writes it."""
    outcome = gate.GateOutcome([gate.compare(syn.run(42, overrides=overrides, **QUIET), base)], [])
    path = tmp_path / name
    write_reports(outcome, None, str(path))
    return path


def slower(base: dict, cell: str, wall: float = 0.85, device: float = 1.0) -> dict:
    """Fields of `cell` with its wall speedup, and its device speedup, scaled."""
    was = base["cells"][cell]
    return {"speedup": was["speedup"] * wall, "device_speedup": was["device_speedup"] * device}


def test_a_wall_loss_with_the_device_clock_still_is_host_side(tmp_path, base):
    found = settlement(read_report(report_file(tmp_path, base, {GPT2: slower(base, GPT2)})))
    assert (found.host_side, found.cells, found.standing, found.exit_code) == ((GPT2_NODE,), (GPT2,), (), 0)


@pytest.mark.parametrize(
    "case",
    ["device moved", "a graph break too", "one host-side cell beside a real one"],
)
def test_a_regression_that_is_not_host_side_stands(tmp_path, base, case):
    overrides = {
        "device moved": {GPT2: slower(base, GPT2, device=0.85)},
        "a graph break too": {GPT2: {**slower(base, GPT2), "graph_breaks": 1}},
        "one host-side cell beside a real one": {GPT2: slower(base, GPT2), VIT: slower(base, VIT, 0.8, 0.8)},
    }[case]
    found = settlement(read_report(report_file(tmp_path, base, overrides)))
    assert found.exit_code == 1 and found.standing
    assert all("(real)" in line or "graph_breaks" in line for line in found.standing)


def test_a_clean_run_settles_nothing_and_a_report_that_judged_nothing_exits_2(tmp_path, base):
    assert settlement(read_report(report_file(tmp_path, base, {}))).exit_code == 0
    path = tmp_path / "cannot.json"
    write_reports(gate.GateOutcome([], ["no baseline at baselines/x.json"]), None, str(path))
    found = settlement(read_report(path))
    assert found.exit_code == 2 and "no baseline at baselines/x.json" in found.problem


@pytest.mark.parametrize("content, said", [(None, "cannot read"), ("{", "not JSON"), ('{"a": 1}', "not a gate report")])
def test_an_unreadable_report_is_refused_by_name(tmp_path, capsys, content, said):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    assert main(["settle", "--report", str(path), "--base", "HEAD"]) == 2
    err = capsys.readouterr().err
    assert said in err and str(path) in err


def test_settle_runs_the_host_side_cells_alone_ab_base_against_this_tree(tmp_path, base, monkeypatch, capsys):
    calls = []

    class Passed:
        exit_code = 0

    def fake_run_ab(out, progress, **kwargs):
        calls.append((out, kwargs))
        return Passed()

    monkeypatch.setattr(ab_run, "run_ab", fake_run_ab)
    monkeypatch.setattr("perfgate.render.ab_report.write", lambda report, out, *a: "A/B verdict\n")
    path = report_file(tmp_path, base, {GPT2: slower(base, GPT2)})
    argv = [
        "settle",
        "--report",
        str(path),
        "--base",
        "abc123",
        "--out",
        str(tmp_path / "s"),
        "--",
        "-p",
        "no:randomly",
    ]
    assert main(argv) == 0
    ((out, kwargs),) = calls
    assert out == tmp_path / "s" and kwargs["common"] == ["-p", "no:randomly", GPT2_NODE]
    a, b = kwargs["sides"]
    assert (a.label, a.rev, b.label, b.rev) == ("A", "abc123", "B", None)
    assert "1 host-side cell(s)" in capsys.readouterr().out
    # a real regression beside it: no A/B, exit 1; a test path among the args: refused by name, exit 2
    calls.clear()
    both = report_file(tmp_path, base, {GPT2: slower(base, GPT2), VIT: slower(base, VIT, 0.8, 0.8)}, "both.json")
    assert main(["settle", "--report", str(both), "--base", "abc123"]) == 1 and not calls
    for tests in (str(REPO / "perftests"), str(REPO / PERF_TESTS), GPT2_NODE):
        assert main(["settle", "--report", str(path), "--base", "abc123", "--", tests]) == 2 and not calls
        assert "settle adds the host-side cells' node ids itself" in capsys.readouterr().err
    # an option's value that is a folder is not a test path
    argv[-2:] = ["--perf-cache-dir", str(tmp_path)]
    assert main(argv) == 0 and calls[-1][1]["common"] == ["--perf-cache-dir", str(tmp_path), GPT2_NODE]


def test_the_report_json_keeps_what_settle_reads(tmp_path, base):
    """settle reads rows' clocks and tripped metrics, the triage's node ids and the regressions' metrics."""
    data = json.loads(report_file(tmp_path, base, {GPT2: slower(base, GPT2)}).read_text())
    (report,) = data["reports"]
    row = next(r for r in report["rows"] if r["cell"] == GPT2)
    assert {"metric", "change", "threshold"} <= set(row["clocks"][0]) and row["tripped"]
    assert report["triage"][0]["node_id"] == GPT2_NODE and report["regressions"][0]["metric"] == "speedup"


def test_the_gate_report_points_a_host_side_cell_to_settle(base):
    records = syn.run(42, overrides={GPT2: slower(base, GPT2)}, **QUIET)
    assert SETTLE_HINT in markdown(gate.compare(records, base))
    real = syn.run(42, overrides={GPT2: slower(base, GPT2, device=0.85)}, **QUIET)
    assert SETTLE_HINT not in markdown(gate.compare(real, base))


def test_a_stopped_settle_says_where_its_measurements_are(tmp_path, base, monkeypatch, capsys):
    def stopped(out, progress, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(ab_run, "run_ab", stopped)
    path = report_file(tmp_path, base, {GPT2: slower(base, GPT2)})
    assert main(["settle", "--report", str(path), "--base", "abc", "--out", str(tmp_path / "s")]) == 2
    assert f"perfgate ab --resume {tmp_path / 's'} carries on" in capsys.readouterr().err


@pytest.mark.parametrize(
    "device, held",
    [
        ({"metric": "device_speedup", "change": -0.01, "threshold": 0.025}, True),
        ({"metric": "device_speedup", "change": -0.03, "threshold": 0.045}, True),  # within its line
        ({"metric": "device_speedup", "change": -0.03, "threshold": 0.025}, False),  # past its line, no finding counted
        ({"metric": "compute_speedup", "change": -0.03, "threshold": 0.025}, False),  # a data-parallel cell's
        ({"metric": "device_speedup", "change": None, "threshold": None}, False),  # not compared: no evidence
    ],
)
def test_a_device_clock_holds_only_if_it_was_compared_and_stayed_above_its_threshold(device, held):
    from perfgate.judge.settle import _device_held

    row = {"tripped": ["speedup"], "clocks": [{"metric": "speedup", "change": -0.15, "threshold": 0.03}, device]}
    assert _device_held(row) is held
