"""What dynamo did: graphs compiled, graph breaks with reasons, recompiles; and FLOPs of a step."""

from __future__ import annotations

import torch
from torch._dynamo.utils import counters, guard_failures
from torch.utils.flop_counter import FlopCounterMode

# The record keeps the first few break and recompile reasons; dynamo's full text is long (a recompile's
# carries the user stack), the first line says enough.
MAX_REASONS = 5


def reset_compiler() -> None:
    """Forget every compiled graph and every counter, so one cell's compiles never leak into the next."""
    torch._dynamo.reset()
    counters.clear()


def graph_count() -> int:
    """The graphs dynamo compiled since the last reset."""
    return int(counters.get("stats", {}).get("unique_graphs", 0))


def compile_counts() -> dict:
    breaks = counters.get("graph_break", {})
    return {
        "graph_count": graph_count(),
        "ops": int(counters.get("stats", {}).get("calls_captured", 0)),  # calls traced into graphs
        "graph_breaks": int(sum(breaks.values())),
        "frames": int(counters.get("frames", {}).get("total", 0)),
        "autograd_captures": int(counters.get("compiled_autograd", {}).get("captures", 0)),  # backwards traced
        "guard_failures": sum(len(failures) for failures in guard_failures.values()),
        "break_reasons": [reason.strip().splitlines()[0] for reason in list(breaks)[:MAX_REASONS]],
        "recompile_reasons": _recompile_reasons(),
    }


def cache_counts() -> dict:
    """Compile-cache lookups since the last reset: FX graph and AOTAutograd hits and misses. An AOTAutograd
    hit loads its inductor graphs through the FX graph cache, so both count. Backends without inductor
    (aot_eager, cudagraphs) look nothing up: 0 and 0."""
    hits = counters["inductor"]["fxgraph_cache_hit"] + counters["aot_autograd"]["autograd_cache_hit"]
    misses = counters["inductor"]["fxgraph_cache_miss"] + counters["aot_autograd"]["autograd_cache_miss"]
    return {"hits": int(hits), "misses": int(misses)}


def _recompile_reasons() -> list[str]:
    """Why dynamo compiled a frame again, first line each ("1/0: tensor 'x' size mismatch at index 1..."):
    the guard that failed, which tells a shape strategy's leak from a cold start."""
    reasons = [str(r).strip().splitlines()[0] for failures in guard_failures.values() for r in failures]
    return reasons[:MAX_REASONS]


def flops_per_step(step) -> int:
    """FLOPs of one eager step (forward, backward; the optimizer's elementwise work is not counted)."""
    with FlopCounterMode(display=False) as counter:
        step()
    return int(counter.get_total_flops())
