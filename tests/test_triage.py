"""The triage line of each flagged cell (perfgate.judge.triage) on synthetic gate runs, and the test names it
assumes of perftests/."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from perfgate.judge import gate
from perfgate.judge.baseline import build_baseline
from perfgate.judge.triage import PERF_TESTS, TEST_OF_PHASE, triage
from perfgate.render.report import markdown

import synthetic as syn

REPO = Path(__file__).resolve().parents[1]
KEY = (syn.H100, "pr")
GPT2 = "gpt2-train-inductor_default-amp_bf16"
QUIET = {"noise": 0.005, "run_noise": 0.002}


@pytest.fixture(scope="module")
def base():
    return build_baseline(syn.runs(3, first_seed=11, **QUIET))[KEY]


def flagged(base, **fields) -> list:
    """The triage of a quiet run whose gpt2 train cell is 15 % slower on the wall clock, with `fields`."""
    wall, no_device = base["cells"][GPT2]["speedup"] * 0.85, fields.pop("no_device", False)
    records = syn.run(42, overrides={GPT2: {"speedup": wall, **fields}}, **QUIET)
    if no_device:
        records = [syn.without_device(r) if r["cell"] == GPT2 else r for r in records]
    return triage(gate.compare(records, base))


@pytest.mark.parametrize(
    "case, kind",
    [
        ("device-moved", "real"),
        ("device-still", "host-side"),
        ("transformers-differs", "environment"),
        ("no-device-clock", "wall only"),
    ],
)
def test_each_flagged_cell_is_classified_by_its_evidence(base, case, kind):
    device = base["cells"][GPT2]["device_speedup"]
    fields = {
        "device-moved": {"device_speedup": device * 0.85},
        "device-still": {"device_speedup": device},
        "transformers-differs": {"environment": {**syn.env(), "transformers": "9.0.0"}},
        "no-device-clock": {"device_speedup": device, "no_device": True},
    }[case]
    lines = flagged(base, **fields)
    assert [(t.cell, t.kind) for t in lines] == [(GPT2, kind)]
    line = lines[0]
    assert line.node_id == f"{PERF_TESTS}::test_train_step[gpt2-inductor_default-amp_bf16]"
    assert line.command.startswith(f"python -m pytest '{line.node_id}' -p no:randomly --perf-baseline baselines")
    assert line.env["gpu"] == "NVIDIA H100 80GB HBM3"
    if kind == "environment":
        assert "transformers" in line.why and "9.0.0" in line.why


def test_a_baseline_measured_with_cupti_left_attached_is_named_as_the_environment(base):
    """Runs before perfgate detached CUPTI recorded no cupti_teardown; a run that did so differs from them in how
    its host-bound steps were timed, which the triage says rather than call the change real."""
    assert "cupti_teardown" not in base["versions"]
    (line,) = flagged(base, environment={**syn.env(), "cupti_teardown": "1"})
    assert line.kind == "environment" and "left it attached" in line.why
    (same,) = flagged(
        base,
        environment={**syn.env(), "cupti_teardown": "1"},
        device_speedup=base["cells"][GPT2]["device_speedup"] * 0.85,
    )
    assert same.kind == "environment"
    (broken,) = flagged(base, environment={**syn.env(), "cupti_teardown": "1"}, speedup=None, graph_breaks=2)
    assert broken.kind == "real"  # no clock tripped: how CUPTI was left does not explain a graph break
    later = {**base, "versions": {**base["versions"], "cupti_teardown": "1"}}
    (line,) = flagged(later, environment={**syn.env(), "cupti_teardown": "1"})
    assert line.kind != "environment"


def test_a_host_side_line_gives_the_host_probes_reading_against_the_baselines(base):
    (line,) = flagged(base, device_speedup=base["cells"][GPT2]["device_speedup"], host_probe_ms=syn.HOST_PROBE_MS * 1.5)
    assert line.kind == "host-side"
    assert line.why.endswith("; host probe 2.55 ms against the baseline's 1.70 ms (+50%: + is a slower host)")
    (unprobed,) = flagged(base, device_speedup=base["cells"][GPT2]["device_speedup"], host_probe_ms=None)
    assert "host probe" not in unprobed.why  # a record before schema 12: nothing to say


def test_the_gate_report_carries_a_triage_section(base):
    wall = base["cells"][GPT2]["speedup"] * 0.85
    report = gate.compare(syn.run(42, overrides={GPT2: {"speedup": wall}}, **QUIET), base)
    text = markdown(report)
    assert "Triage (what each flagged cell looks like" in text and "--perf-baseline baselines" in text


def test_the_test_names_match_perftests():
    source = (REPO / PERF_TESTS).read_text()
    found = dict(re.findall(r'@pytest\.mark\.perf_cells\("(\w+)"\)\s*\ndef (\w+)\(', source))
    assert found == TEST_OF_PHASE


def night(commit, **env) -> dict:
    return {
        "date": "2026-11-2x",
        "commit": commit,
        "cell": GPT2,
        "model": "gpt2",
        "phase": "train",
        "variant": "inductor_default",
        "precision": "amp_bf16",
        "device_kind": "gpu",
        "tier": "pr",
        "env": {"torch": "2.11.0", "transformers": "5.17.0", **env},
    }


@pytest.mark.parametrize(
    "good, bad, words",
    [
        (
            night("aaa111"),
            night("bbb222"),
            "perfgate bisect --good aaa111 --bad bbb222 --rule speedup --processes 3 -- "
            f"'{PERF_TESTS}::test_train_step[gpt2-inductor_default-amp_bf16]'",
        ),
        (night("aaa111"), night("bbb222", transformers="5.18.0"), "versions moved: transformers 5.17.0 → 5.18.0"),
        (night("aaa111"), night("bbb222", transformers="5.18.0"), "--rule speedup --processes 3 --"),
        (night("aaa111"), night("aaa111"), "the machine moved, not the code"),
        (night(None), night("bbb222"), "no commits recorded"),
        (night("aaa111"), night("bbb222", cupti_teardown="1"), "host-bound steps timed another way, no code"),
        (night("aaa111"), night("bbb222", cupti_teardown="1", torch="2.12.0"), "versions moved: torch 2.11.0 → 2.12.0"),
    ],
    ids=[
        "commits-differ",
        "versions-moved",
        "versions-moved-processes",
        "same-commit",
        "no-commit",
        "cupti-detached",
        "cupti-and-torch",
    ],
)
def test_a_nightly_change_point_names_the_command_that_would_settle_it(good, bad, words):
    from perfgate.judge.triage import bisect_hint

    text = bisect_hint([good, bad], [0, 1], 1)
    assert text.startswith("last good 2026-11-2x (") and words in text


def test_the_triage_command_names_the_baseline_the_run_was_gated_against(base, tmp_path):
    """A run gated against another baseline than baselines/ gets a command that measures against that one."""
    from perfgate.judge.baseline import write_baseline

    where = tmp_path / "refreshed"
    write_baseline(where / f"{syn.H100}_pr.json", base)
    wall = base["cells"][GPT2]["speedup"] * 0.85
    outcome = gate.gate_run(syn.run(42, overrides={GPT2: {"speedup": wall}}, **QUIET), str(where))
    (line,) = triage(outcome.reports[0])
    assert line.command.endswith(f"--perf-baseline {where}")
