"""Is the compiled result as close to the truth as eager's? The RMSE-multiplier rule of PyTorch's accuracy CI.

Each captured tensor (an output, the loss of each step, every gradient, every parameter after two optimizer
steps) is judged alone, so one broken small tensor is not averaged away by a large healthy one.
"""

from __future__ import annotations

import math

import torch

# A verdict lists every failing tensor but keeps the record readable: this many passing ones at most.
MAX_LISTED_CHECKS = 8


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2))) if a.numel() else 0.0


def _rms(a: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean(a.double() ** 2))) if a.numel() else 0.0


def judge(compiled: list[dict], eager: list[dict], reference: list[dict] | None, tolerance,
          reference_kind: str, initial: dict | None = None) -> dict:
    """Compare captured steps. `reference` is None when no higher-precision copy fitted: then compiled is
    judged against eager with the tolerance's fallback_rtol. `initial` holds the parameters before the
    first step (state-dict names), so a parameter's floor can scale with how far the optimizer moved it.
    Returns {verdict, reference, worst, checks}."""
    initial = initial or {}
    checks = []
    for step, (c_step, e_step) in enumerate(zip(compiled, eager)):
        r_step = reference[step] if reference is not None else None
        for name, c in c_step.items():
            label = f"step{step}.{name}"
            e = e_step[name]
            if c.shape != e.shape:
                checks.append({"name": label, "ok": False, "why": f"shape {tuple(c.shape)} != {tuple(e.shape)}"})
                continue
            if not torch.isfinite(c).all():
                checks.append({"name": label, "ok": False, "why": "non-finite values in compiled"})
                continue
            start = initial.get(name[len("param."):]) if name.startswith("param.") else None
            checks.append(_check(label, c, e, None if r_step is None else r_step[name], tolerance, start))
    failing = [c for c in checks if not c["ok"]]
    worst = max(checks, key=lambda c: c.get("ratio", math.inf if not c["ok"] else 0.0), default=None)
    listed = failing + sorted((c for c in checks if c["ok"]), key=lambda c: -c.get("ratio", 0.0))
    return {
        "verdict": "fail" if failing or not checks else "pass",
        "reference": reference_kind,
        "tensors": len(checks),
        "failing": len(failing),
        "worst": worst["name"] if worst else None,
        "checks": listed[: max(MAX_LISTED_CHECKS, len(failing))],
    }


def _check(label: str, c: torch.Tensor, e: torch.Tensor, r: torch.Tensor | None, tolerance,
           start: torch.Tensor | None = None) -> dict:
    if r is None:
        err = _rmse(c, e)
        limit = tolerance.fallback_rtol * _rms(e) + 1e-12
        return {"name": label, "rmse_compiled_vs_eager": err, "limit": limit,
                "ratio": err / limit, "ok": err <= limit}
    rmse_c, rmse_e = _rmse(c, r), _rmse(e, r)
    # +1e-12 so an all-zero tensor (a gradient that is exactly zero on every side) passes.
    limit = tolerance.multiplier * rmse_e + tolerance.floor * _rms(r) + 1e-12
    if start is not None:
        limit += tolerance.update_floor * _rmse(r, start)
    return {"name": label, "rmse_compiled": rmse_c, "rmse_eager": rmse_e, "limit": limit,
            "ratio": rmse_c / limit, "ok": rmse_c <= limit}

