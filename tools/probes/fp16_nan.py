"""Probe (device kit, not product): does a train step under CUDA graphs in amp_fp16 with GradScaler go
non-finite, at which call, and through the engine's numerics path or its plain step as well?
usage: python tools/probes/fp16_nan.py MODEL VARIANT PRECISION step|captured   (PROBE_KIND=cpu: tiny;
PROBE_BATCH=N: N samples per step instead of the cell's batch; PROBE_EAGER=1: the same steps, not compiled)
Builds the compiled side as perfgate.measure.cell does (seed 0, TF32 on), runs 5 steps on the cell's two
batches in turn ("captured": the first two through Side.captured_step, as the numerics check does) and prints
one JSON line: per step the loss, whether the captured gradients and the parameters are finite, the scale."""

import dataclasses
import json
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from fixtures import REGISTRY
from perfgate.core.matrix import Cell, VARIANTS
from perfgate.measure.steps import Side, build_model, cell_batches, initial_state, set_tf32
from perfgate.measure import introspect

model_name, variant, precision, how = sys.argv[1:5]
spec = REGISTRY[model_name]
kind = os.environ.get("PROBE_KIND", "gpu")
cell = Cell(model_name, "train", variant, precision, kind)
size = spec.size(cell)
if os.environ.get("PROBE_BATCH"):
    size = dataclasses.replace(size, batch=int(os.environ["PROBE_BATCH"]))
dev = torch.device("cuda" if kind == "gpu" else "cpu")
set_tf32(True)
state = initial_state(spec, size, 0)
_, batches, _ = cell_batches(spec, cell, size, 0, dev)
introspect.reset_compiler()
side = Side(spec, build_model(spec, size, state, dev), "train", precision, dev)
if not os.environ.get("PROBE_EAGER"):
    side.compile(VARIANTS[variant])
out = []
for i in range(5):
    b = batches[i % 2]
    if how == "captured" and i < 2:
        cap = side.captured_step(b, tensors=(i == 1))
        loss = cap["loss"]
        grads_finite = all(torch.isfinite(v).all().item() for k, v in cap.items() if k.startswith("grad."))
    else:
        loss = side.step(b).detach().clone().cpu()
        grads_finite = None
    torch.cuda.synchronize() if kind == "gpu" else None
    params_finite = all(torch.isfinite(p).all().item() for p in side.model.parameters())
    scale = side.scaler.get_scale() if side.scaler else None
    out.append(
        {"step": i, "loss": float(loss), "grads_finite": grads_finite, "params_finite": params_finite, "scale": scale}
    )
print(
    json.dumps(
        {
            "model": model_name,
            "variant": variant,
            "precision": precision,
            "how": how,
            "eager": bool(os.environ.get("PROBE_EAGER")),
            "batch": size.batch,
            "steps": out,
        }
    )
)
