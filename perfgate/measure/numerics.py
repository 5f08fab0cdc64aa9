"""Is the compiled result as close to the truth as eager's? The RMSE-multiplier rule of PyTorch's accuracy CI.

Each captured tensor (an output, the loss of each step, every gradient, every parameter after two optimizer
steps) is judged alone, so one broken small tensor is not averaged away by a large healthy one. Its limit
also carries a floor from its group (the gradients, or the parameter updates, of the same step), so a tensor
that is rounding noise at the model's scale is not judged against its own noise (docs/numerics.md).
"""

from __future__ import annotations

import math

import torch

# A verdict lists every failing tensor but keeps the record readable: this many passing ones at most.
MAX_LISTED_CHECKS = 8

# Kinds with a group floor, by the captured name's prefix. Outputs and losses have none: each is its own
# group (one logits tensor, one scalar loss), so today's per-tensor floor already is the group's.
GROUPED = ("grad", "param")


def _on(device: torch.device | None, *tensors: torch.Tensor | None):
    """The tensors moved to `device` for the arithmetic (None: where they are). A CUDA caller judges on its
    GPU: the captured tensors wait on the host, and for GPT-2 XL (1.56 B parameters, two captured steps on
    three sides) the float64 passes over them ran for minutes on an H100 lease's host CPU. One tensor goes
    over at a time, so the GPU holds a few copies of the largest tensor at most."""
    if device is None:
        return tensors
    return tuple(None if t is None else t.to(device, non_blocking=True) for t in tensors)


def _rmse(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean((a.double() - b.double()) ** 2))) if a.numel() else 0.0


def _rms(a: torch.Tensor) -> float:
    return float(torch.sqrt(torch.mean(a.double() ** 2))) if a.numel() else 0.0


def kind(name: str) -> str:
    """ "grad", "param" or "output" (outputs and losses), from a captured tensor's name."""
    prefix = name.partition(".")[0]
    return prefix if prefix in GROUPED else "output"


def group_scales(truth: dict, initial: dict, device: torch.device | None = None) -> dict[str, float]:
    """RMS over every element of a step's group, on the truth side (the reference, or eager without one):
    "grad" of all gradients, "param" of all parameter updates (after minus `initial`). Pooled over elements,
    so it is the model's gradient (update) scale, not an average of per-tensor scales."""
    sums = {k: [0.0, 0] for k in GROUPED}  # kind -> [sum of squares, elements]
    for name, value in truth.items():
        k = kind(name)
        if k not in sums:
            continue
        if k == "param":
            start = initial.get(name[len("param.") :])
            if start is None or start.shape != value.shape:
                continue
            value, start = _on(device, value, start)
            value = value.double() - start.double()
        else:
            (value,) = _on(device, value)
        value = value[torch.isfinite(value)]  # an overflowed truth (eager, without a reference) sets no floor
        sums[k][0] += float(torch.sum(value.double() ** 2))
        sums[k][1] += value.numel()
    return {k: math.sqrt(total / count) if count else 0.0 for k, (total, count) in sums.items()}


