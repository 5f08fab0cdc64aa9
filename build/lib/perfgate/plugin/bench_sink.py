"""The pytest-benchmark link: a cell's eager and compiled wall-clock rounds go into the `benchmark` fixture's stats
as two benchmarks, `<test>[eager]` and `<test>[compiled]`, with the speedup and its interval in extra_info, so its
JSON, --benchmark-save and --benchmark-compare hold the same numbers as perfgate's record (not a host-clock
re-measurement of its own); and its machine_info, which --benchmark-compare checks, says what perfgate's
environment is from the start of the session.

pytest-benchmark has no public way to take times measured elsewhere, so this module, and no other, uses two of
its private names (PRIVATE); tests/test_bench_sink.py fails when an installed version moves them. Imports no
torch: the environment comes from package metadata and nvidia-smi.
"""

from __future__ import annotations

import platform

from perfgate.core.host import gpu_query, package_version
from perfgate.core.matrix import Cell

# BenchmarkFixture's private names used below: `_mode` (set, the fixture is in use) and `_make_stats`.
PRIVATE = ("_mode", "_make_stats")
SIDES = ("eager", "compiled")
# The record's fields copied into the benchmarks' extra_info.
EXTRA_INFO = (
    "status",
    "reason",
    "eager_ms",
    "compiled_ms",
    "speedup",
    "speedup_lo",
    "speedup_hi",
    "device_speedup",
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
# What a timing depends on beyond pytest-benchmark's own machine_info (its CPU, python, host).
PACKAGES = ("torch", "triton", "pytorch-triton", "transformers", "timm")


def machine_info() -> dict:
    """perfgate's part of pytest-benchmark's machine_info: the same whenever it is asked in a session (at
    configure, where --benchmark-compare checks it, and at the end, where --benchmark-save stores it), and from
    run to run on one machine. Filled from the first cell's environment, it was missing at configure, so every
    --benchmark-compare warned "machine_info is different"."""
    packages = {name: package_version(name) for name in PACKAGES}
    gpus = gpu_query("name,driver_version")
    return {"packages": {k: v for k, v in packages.items() if v}, "gpus": gpus, "machine": platform.machine()}


class BenchmarkSink:
    """One cell's feed into the `benchmark` fixture; does nothing when the fixture is absent or disabled."""

    def __init__(self, benchmark, cell: Cell):
        self.benchmark = benchmark if benchmark is not None and not benchmark.disabled else None
        if self.benchmark is not None:
            self.benchmark.group = cell.id  # a cell's eager and compiled benchmarks side by side
            # Claim the fixture as pedantic() would, so it neither warns "not used" nor can be used twice.
            self.benchmark._mode = "perfgate wall-clock rounds"  # noqa: SLF001

    def feed(self, record: dict) -> None:
        """The record's wall-clock rounds (ms per step) as two benchmarks in seconds per step, one per side."""
        if self.benchmark is None:
            return
        self.benchmark.extra_info.update({key: record.get(key) for key in EXTRA_INFO})
        for side in SIDES:
            rounds = record.get(f"{side}_round_ms") or []
            if not rounds:
                continue  # a cell that failed before its timed rounds: nothing to compare
            stats = self.benchmark._make_stats(1)  # noqa: SLF001 - a stats entry of the fixture's session
            stats.name, stats.fullname = f"{stats.name}[{side}]", f"{stats.fullname}[{side}]"
            stats.extra_info = {**self.benchmark.extra_info, "side": side}
            for ms in rounds:
                stats.update(ms / 1e3)  # pytest-benchmark keeps seconds
