"""The counts of a step's work (perfgate.measure.counts) and their band rules (perfgate.judge.rules.CountBandRule):
a change that adds host work is caught by a count, on the CPU, in a real cell; counts repeat where nothing
changed; a baseline without counts (every committed one today) passes with a note."""

from __future__ import annotations

import dataclasses

import pytest

from perfgate.core.clocks import COUNTS, KERNELS, PY_CALLS, range_field
from perfgate.judge import gate
from perfgate.judge.baseline import build_baseline
from perfgate.judge.finding import AB, IMPROVEMENT, REGRESSION
from perfgate.judge.rules import CountBandRule
from perfgate.judge.triage import triage
from perfgate.render.wording import finding_json, finding_text

import synthetic as syn

KEY = (syn.H100, "pr")
GPT2 = "gpt2-train-inductor_default-amp_bf16"
QUIET = {"noise": 0.005, "run_noise": 0.002}
KERNELS_FIELD = KERNELS.field("compiled")


@pytest.fixture(scope="module")
def base():
    """A baseline of quiet runs whose gpt2 train compiled step runs 380 kernels; the other cells count nothing."""
    runs = syn.runs(3, first_seed=11, **QUIET)
    runs = [[{**r, KERNELS_FIELD: 380.0} if r["cell"] == GPT2 else r for r in run] for run in runs]
    return build_baseline(runs)[KEY]


def _run(**fields) -> list[dict]:
    return syn.run(42, overrides={GPT2: fields}, **QUIET)


def test_a_count_grown_past_its_band_fails_and_the_triage_line_names_it(base):
    report = gate.compare(_run(**{KERNELS_FIELD: 412.0}), base)
    (finding,) = [f for f in report.regressions if f.metric == KERNELS_FIELD]
    assert finding.message == "compiled step runs 412 GPU kernels, baseline 380 (+8.4%, past the ±0.5% band)"
    assert report.exit_code == 1 and gate.speedup_suspects(report) == []  # a count is never re-measured
    (line,) = triage(report)
    assert (line.kind, line.why) == ("real", finding.message)


def test_a_count_shrunk_past_its_band_asks_for_a_baseline_update_and_passes(base):
    report = gate.compare(_run(**{KERNELS_FIELD: 300.0}), base)
    (finding,) = [f for f in report.improvements if f.metric == KERNELS_FIELD]
    assert finding.kind == IMPROVEMENT and finding.message.endswith("refresh the baseline (perfgate baseline update)")
    assert report.exit_code == 0


def test_a_count_inside_its_band_passes_and_a_baseline_without_counts_says_so(base):
    inside = gate.compare(_run(**{KERNELS_FIELD: 381.0}), base)  # +0.26 %, inside kernels' +-0.5 %
    assert inside.exit_code == 0 and not [f for f in inside.improvements if f.metric == KERNELS_FIELD]
    counted = {c.field(side): 10.0 for c in COUNTS for side in ("eager", "compiled")}
    report = gate.compare(syn.run(42, overrides={c.id: counted for c in syn.cells()}, **QUIET), base)
    assert report.exit_code == 0
    # gpt2 train's baseline has its kernels alone: its other counts are unjudged too
    assert any(n.startswith(f"no baseline count for {len(syn.cells())} cell(s)") for n in report.notes)


def test_runs_that_disagree_on_a_count_are_named_before_a_baseline_is_made():
    from perfgate.judge.baseline import disagreements

    runs = syn.runs(3, first_seed=11, **QUIET)
    counted = [[{**r, KERNELS_FIELD: 380.0 + (i == 2) * 10} for r in run] for i, run in enumerate(runs)]
    (line, *_) = [text for text in disagreements(counted) if KERNELS_FIELD in text]
    assert "380 (2 runs), 390 (1 run); the baseline judges compiled_kernels from the runs' range 380-390" in line


def test_the_warning_reads_the_runs_the_fold_keeps():
    """A run that counted over other steps than the last run's folds no count, so it is no disagreement."""
    from perfgate.judge.baseline import disagreements

    runs = syn.runs(3, first_seed=11, **QUIET)
    steps = [
        [{**r, KERNELS_FIELD: 400.0 if i == 0 else 380.0, "counts_steps": 3 if i == 0 else 2} for r in run]
        for i, run in enumerate(runs)
    ]
    assert not [text for text in disagreements(steps) if KERNELS_FIELD in text]
    assert range_field(KERNELS_FIELD) not in build_baseline(steps)[KEY]["cells"][GPT2]


