"""perfgate.plugin.bench_sink against the installed pytest-benchmark: it feeds the fixture through two private
names, so a version that moves them must fail here, by name, rather than drop the data quietly; and
--benchmark-compare from run to run, which warned "machine_info is different" on every run."""

import json
import re
import warnings
from importlib.metadata import version

import pytest
from pytest_benchmark.logger import PytestBenchmarkWarning

from perfgate.plugin.bench_sink import PRIVATE

from tiny_suite import FAST, fixture

suite = fixture()

INNER = """
from perfgate.plugin.bench_sink import EXTRA_INFO, PRIVATE, BenchmarkSink
from perfgate.core.matrix import Cell


def test_sink(benchmark):
    missing = [name for name in PRIVATE if not hasattr(benchmark, name)]
    assert not missing, f"MISSING {missing}"
    sink = BenchmarkSink(benchmark, Cell("mlp", "train", "aot_eager", "fp32", "cpu"))
    sink.feed({**dict.fromkeys(EXTRA_INFO, 1.5), "eager_round_ms": [5.0, 6.0], "compiled_round_ms": [2.0, 3.0, 4.0]})
"""


def test_the_sink_fills_the_benchmark_fixture_through_its_private_names(pytester, monkeypatch):
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # the inner pytest is no xdist worker:
        monkeypatch.delenv(name, raising=False)  # pytest-benchmark would switch itself off
    pytester.makepyfile(test_inner=INNER)
    # A fixture the sink failed to claim warns "not used": an error here.
    out = pytester.runpytest_inprocess(
        "-p", "no:randomly", "--benchmark-json=b.json", "-W", "error::pytest_benchmark.logger.PytestBenchmarkWarning"
    )
    assert out.ret == 0, (
        f"pytest-benchmark {version('pytest-benchmark')} no longer has BenchmarkFixture's "
        f"{', '.join(PRIVATE)} as perfgate/plugin/bench_sink.py uses them:\n{out.stdout.str()}"
    )
    eager, compiled = json.loads((pytester.path / "b.json").read_text())["benchmarks"]
    assert eager["stats"]["data"] == [0.005, 0.006] and compiled["stats"]["data"] == [0.002, 0.003, 0.004]  # s
    assert (eager["name"], compiled["name"]) == ("test_sink[eager]", "test_sink[compiled]")
    assert {eager["group"], compiled["group"]} == {"cpu-mlp-train-aot_eager-fp32"}  # the cell id
    assert eager["extra_info"]["speedup"] == compiled["extra_info"]["speedup"] == 1.5
    assert compiled["extra_info"]["side"] == "compiled"


def test_benchmark_compare_run_to_run_warns_of_nothing_and_a_changed_machine_does_not_crash(suite, tmp_path):
    """A run of the tiny suite saved, then compared: pytest-benchmark checks machine_info at configure time, so
    the comparing runs need no cell (--collect-only, in this process). Storage outside the working directory
    (the pytester directory) too, where its warning that machine_info differs crashed pytest."""
    storage = tmp_path / "benchmarks"
    args = [*FAST, "-k", "infer", f"--benchmark-storage={storage}"]
    saved = suite.runpytest_subprocess(*args, "--benchmark-autosave")  # a cell runs: a process of its own
    assert saved.ret == 0, saved.stdout.str()
    (path,) = storage.rglob("0001_*.json")
    document = json.loads(path.read_text())
    assert [b["name"] for b in document["benchmarks"]] == [
        f"test_infer_step[cpu-mlp-aot_eager-fp32][{side}]" for side in ("eager", "compiled")
    ]
    # pytest-benchmark warns at configure time, before the inner pytest catches warnings: they reach this test.
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        again = suite.runpytest_inprocess(*args, "--benchmark-compare=0001", "--collect-only")
    assert again.ret == 0, again.stdout.str() + again.stderr.str()
    assert not [w for w in seen if issubclass(w.category, PytestBenchmarkWarning)], [str(w.message) for w in seen]
    document["machine_info"]["perfgate"]["machine"] = "another"
    path.write_text(json.dumps(document))
    with pytest.warns(
        PytestBenchmarkWarning, match=rf"machine_info is different.*\(location: {re.escape(str(storage))}\)"
    ):
        changed = suite.runpytest_inprocess(*args, "--benchmark-compare=0001", "--collect-only")
    assert changed.ret == 0 and "INTERNALERROR" not in changed.stdout.str() + changed.stderr.str()
