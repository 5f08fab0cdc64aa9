"""The pytest face end to end on a tiny MLP compiled with aot_eager on the CPU (seconds, not minutes)."""

import json
import re

import pytest

from perfgate.core.records_file import load_records
from perfgate.plugin.options import check_precompile, check_timing

from tiny_suite import FAST, fixture

pytest.importorskip("torch")
suite = fixture()


def _records(path):
    """One record per cell, as every reader takes them: the file also holds each cell's checkpoints."""
    return load_records([path])


def test_cells_run_and_stream_records(suite):
    results = suite.path / "r.jsonl"
    out = suite.runpytest_subprocess(*FAST, "-rA", f"--perf-results={results}", "--benchmark-json=b.json")
    out.assert_outcomes(passed=2)
    assert "torch.__trace" not in out.stdout.str()  # the captured logs -rA prints hold no structured trace
    records = {r["cell"]: r for r in _records(results)}
    assert set(records) == {"cpu-mlp-train-aot_eager-fp32", "cpu-mlp-infer-aot_eager-fp32"}
    for record in records.values():
        assert record["status"] == "ok" and record["numerics"] == "pass"
        assert record["graph_count"] >= 1 and record["recompiles"] == 0
        assert record["speedup_lo"] <= record["speedup"] <= record["speedup_hi"]
        assert len(record["compiled_round_ms"]) == record["rounds"] == 3
    bench = json.loads((suite.path / "b.json").read_text())["benchmarks"]
    assert len(bench) == 4 and all(len(b["stats"]["data"]) == 3 for b in bench)  # eager and compiled, per cell
    for b in bench:  # the record's own rounds, seconds per step
        side = b["name"].rsplit("[", 1)[1].rstrip("]")
        record = records[b["group"]]
        assert b["stats"]["data"] == [ms / 1e3 for ms in record[f"{side}_round_ms"]]
        assert b["extra_info"]["speedup"] == record["speedup"] and b["extra_info"]["side"] == side
    assert "perfgate" in json.loads((suite.path / "b.json").read_text())["machine_info"]


def test_a_planted_numerics_fault_fails_the_cell(suite):
    """(A planted graph break: test_a_planted_graph_break_is_counted_and_profiled, and the gate's count rule
    in test_saved_baseline_then_gate.)"""
    results = suite.path / "r.jsonl"
    out = suite.runpytest_subprocess(*FAST, "-k", "train", "--perf-inject=numerics:0.05", f"--perf-results={results}")
    (record,) = _records(results)
    out.assert_outcomes(failed=1)
    assert record["reason"].startswith("numerics:")


@pytest.mark.parametrize(
    "option, valid",
    [
        ("--perf-variants=inductor_fast", "inductor_default"),
        ("--perf-precisions=fp8", "amp_bf16"),
        ("--perf-shard=3/2", "1 <= I <= N"),
        ("--perf-rotate=0/9", "--perf-rotate='0/9': expected I/N"),
        ("--perf-inject=explode", "numerics"),
        ("--perf-inject=host_slow:nan", "finite number"),
        ("--perf-min-rounds=0", "rounds must be 1 or more"),
        ("--perf-precompile=0", "--perf-precompile=0: the number of processes must be 1 or more"),
        ("--perf-precompile=4", "--perf-precompile=4 needs --perf-cache-dir DIR"),
    ],
)
def test_bad_options_name_the_value_and_the_valid_ones(suite, option, valid):
    out = suite.runpytest_inprocess(option)
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    assert valid in out.stderr.str()


@pytest.mark.parametrize(
    "variable, value, valid",
    [
        ("PERFGATE_PAIRED_PREPARE", "together", "staggered, sequential"),
        ("PERFGATE_PAIRED_PIN", "all", "shared, off"),
    ],
    ids=["prepare", "pin"],
)
def test_a_paired_engine_setting_it_has_no_way_for_is_refused_naming_the_ways(
    suite, monkeypatch, variable, value, valid
):
    monkeypatch.setenv(variable, value)
    out = suite.runpytest_inprocess("--collect-only", "--perf-against-env=X=1")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    assert f"{variable}={value!r}: valid values are {valid}" in out.stderr.str()