def test_runs_within_the_band_of_their_median_keep_no_range_and_are_no_disagreement():
    """4756, 4756 and 4800 Python calls: +-1 % from 4756 holds all three, so the baseline keeps the median alone
    (a range to 4800 would have passed 4845, +1.9 %), and `baseline update` has nothing to say of them."""
    from perfgate.judge.baseline import disagreements

    calls = PY_CALLS.field("compiled")
    runs = syn.runs(3, first_seed=11, **QUIET)
    near = [[{**r, calls: 4800.0 if i == 2 else 4756.0} for r in run] for i, run in enumerate(runs)]
    cell = build_baseline(near)[KEY]["cells"][GPT2]
    assert cell[calls] == 4756.0 and range_field(calls) not in cell
    assert not [text for text in disagreements(near) if calls in text]
    report = gate.compare(_run(**{calls: 4845.0}), build_baseline(near)[KEY])
    assert [f.metric for f in report.regressions] == [calls]


def test_a_baseline_of_whole_counts_keeps_its_median_inside_their_range():
    """Four runs' kernels 120000, 124461, 124463, 124463 (ints, as a hand-made file holds): their median 124462.0
    rounded to 4 significant digits was 124500, past the range's 124463, and the gate refused the file."""
    from perfgate.core.validate import baseline_cell_problems

    runs = syn.runs(4, first_seed=11, **QUIET)
    kernels = (120000, 124461, 124463, 124463)
    whole = [[{**r, KERNELS_FIELD: kernels[i]} for r in run] for i, run in enumerate(runs)]
    cell = build_baseline(whole)[KEY]["cells"][GPT2]
    assert (cell[KERNELS_FIELD], cell[range_field(KERNELS_FIELD)]) == (124462.0, [120000.0, 124463.0])
    assert baseline_cell_problems(cell) == []


def test_the_warning_leaves_out_the_runs_the_fold_leaves_out_at_another_batch():
    """Two ok runs at batch 16 that disagree, then a failed run at batch 32: the fold keeps the last run's batch
    (a failed cell, no counts), so the warning names no count range either."""
    from perfgate.judge.baseline import disagreements

    runs = syn.runs(3, first_seed=11, **QUIET)
    batches = [
        [
            {**r, KERNELS_FIELD: 380.0 + 20 * i, "batch": 16}
            if i < 2
            else {**r, "batch": 32, "status": "failed", "reason": "out of memory"}
            for r in run
        ]
        for i, run in enumerate(runs)
    ]
    assert build_baseline(batches)[KEY]["cells"][GPT2]["status"] == "failed"
    assert not [text for text in disagreements(batches) if KERNELS_FIELD in text]


def test_a_count_the_baselines_runs_disagreed_on_is_judged_from_the_nearer_end_of_their_range():
    """The captioner's compiled kernels follow the machine (docs/measuring.md): a baseline folded over machines
    that disagree keeps the range, so none of them reads red, and a step past its far end does."""
    runs = syn.runs(3, first_seed=11, **QUIET)
    counted = [[{**r, KERNELS_FIELD: 380.0 + (i == 2) * 10} for r in run] for i, run in enumerate(runs)]
    spanned = build_baseline(counted)[KEY]
    assert spanned["cells"][GPT2][range_field(KERNELS_FIELD)] == [380.0, 390.0]
    assert range_field(KERNELS_FIELD) not in build_baseline(runs)[KEY]["cells"][GPT2]  # agreeing runs: no range

    def judged(kernels: float):
        report = gate.compare(_run(**{KERNELS_FIELD: kernels}), spanned)
        return [f for f in report.regressions + report.improvements if f.metric == KERNELS_FIELD]

    assert judged(390.0) == judged(386.0) == judged(391.9) == []  # inside, or within the band of the far end
    (grown,) = judged(393.0)
    assert grown.kind == REGRESSION and grown.change == pytest.approx(393 / 390 - 1)
    assert "runs 393 GPU kernels, baseline 380-390 over its runs (+0.8%, past the ±0.5% band)" in finding_text(grown)
    assert finding_json(grown)["baseline_range"] == [380.0, 390.0]
    (shrunk,) = judged(370.0)
    assert shrunk.kind == IMPROVEMENT and shrunk.change == pytest.approx(370 / 380 - 1)
    # perfgate ab folds side A's processes alike: their range, said as A's
    assert "393 GPU kernels in B, 380-390 in A over its processes (+0.8%" in finding_text(
        dataclasses.replace(grown, sides=AB)
    )