def compare_steps(
    compiled: list[dict],
    eager: list[dict],
    reference: list[dict] | None,
    tolerance,
    reference_kind: str,
    initial: dict | None = None,
    device: torch.device | None = None,
) -> dict:
    """Compare captured steps. `reference` is None when no higher-precision copy fitted: then compiled is
    judged against eager with the tolerance's fallback_rtol. `initial` holds the parameters before the
    first step (state-dict names), so a parameter's floor can scale with how far the optimizer moved it.
    `device`: where the arithmetic runs (a CUDA device: there, falling back to the host for a tensor that
    does not fit). Returns {verdict, reference, worst, checks}."""
    initial = initial or {}
    device = device if device is not None and device.type == "cuda" else None
    checks = []
    for step, (c_step, e_step) in enumerate(zip(compiled, eager)):
        r_step = reference[step] if reference is not None else None
        truth = e_step if r_step is None else r_step
        try:
            scales = group_scales(truth, initial, device)
        except torch.OutOfMemoryError:
            scales = group_scales(truth, initial)
        # A tensor one side lacks (a parameter whose gradient one side never produced) is that side's zeros:
        # a gradient the compiled graph lost is judged as a gradient of 0, and fails where eager's was not 0.
        for name in [*e_step, *(n for n in c_step if n not in e_step)]:
            label = f"step{step}.{name}"
            c, e = c_step.get(name), e_step.get(name)
            if c is None or e is None:
                missing = "compiled" if c is None else "eager"
                c, e = (torch.zeros_like(e), e) if c is None else (c, torch.zeros_like(c))
                label += f" (none on the {missing} side: zeros)"
            if c.shape != e.shape:
                checks.append({"name": label, "ok": False, "why": f"shape {tuple(c.shape)} != {tuple(e.shape)}"})
                continue
            start = initial.get(name[len("param.") :]) if name.startswith("param.") else None
            r = None if r_step is None else r_step.get(name)
            args = (label, tolerance, kind(name), scales.get(kind(name)))
            try:
                check = _finite_check(*_on(device, c, e, r, start), *args)
            except torch.OutOfMemoryError:  # the GPU is full of the two sides' models: this tensor on the host
                check = _finite_check(c, e, r, start, *args)
            checks.append(check)
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


def _finite_check(c, e, r, start, label: str, tolerance, tensor_kind: str, group_scale: float | None) -> dict:
    if not torch.isfinite(c).all():
        return {"name": label, "ok": False, "why": "non-finite values in compiled"}
    return _check(label, c, e, r, tolerance, start, tensor_kind, group_scale)


def _group_floor(tolerance, tensor_kind: str, group_scale: float | None) -> float:
    """The absolute part of a limit, from the group: rounding level of the step's gradients (floor times
    their RMS), or update_floor times the RMS of the step's parameter updates. 0 for outputs."""
    if group_scale is None:
        return 0.0
    return (tolerance.update_floor if tensor_kind == "param" else tolerance.floor) * group_scale


def _check(
    label: str,
    c: torch.Tensor,
    e: torch.Tensor,
    r: torch.Tensor | None,
    tolerance,
    start: torch.Tensor | None = None,
    tensor_kind: str = "output",
    group_scale: float | None = None,
) -> dict:
    group = {} if group_scale is None else {"group_scale": group_scale}
    # +1e-12 so an all-zero tensor in an all-zero group (exactly zero on every side) passes.
    floor = _group_floor(tolerance, tensor_kind, group_scale) + 1e-12
    if r is None:  # eager is the truth; one that overflowed is none: judged by compiled's own size, err is inf
        err, size = _rmse(c, e), _rms(e)
        limit = tolerance.fallback_rtol * (size if math.isfinite(size) else _rms(c)) + floor
        return {
            "name": label,
            "rmse_compiled_vs_eager": err,
            "limit": limit,
            **group,
            "ratio": err / limit,
            "ok": err <= limit,
        }
    rmse_c, rmse_e = _rmse(c, r), _rmse(e, r)
    # A parameter's relative floor is of its update, not of its own size: a norm weight of RMS ~1 took a floor of
    # ~1e-3 under AMP, five times the ~2e-4 two AdamW steps move it, so a compiled side that never applied the
    # update, or applied it backwards, passed.
    update = None if start is None else _rmse(r, start)
    scale = _rms(r) if update is None else update
    if not math.isfinite(rmse_e):  # eager overflowed (an fp16 step): its error would make any compiled limit inf
        rmse_e = tolerance.fallback_rtol * scale  # so compiled is held to the rule without the reference
    limit = tolerance.multiplier * rmse_e + tolerance.floor * scale + floor
    if update is not None:
        limit += tolerance.update_floor * update
    return {
        "name": label,
        "rmse_compiled": rmse_c,
        "rmse_eager": rmse_e,
        "limit": limit,
        **group,
        "ratio": rmse_c / limit,
        "ok": rmse_c <= limit,
    }