@pytest.mark.parametrize(
    "min_rounds, max_rounds, round_ms, message",
    [
        (0, None, None, "--perf-min-rounds=0: rounds must be 1 or more"),
        (-5, None, None, "--perf-min-rounds=-5"),
        (None, 0, None, "--perf-max-rounds=0"),
        (1000, 2, None, "--perf-min-rounds=1000 is more than --perf-max-rounds=2"),
        (None, None, 0.0, "--perf-round-ms=0.0"),
        (None, None, float("nan"), "--perf-round-ms=nan"),
        (None, None, float("inf"), "--perf-round-ms=inf"),
    ],
)
def test_timing_options_that_cannot_mean_what_they_say_are_refused(min_rounds, max_rounds, round_ms, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_timing(min_rounds, max_rounds, round_ms)


def test_timing_options_in_range_pass():
    check_timing(1, 1, 0.5)
    check_timing(50, None, None)  # max follows a larger min (TimingPlan.replace), as documented
    check_timing(None, None, None)


def test_missing_baseline_cannot_pass(suite):
    (suite.path / "baselines").mkdir()  # the directory exists, the environment's file in it does not
    out = suite.runpytest_subprocess(*FAST, "-k", "infer", f"--perf-baseline={suite.path / 'baselines'}")
    assert out.ret == 2
    out.stdout.fnmatch_lines(["*cannot compare*baselines/cpu-*_nightly.json*"])


def test_saved_baseline_then_gate(suite):
    """The first run also has a stray file beside its results, which must not stop the session end."""
    base, results = suite.path / "baselines", suite.path / "r.jsonl"
    (suite.path / "r-crashed.jsonl").write_text("not json\n")  # shares the stem, belongs to no session
    first = suite.runpytest_subprocess(
        *FAST, "-k", "infer", f"--perf-results={results}", f"--perf-save-baseline={base}"
    )
    first.assert_outcomes(passed=1)
    assert first.ret == 0
    (saved,) = base.glob("*.json")
    assert saved.name.startswith("cpu-") and saved.name.endswith("_nightly.json")
    assert "cpu-mlp-infer-aot_eager-fp32" in json.loads(saved.read_text())["cells"]
    gated = suite.runpytest_subprocess(
        *FAST,
        "-k",
        "infer",
        "--perf-inject=graph_break",
        f"--perf-baseline={base}",
        f"--perf-report={suite.path / 'rep'}",
    )
    assert gated.ret == 1  # graph breaks went up: a regression whatever the timing noise
    assert "graph breaks 0 -> 3" in (suite.path / "rep" / "report.md").read_text()
    why = suite.path / "rep" / "why" / "cpu-mlp-infer-aot_eager-fp32"
    gated.stdout.fnmatch_lines([f"*why-artifacts for cpu-mlp-infer-aot_eager-fp32: {why}*"])
    assert "graph break" in (why / "compile.log").read_text().lower()  # TORCH_LOGS graph_breaks said why


def test_a_planted_graph_break_is_counted_and_profiled(suite):
    out = suite.runpytest_subprocess(
        *FAST,
        "-k",
        "train",
        "--perf-inject=graph_break",
        f"--perf-profile={suite.path / 'why'}",
        f"--perf-results={suite.path / 'r.jsonl'}",
    )
    out.assert_outcomes(passed=1)
    why = suite.path / "why" / "cpu-mlp-train-aot_eager-fp32"
    for name in ("trace-eager.json", "trace-compiled.json"):
        events = json.loads((why / name).read_text())["traceEvents"]
        assert any("aten::" in str(e.get("name", "")) for e in events)
    assert "graph break" in (why / "compile.log").read_text().lower()
    (record,) = _records(suite.path / "r.jsonl")
    assert record["graph_breaks"] >= 3 and record["graph_count"] >= 3
    assert record["why"]["dir"] == str(why)


def _collected(suite, *options) -> set[str]:
    out = suite.runpytest_inprocess("--collect-only", "-q", "-m", "gpu", *options)
    return {line for line in out.stdout.lines if "::" in line}


def test_shards_split_the_matrix_without_overlap(suite):
    ids = [_collected(suite, f"--perf-shard={shard}") for shard in ("1/2", "2/2")]
    assert ids[0] and ids[1] and not ids[0] & ids[1]
    everything = suite.runpytest_inprocess("--collect-only", "-q", "-m", "gpu")
    assert ids[0] | ids[1] == {line for line in everything.stdout.lines if "::" in line}
    # what the run expects to cost, said before the first cell: no history here, so every cost is a prior
    n = len(ids[0] | ids[1])
    everything.stdout.fnmatch_lines(
        [
            f"perfgate: {n} cell(s) planned ({n} on a GPU), about *:* expected in one "
            f"process: 0 from the costs history, {n} from priors per variant*"
        ]
    )


def test_a_kept_caches_markers_change_no_shard(suite, tmp_path):
    """Two runners' caches may hold different compiles; their shards must not differ for it. The markers of an
    earlier precompile price a cell warm for the ETA and one host's order (max-autotune's train cells here: 77 s
    where their cold prior is 288 s), never for the deal."""
    import re

    from perfgate.measure import precompiled

    cache = tmp_path / "cache"
    before = [_collected(suite, f"--perf-shard={i}/2", f"--perf-cache-dir={cache}") for i in (1, 2)]
    held = []
    for line in before[0] | before[1]:
        phase, model, variant, precision = re.search(r"test_(\w+)_step\[(\w+)-(\w+)-(\w+)\]", line).groups()
        if phase == "train" and variant.startswith("inductor_max_autotune"):
            held.append({"cell": f"{model}-{phase}-{variant}-{precision}", "status": "ok"})
    precompiled.mark(held, str(cache), {line["cell"]: "0" * 64 for line in held})
    assert held and precompiled.marked(str(cache)) == {line["cell"] for line in held}
    after = [_collected(suite, f"--perf-shard={i}/2", f"--perf-cache-dir={cache}") for i in (1, 2)]
    assert after == before


def test_shards_dealt_by_one_costs_file_split_the_matrix_without_overlap(suite, tmp_path):
    """perfgate deal's way: every shard reads one copy of the kept cache's costs (--perf-costs FILE), a slow cell
    among them, and the shards still cover every cell once, the slow cell's shard holding fewer."""
    everything = _collected(suite)
    slow = next(line for line in sorted(everything) if "test_train_step[" in line)
    model, variant, precision = slow.split("[")[1].rstrip("]").split("-")
    kept = tmp_path / "costs.jsonl"
    kept.write_text(json.dumps({"cell": f"{model}-train-{variant}-{precision}", "seconds": 1e5, "paired": True}))
    shards = [_collected(suite, f"--perf-shard={i}/2", f"--perf-costs={kept}") for i in (1, 2)]
    assert not shards[0] & shards[1] and shards[0] | shards[1] == everything
    assert min(len(shard) for shard in shards if slow in shard) == 1  # it outweighs every other cell


def test_rotation_slices_cover_the_matrix_once_and_shards_split_a_slice(suite):
    """The nightly's two levels: --perf-rotate K/3 over three nights, --perf-shard I/2 over two runners."""
    slices = [_collected(suite, f"--perf-rotate={k}/3") for k in (1, 2, 3)]
    assert all(slices) and sum(map(len, slices)) == len(set().union(*slices))  # disjoint, none empty
    assert set().union(*slices) == _collected(suite)
    halves = [_collected(suite, "--perf-rotate=2/3", f"--perf-shard={i}/2") for i in (1, 2)]
    assert halves[0] and halves[1] and not halves[0] & halves[1] and halves[0] | halves[1] == slices[1]


KILLED_MID_CELL = """
import os

import perfgate.measure.pipeline

pytest_plugins = ["perfgate.plugin"]


def _killed(*args, **kwargs):
    os._exit(9)  # as `timeout` kills a GPU run mid-cell: nothing buffered in stdout is flushed


perfgate.measure.pipeline.warm_up = _killed  # the first timing of the eager side, after "numerics reference"
"""


@pytest.mark.parametrize("verbosity", [["-q"], []], ids=["quiet", "default"])
def test_progress_reaches_a_redirected_stdout_before_a_kill(suite, monkeypatch, verbosity):
    """stdout to a file, not a tty, no PYTHONUNBUFFERED: a line must leave pytest's capture and the buffer as
    it is written, or a run killed mid-cell (as a GPU run under `timeout` was) shows only its dots."""
    monkeypatch.delenv("PYTHONUNBUFFERED", raising=False)
    suite.makeconftest(KILLED_MID_CELL)
    out = suite.runpytest_subprocess(*FAST, *verbosity, "-k", "train")
    assert out.ret == 9
    out.stdout.fnmatch_lines(["[[]perfgate] cpu-mlp-train-aot_eager-fp32: numerics reference"])


def test_precompile_refuses_xdist_workers_that_would_each_fill_the_cache():
    with pytest.raises(
        ValueError,
        match=re.escape(
            "--perf-precompile=4 does not run under -n 2: precompile in a step of its own (add --collect-only)"
        ),
    ):
        check_precompile(4, "cache", 2)
    check_precompile(4, "cache", None)  # in range: no error


def test_precompile_says_when_no_selected_cell_compiles_with_inductor(suite, tmp_path):
    out = suite.runpytest_inprocess(*FAST, "--collect-only", "--perf-precompile=2", f"--perf-cache-dir={tmp_path}")
    out.stdout.fnmatch_lines(["*--perf-precompile: no selected cell compiles with inductor; nothing to do*"])


def test_a_session_perfgate_deal_dealt_cells_to_never_precompiles(suite, tmp_path, monkeypatch):
    """deal precompiles once before its sessions; a --perf-precompile from a config file still reaches each
    session, whose own precompile would remove the picks other sessions' cells had just timed."""
    monkeypatch.setenv("PERFGATE_DEALT", "1")
    out = suite.runpytest_inprocess(*FAST, "--collect-only", "--perf-precompile=2", f"--perf-cache-dir={tmp_path}")
    out.stdout.fnmatch_lines(["*--perf-precompile: skipped in a session of perfgate deal*"])


def test_precompiled_cells_find_their_compiles_and_their_records_say_so(suite, tmp_path):
    """End to end on an inductor CPU cell: the line that says what was compiled, its .precompile.json,
    and the cell's first call warm from the kept cache."""
    from tiny_suite import TINY_SUITE

    suite.makepyfile(test_tiny=TINY_SUITE.replace('cpu_variants=("aot_eager",)', 'cpu_variants=("inductor_default",)'))
    results = tmp_path / "r.jsonl"
    out = suite.runpytest_subprocess(
        *FAST, "-k", "infer", "--perf-precompile=2", f"--perf-cache-dir={tmp_path / 'c'}", f"--perf-results={results}"
    )
    out.assert_outcomes(passed=1)
    out.stdout.fnmatch_lines(["*perfgate: precompiled 1 of 1 cell(s) in *:* with 1 process(es)*"])
    (line,) = json.loads((tmp_path / "r.precompile.json").read_text())
    assert line["cell"] == "cpu-mlp-infer-inductor_default-fp32" and line["status"] == "ok"
    (record,) = _records(results)
    assert record["compile_cache_hits"] > 0 and record["compile_cache_misses"] == 0
    assert record["process"] == "pytest"  # the PR workflow's way: precompiled in children, measured in pytest
    (kept,) = (tmp_path / "c" / "costs.jsonl").read_text().splitlines()  # what a later dealt run deals by
    assert json.loads(kept) == {"cell": record["cell"], "paired": False, "seconds": round(record["wall_s"], 2)}


def test_loadgroup_hands_out_the_dearest_cells_first():
    """Under --dist loadgroup each ungrouped test is a unit xdist hands out in collected order as workers free
    up: dearest first (LPT), so two long compiles start on two GPUs at once; what is no cell goes last."""
    from perfgate.core.matrix import Cell
    from perfgate.plugin.selection import CELL_KEY, longest_first

    class Item:
        def __init__(self, cell):
            self.name, self.stash = (cell.model if cell else "other"), ({CELL_KEY: cell} if cell else {})

    cells = {name: Cell(name, "train", "inductor_default", "amp_bf16", "gpu") for name in ("a", "b", "c", "d")}
    costs = {cells["a"].id: 50.0, cells["b"].id: 10.0, cells["c"].id: 60.0, cells["d"].id: 50.0}
    items = [Item(None), *(Item(cell) for cell in cells.values())]
    assert [item.name for item in longest_first(items, costs)] == ["c", "a", "d", "b", "other"]
    # Two workers: each starts on one of the 2 dearest with one of the 2 cheapest queued behind it (xdist keeps
    # one queued behind the one running), the cheapest behind the dearest; then the rest, dearest first.
    more = {name: Cell(name, "train", "inductor_default", "amp_bf16", "gpu") for name in "efg"}
    costs |= {more["e"].id: 5.0, more["f"].id: 40.0, more["g"].id: 20.0}
    items += [Item(cell) for cell in more.values()]
    ordered = [item.name for item in longest_first(items, costs, workers=2)]
    assert ordered == ["c", "a", "e", "b", "d", "f", "g", "other"]
    # Fewer than 2 a worker: what is left after the dearest queues cheapest first all the same
    assert [item.name for item in longest_first(items[:5], costs, workers=2)] == ["c", "a", "b", "d", "other"]
    # Fewer cells than workers: every item is kept, the cells first (the tail once lost what the head had not)
    assert [item.name for item in longest_first(items[:3], costs, workers=4)] == ["a", "b", "other"]
