"""Why-artifacts of a cell: chrome traces of a few eager and compiled steps, and what dynamo and inductor
said while compiling (TORCH_LOGS graph_breaks, recompiles, perf_hints), written under one directory."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

# Enough steps to see a steady pattern in the trace, few enough that a trace opens quickly (~MBs).
PROFILED_STEPS = 3


@contextlib.contextmanager
def compile_logs(path: Path | None):
    """Capture TORCH_LOGS=graph_breaks,recompiles,perf_hints into `path` (no-op when None)."""
    if path is None:
        yield
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    # TORCH_LOGS_OUT is torch's own way to add a file beside stderr; set_logs() reads it. Artifact loggers
    # do not propagate to the "torch" logger, so a handler of ours there would hear nothing.
    saved = os.environ.get("TORCH_LOGS_OUT")
    os.environ["TORCH_LOGS_OUT"] = str(path)
    torch._logging.set_logs(graph_breaks=True, recompiles=True, perf_hints=True)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TORCH_LOGS_OUT", None)
        else:
            os.environ["TORCH_LOGS_OUT"] = saved
        torch._logging.set_logs()  # back to the defaults (and whatever TORCH_LOGS says)


def trace(step, path: Path, device: torch.device) -> Path:
    """A torch.profiler chrome trace (open in chrome://tracing or ui.perfetto.dev) of PROFILED_STEPS."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with profile(activities=activities) as prof:
        for i in range(PROFILED_STEPS):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    prof.export_chrome_trace(str(path))
    return path