def test_every_count_has_a_band_rule_on_each_side():
    bands = {r.metric: (r.threshold, r.apart) for r in gate.DEFAULT_RULES if isinstance(r, CountBandRule)}
    assert bands == {c.field(side): (c.threshold, c.apart) for c in COUNTS for side in ("eager", "compiled")}
    assert (
        CountBandRule(PY_CALLS.field("eager"))
        .check({"status": "ok", "eager_py_calls": 0.0}, {"status": "ok", "cell": "c", "eager_py_calls": 3.0})
        .kind
        == REGRESSION
    )  # from none to some


@pytest.mark.parametrize(
    ("base_way", "now_way", "change", "judged"),
    [
        ("warm", "warm", 0.012, REGRESSION),  # one more call a layer on gpt2's 12 (+1.15 %): caught alike
        ("cold", "cold", -0.012, IMPROVEMENT),
        ("cold", "warm", 0.012, None),  # compiled here against loaded: within the +-1.5 % apart
        ("warm", "partly warm", 0.012, None),
        ("warm", None, 0.012, None),  # a record that cannot say how its graphs came
        ("cold", "warm", 0.016, REGRESSION),
    ],
    ids=lambda v: str(v),
)
def test_python_calls_are_judged_tighter_where_both_graphs_came_alike(base_way, now_way, change, judged):
    ways = {"cold": (0, 4), "warm": (4, 0), "partly warm": (2, 2), None: (None, None)}

    def record(way, calls):
        hits, misses = ways[way]
        return {
            "status": "ok",
            "cell": "c",
            "compile_cache_hits": hits,
            "compile_cache_misses": misses,
            "compiled_py_calls": calls,
        }

    (rule,) = [r for r in gate.DEFAULT_RULES if getattr(r, "metric", "") == PY_CALLS.field("compiled")]
    finding = rule.check(record(base_way, 1000.0), record(now_way, 1000.0 * (1 + change)))
    assert (finding and finding.kind) == judged
    assert rule.band(record(base_way, 1.0), record(now_way, 1.0)) == (
        PY_CALLS.threshold if base_way == now_way and base_way in ("cold", "warm") else PY_CALLS.apart
    )


def test_a_baseline_of_runs_that_loaded_every_graph_judges_python_calls_at_the_alike_band():
    """The baseline keeps the runs' most cache hits and misses, so a cell whose every run loaded its graphs
    reads warm, and a warm run is held to +-1 %; a run that compiled its graphs gets +-1.5 %."""
    calls, warm, cold = (
        PY_CALLS.field("compiled"),
        {"compile_cache_hits": 3, "compile_cache_misses": 0},
        {
            "compile_cache_hits": 0,
            "compile_cache_misses": 3,
        },
    )
    runs = syn.runs(3, first_seed=11, **QUIET)
    counted = build_baseline([[{**r, **warm, calls: 1000.0, "counts_steps": 2} for r in run] for run in runs])[KEY]
    for way, judged in ((warm, REGRESSION), (cold, None)):
        report = gate.compare(_run(**way, **{calls: 1012.0, "counts_steps": 2}), counted)
        assert [f.kind for f in report.regressions if f.metric == calls] == ([judged] if judged else [])
    mixed = [[{**r, **(warm if i else cold), calls: 1000.0} for r in run] for i, run in enumerate(runs)]
    assert build_baseline(mixed)[KEY]["cells"][GPT2]["compile_cache_misses"] == 3  # one cold run: not warm


def test_counts_over_other_steps_than_the_baselines_are_not_compared_and_the_gate_says_so():
    runs = syn.runs(3, first_seed=11, **QUIET)
    steps = [
        [{**r, KERNELS_FIELD: 380.0 + 20 * (i == 2), "counts_steps": 3 - (i == 2)} for r in run]
        for i, run in enumerate(runs)
    ]
    counted = build_baseline(steps)[KEY]
    assert counted["cells"][GPT2]["counts_steps"] == 2 and counted["cells"][GPT2][KERNELS_FIELD] == 400.0
    report = gate.compare(_run(**{KERNELS_FIELD: 380.0, "counts_steps": 3}), counted)
    assert not [f for f in report.improvements if f.metric == KERNELS_FIELD]
    assert any("counted over other steps than the baseline's" in n for n in report.notes)


