"""perfgate.plugin.bench_sink against the installed pytest-benchmark: it feeds the fixture through two private
names, so a version that moves them must fail here, by name, rather than drop the data quietly."""

import json
from importlib.metadata import version

from perfgate.plugin.bench_sink import PRIVATE

INNER = """
from perfgate.plugin.bench_sink import EXTRA_INFO, PRIVATE, BenchmarkSink
from perfgate.core.matrix import Cell


def test_sink(benchmark):
    missing = [name for name in PRIVATE if not hasattr(benchmark, name)]
    assert not missing, f"MISSING {missing}"
    sink = BenchmarkSink(benchmark, Cell("mlp", "train", "aot_eager", "fp32", "cpu"))
    for ms in (2.0, 3.0, 4.0):
        sink.add(ms)
    sink.annotate(dict.fromkeys(EXTRA_INFO, 1.5))
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
    (bench,) = json.loads((pytester.path / "b.json").read_text())["benchmarks"]
    assert bench["stats"]["data"] == [0.002, 0.003, 0.004]  # ms per step in, seconds out
    assert bench["group"] == "mlp-train" and bench["extra_info"]["speedup"] == 1.5
