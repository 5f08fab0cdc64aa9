"""The pytest-benchmark sink: each compiled round's device-timed ms per step goes into the `benchmark`
fixture's stats, so its JSON, --benchmark-save and --benchmark-compare hold the same numbers as perfgate's
record (not a host-clock re-measurement of its own).

pytest-benchmark has no public way to take times measured elsewhere, so this module, and no other, uses
two of its private names (PRIVATE); tests/test_bench_sink.py fails when an installed version moves them.
"""

from __future__ import annotations

from perfgate.core.matrix import Cell

# BenchmarkFixture's private names used below: `_mode` (set, the fixture is in use) and `_make_stats`.
PRIVATE = ("_mode", "_make_stats")

# The record's fields copied into the benchmark's extra_info.
EXTRA_INFO = (
    "status",
    "reason",
    "eager_ms",
    "compiled_ms",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "compile_s",
    "compile_warm_s",
    "compile_artifacts_s",
    "graph_breaks",
    "recompiles",
    "numerics",
    "peak_mem_eager_mb",
    "peak_mem_compiled_mb",
    "steps_per_round",
)


class BenchmarkSink:
    """One cell's feed into the `benchmark` fixture; does nothing when the fixture is absent or disabled."""

    def __init__(self, benchmark, cell: Cell):
        self.benchmark = benchmark if benchmark is not None and not benchmark.disabled else None
        self.stats = None
        if self.benchmark is not None:
            self.benchmark.group = f"{cell.model}-{cell.phase}"
            # Claim the fixture as pedantic() would, so it neither warns "not used" nor can be used twice.
            self.benchmark._mode = "perfgate device-timed rounds"  # noqa: SLF001

    def add(self, ms_per_step: float) -> None:
        if self.benchmark is None:
            return
        if self.stats is None:
            self.stats = self.benchmark._make_stats(1)  # noqa: SLF001 - the fixture's own stats entry
        self.stats.update(ms_per_step / 1e3)  # pytest-benchmark keeps seconds

    def annotate(self, record: dict) -> None:
        if self.benchmark is None:
            return
        self.benchmark.extra_info.update({key: record[key] for key in EXTRA_INFO})
