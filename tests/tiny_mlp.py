"""The tiny CPU model the cell and precompile tests measure: one linear layer, 8 features in, 2 classes out, batch
4. Its registry is found by path ("tiny_mlp:REGISTRY"): a precompile child or a fresh process imports it."""

import dataclasses

import torch
import torch.nn.functional as F
from torch import nn

from perfgate.core.job import RunOptions
from perfgate.core.spec import ModelSpec, Size
from perfgate.core.timing_plan import CPU_PLAN

OPTIONS = RunOptions(
    device="cpu", plan=CPU_PLAN.replace(min_rounds=3, max_rounds=3, target_round_ms=2.0), warm_compile="off"
)
ENV = {"gpu": None, "fingerprint": "cpu-test"}


def mlp_batch(config, size, generator):
    return {"x": torch.randn(size, 8, generator=generator), "y": torch.randint(0, 2, (size,), generator=generator)}


def mlp_spec(predict=lambda m, b: m(b["x"]), **changes) -> ModelSpec:
    spec = ModelSpec(
        name="mlp",
        description="tiny",
        build=lambda c: nn.Sequential(nn.Linear(8, 2)),
        make_batch=mlp_batch,
        predict=predict,
        loss=lambda m, b: F.cross_entropy(m(b["x"]), b["y"]),
        blocks=lambda m: list(m),
        unit="samples",
        sizes={"cpu": Size({}, batch=4)},
    )
    return dataclasses.replace(spec, **changes)


REGISTRY = {"mlp": mlp_spec()}