# ---------------------------------------------------------------------------------------------- a real cell


@pytest.fixture(scope="module")
def cells():
    """Infer cells of a 3-layer MLP (aot_eager, CPU; ~0.5 s each): as built, again, with one more Python call per
    layer, and with a graph break before each layer (the --perf-inject graph_break fault)."""
    pytest.importorskip("torch")
    from tiny_mlp import ENV, OPTIONS, mlp_spec
    from torch import nn

    from perfgate.core.fault import parse as parse_fault
    from perfgate.core.matrix import Cell
    from perfgate.measure.cell import run_cell

    class Called(nn.Module):
        """A layer reached through one more Python call."""

        def __init__(self, layer):
            super().__init__()
            self.layer = layer

        def forward(self, x):
            return self.layer(x)

    def mlp(wrap=lambda layer: layer):
        return nn.Sequential(*(wrap(layer) for layer in (nn.Linear(8, 16), nn.Linear(16, 16), nn.Linear(16, 2))))

    spec = mlp_spec(build=lambda c: mlp(), blocks=lambda m: list(m))
    called = dataclasses.replace(spec, build=lambda c: mlp(Called))
    cell = Cell("mlp", "infer", "aot_eager", "fp32", "cpu")
    broken = dataclasses.replace(OPTIONS, fault=parse_fault("graph_break"))
    runs = {
        "built": (spec, OPTIONS),
        "again": (spec, OPTIONS),
        "called": (called, OPTIONS),
        "broken": (spec, broken),
    }
    return {name: run_cell(s, cell, options, ENV) for name, (s, options) in runs.items()}


def _gate(base: dict, now: dict) -> gate.GateReport:
    baseline = next(iter(build_baseline([[base]]).values()))
    return gate.compare([now], baseline)


def _moved(report) -> dict[str, str]:
    return {f.metric: f.kind for f in [*report.regressions, *report.improvements] if isinstance(f.metric, str)}


def test_counts_repeat_exactly_where_nothing_changed_and_cost_little(cells):
    runs = cells
    built, again = runs["built"], runs["again"]
    fields = [f for c in COUNTS for f in c.fields]
    assert built["status"] == again["status"] == "ok", (built["reason"], again["reason"])
    assert {f: built[f] for f in fields} == {f: again[f] for f in fields}
    assert built["compiled_py_calls"] > 0 and built["compiled_aten_ops"] > 0 and built["compiled_dynamo_lookups"] == 1
    assert built["eager_kernels"] is None and "no CUDA device" in built["counts_note"]
    assert built["recompiles"] == 0  # the counting hooks are no new frames to dynamo
    assert built["stages"]["counts"] < 0.05 * built["wall_s"], built["stages"]


def test_one_more_python_call_per_layer_is_caught_by_the_eager_python_calls(cells):
    runs = cells
    report = _gate(runs["built"], runs["called"])
    (finding,) = [f for f in report.regressions if f.metric == "eager_py_calls"]
    grown = runs["called"]["eager_py_calls"] - runs["built"]["eager_py_calls"]
    assert grown >= 3  # one module call more per layer: __call__, _call_impl, forward at least
    assert finding.message.startswith(f"eager step makes {runs['called']['eager_py_calls']:,.0f} Python calls")


def test_a_graph_break_is_caught_by_the_compiled_counts(cells):
    runs = cells
    report = _gate(runs["built"], runs["broken"])
    moved = _moved(report)
    assert runs["broken"]["compiled_dynamo_lookups"] > runs["built"]["compiled_dynamo_lookups"]
    assert moved["compiled_dynamo_lookups"] == moved["compiled_py_calls"] == REGRESSION
    assert "eager_py_calls" not in moved  # eager runs no fault: its count held


def test_python_calls_on_a_thread_python_started_are_no_step_work_but_a_foreign_threads_are():
    """sys.monitoring (3.12+) sees every thread: a step's Python on autograd's device thread (started in C++)
    counts, a Python thread of its own (inductor's compile-pool timer) does not."""
    import _thread
    import threading

    from perfgate.measure.counts import step_thread_hook

    calls = [0]
    hook = step_thread_hook(calls)
    hook()
    python_thread = threading.Thread(target=hook)
    python_thread.start()
    python_thread.join()
    assert calls == [1]
    done = threading.Event()
    _thread.start_new_thread(lambda: (hook(), done.set()), ())  # a thread `threading` does not know, as autograd's
    assert done.wait(5)
    assert calls == [2]
