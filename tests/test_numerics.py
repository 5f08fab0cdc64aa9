"""The RMSE-multiplier rule on synthetic tensors: each check must be able to fail."""

import pytest
import torch

from perfgate.numerics import judge
from perfgate.spec import DEFAULT_TOLERANCES

TOL = DEFAULT_TOLERANCES["amp_bf16"]


def _sides(noise_eager: float, noise_compiled: float, name: str = "output"):
    g = torch.Generator().manual_seed(0)
    ref = torch.randn(4096, generator=g, dtype=torch.float64)
    eager = ref + noise_eager * torch.randn(4096, generator=g, dtype=torch.float64)
    compiled = ref + noise_compiled * torch.randn(4096, generator=g, dtype=torch.float64)
    return [{name: compiled}], [{name: eager}], [{name: ref}]


def test_compiled_as_close_as_eager_passes():
    compiled, eager, ref = _sides(1e-2, 1.2e-2)
    assert judge(compiled, eager, ref, TOL, "fp64")["verdict"] == "pass"


@pytest.mark.parametrize("fault", ["scaled", "noisier", "nan"])
def test_planted_faults_fail(fault):
    compiled, eager, ref = _sides(1e-2, 1e-2)
    if fault == "scaled":  # what --perf-inject numerics:0.05 does inside the compiled graph
        compiled = [{"output": compiled[0]["output"] * 1.05}]
    elif fault == "noisier":
        compiled, _, _ = _sides(1e-2, 5e-2)
    else:
        compiled[0]["output"][7] = float("nan")
    verdict = judge(compiled, eager, ref, TOL, "fp64")
    assert verdict["verdict"] == "fail"
    assert verdict["failing"] == 1


def test_without_reference_falls_back_to_eager_with_its_own_tolerance():
    compiled, eager, _ = _sides(1e-3, 1e-3)
    assert judge(compiled, eager, None, TOL, "eager")["verdict"] == "pass"
    scaled = [{"output": compiled[0]["output"] * 1.2}]
    assert judge(scaled, eager, None, TOL, "eager")["verdict"] == "fail"


def test_parameter_floor_scales_with_the_optimizer_update():
    """A bias whose update differs by a few AdamW sign flips passes; one that never moved fails."""
    start = torch.zeros(768, dtype=torch.float64)
    ref = start + 2e-4 * torch.sign(torch.randn(768, generator=torch.Generator().manual_seed(1)))
    flipped = ref.clone()
    flipped[:3] *= -1  # 3 of 768 elements stepped the other way
    eager = [{"param.bias": ref.clone()}]
    ok = judge([{"param.bias": flipped}], eager, [{"param.bias": ref}], TOL, "fp64", {"bias": start})
    assert ok["verdict"] == "pass"
    stuck = judge([{"param.bias": start.clone()}], eager, [{"param.bias": ref}], TOL, "fp64", {"bias": start})
    assert stuck["verdict"] == "fail"
