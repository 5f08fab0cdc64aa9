"""A tiny pytest suite for the pytest face's end-to-end tests: an MLP compiled with aot_eager on the CPU,
run in a pytester directory (seconds, not minutes). Test files take it as `suite = tiny_suite.fixture()`.

A test whose inner pytest runs a cell uses `suite.runpytest_subprocess`: the cell compiles, and some of
those tests kill or crash the process. A test that stops before any cell (a refused option, collection
only) uses `suite.runpytest_inprocess`: the same plugin and hooks, without a new interpreter importing
pytest's plugins and torch, about 2.5 s a run on the 2-core CI box."""

import os
from pathlib import Path

import pytest

import perfgate

try:  # before any test's pytester snapshot: pytester drops at teardown every module a test imported first, and
    import torch  # noqa: F401  torch imported again in that process fails ("SystemError: ... bad call flags")
except ImportError:  # a box without torch runs the torch-free tests
    pass

# The suites below run in a temporary directory, where `import perfgate` finds whichever copy is installed
# (an editable install may point at another checkout): put this checkout's first, so it is what they test.
PERFGATE_ROOT = str(Path(perfgate.__file__).resolve().parents[1])

TINY_SUITE = """
import pytest
import torch
import torch.nn.functional as F
from torch import nn

from perfgate.core.spec import ModelSpec, Size


def build(config):
    return nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 64), nn.GELU(), nn.Linear(64, 4))


def batch(config, size, generator):
    return {"x": torch.randn(size, 32, generator=generator), "y": torch.randint(0, 4, (size,), generator=generator)}


MLP = ModelSpec(
    name="mlp", description="a tiny MLP", build=build, make_batch=batch,
    predict=lambda m, b: m(b["x"]), loss=lambda m, b: F.cross_entropy(m(b["x"]), b["y"]),
    blocks=lambda m: [m[0], m[2], m[4]], unit="samples",
    sizes={"cpu": Size({}, batch=16), "gpu": Size({}, batch=16)}, cpu_variants=("aot_eager",),
)
REGISTRY = {"mlp": MLP}


@pytest.mark.perf_cells("train")
def test_train_step(cell, perf, benchmark):
    perf.measure(cell, benchmark)


@pytest.mark.perf_cells("infer")
def test_infer_step(cell, perf, benchmark):
    perf.measure(cell, benchmark)
"""

FAST = [
    "-m",
    "cpu",
    "-p",
    "no:randomly",
    "--perf-warm-compile=off",
    "--perf-min-rounds=3",
    "--perf-max-rounds=3",
    "--perf-round-ms=2",
]


def fixture():
    """The `suite` fixture: a pytester directory holding the tiny suite, with this checkout's perfgate."""

    @pytest.fixture
    def suite(pytester, monkeypatch):
        path = os.pathsep.join(filter(None, [PERFGATE_ROOT, os.environ.get("PYTHONPATH")]))
        monkeypatch.setenv("PYTHONPATH", path)
        for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT"):  # set when these tests run under -n:
            monkeypatch.delenv(name, raising=False)  # the inner pytest is no worker (pytest-benchmark reads them)
        pytester.makeconftest('pytest_plugins = ["perfgate.plugin"]')
        pytester.makepyfile(test_tiny=TINY_SUITE)
        pytester.makeini(
            "[pytest]\nperf_registry = test_tiny:REGISTRY\n"
            "markers =\n    gpu: g\n    cpu: c\n    pr: p\n    nightly: n\n"
        )
        return pytester

    return suite
