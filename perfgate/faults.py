"""Test-only planted faults, to prove each check can fail: `--perf-inject KIND[:ARG]`.

    numerics[:EPS]     scale what the compiled task returns by (1 + EPS), default 0.05: a miscompile
    graph_break        a graph break before every repeated block of the compiled model
    slow[:MS]          MS milliseconds (default 1) of extra device work after every compiled step
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch

KINDS = {"numerics": 0.05, "graph_break": 0.0, "slow": 1.0}


@dataclass(frozen=True)
class Fault:
    kind: str
    arg: float


def parse(text: str | None) -> Fault | None:
    if not text:
        return None
    kind, _, arg = text.partition(":")
    if kind not in KINDS:
        raise ValueError(f"unknown fault {kind!r} in --perf-inject={text!r}; valid: {', '.join(KINDS)}")
    try:
        return Fault(kind, float(arg) if arg else KINDS[kind])
    except ValueError:
        raise ValueError(f"--perf-inject={text!r}: {arg!r} is not a number") from None


def wrap_task(task, spec, fault: Fault | None):
    """Plant numerics or graph-break faults in the compiled side's task (never the eager side's)."""
    if fault is None:
        return task
    if fault.kind == "numerics":
        inner = task.fn
        task.fn = lambda model, batch: inner(model, batch) * (1.0 + fault.arg)
    elif fault.kind == "graph_break":
        for block in spec.blocks(task.model):
            block.register_forward_pre_hook(_graph_break)
    return task


def _graph_break(_module, _args):
    torch._dynamo.graph_break()


def slowed(step, fault: Fault | None, device: torch.device):
    """The compiled step plus `fault.arg` ms of device work: a slowdown the gate must catch."""
    if fault is None or fault.kind != "slow":
        return step
    if device.type != "cuda":
        def slow_cpu_step(i):
            step(i)
            time.sleep(fault.arg / 1e3)
        return slow_cpu_step
    cycles = int(fault.arg * _cycles_per_ms())

    def slow_cuda_step(i):
        step(i)
        torch.cuda._sleep(cycles)
    return slow_cuda_step


def _cycles_per_ms() -> float:
    """Calibrate torch.cuda._sleep (a spin of N clock cycles) against CUDA events."""
    cycles = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # first launch pays module load
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)
