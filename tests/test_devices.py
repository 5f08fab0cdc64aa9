"""perfgate.measure.devices: the device a cell runs on, and the fp32 policy (--perf-tf32) set as it starts."""

import pytest

torch = pytest.importorskip("torch")
from perfgate.measure import devices  # noqa: E402 - needs torch

# The fp32 precision settings behind set_float32_matmul_precision, where this torch has them. Restoring the
# legacy pair alone is not enough: on torch 2.14 "highest" leaves cuda.matmul's and mkldnn.matmul's at "ieee"
# where a fresh process has "none", inductor's cache key reads them, and a later test in this worker compiled
# a graph a fresh process had cached and missed it (test_precompile, 2026-11-28).
PRECISION_KNOBS = ("cuda.matmul", "mkldnn.matmul", "mkldnn", "cudnn", "cudnn.conv", "cudnn.rnn", "mkldnn.conv", "")


def _knob(path: str):
    owner = torch.backends
    for part in filter(None, path.split(".")):
        owner = getattr(owner, part, None)
    return owner if owner is not None and hasattr(owner, "fp32_precision") else None


@pytest.fixture
def fp32_policy():
    """Put the process-wide fp32 policy back after the test: other tests in this worker share it."""
    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    knobs = {path: (owner, owner.fp32_precision) for path in PRECISION_KNOBS if (owner := _knob(path)) is not None}
    yield
    torch.set_float32_matmul_precision(saved[0])
    torch.backends.cudnn.allow_tf32 = saved[1]
    for owner, value in knobs.values():
        owner.fp32_precision = value


def test_a_cpu_cell_runs_on_the_cpu_and_leaves_the_fp32_policy_alone(fp32_policy):
    before = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    assert devices.for_cell("cpu", "gw3") == "cpu"
    for tf32 in (True, False):
        assert devices.start_cell("cpu", tf32) == torch.device("cpu")
        assert (torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32) == before


def test_each_xdist_worker_gets_its_own_gpu(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    assert [devices.for_cell("gpu", w) for w in (None, "gw0", "gw1", "gw2")] == ["cuda:0", "cuda:0", "cuda:1", "cuda:0"]


@pytest.mark.parametrize("tf32, precision", [(True, "high"), (False, "highest")])
def test_a_cuda_cell_makes_its_device_current_and_sets_the_tf32_option(monkeypatch, fp32_policy, tf32, precision):
    current = []
    monkeypatch.setattr(torch.cuda, "set_device", current.append)  # no GPU needed to see the call
    assert devices.start_cell("cuda:1", tf32) == torch.device("cuda:1")
    assert current == [torch.device("cuda:1")]
    assert torch.get_float32_matmul_precision() == precision and torch.backends.cudnn.allow_tf32 is tf32
