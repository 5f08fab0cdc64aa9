"""Why-artifacts of a cell: chrome traces of a few eager and compiled steps, and what dynamo and inductor
said while compiling (TORCH_LOGS graph_breaks, recompiles, perf_hints), written under one directory."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity

from perfgate.measure.clocks import profiler

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
    _file_only()
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TORCH_LOGS_OUT", None)
        else:
            os.environ["TORCH_LOGS_OUT"] = saved
        torch._logging.set_logs()  # back to the defaults (and whatever TORCH_LOGS says)


def _file_only() -> None:
    """Keep what set_logs turned on out of the terminal: torch's own stderr handlers pass warnings and up
    only (as they do by default), so the extra artifacts reach the file alone. A flagged upernet cell once
    printed 166 lines of `[__perf_hints] possibly bad tiling` into the run's console. The handlers are torch's
    to recreate: the next set_logs() drops them, and the filter with them."""
    from torch._logging import _internal

    for name in _internal.log_registry.get_log_qnames():
        for handler in logging.getLogger(name).handlers:
            if _is_torch_handler(_internal, handler) and not isinstance(handler, logging.FileHandler):
                handler.addFilter(_warnings_and_up)


def _is_torch_handler(internal, handler: logging.Handler) -> bool:
    """torch 2.14 marks its handlers with an attribute; 2.11 only keeps them in a WeakSet (`handlers`). Reading
    the marker alone let 441 lines of `[__graph_breaks]` through on torch 2.11 (an H100 confirm round)."""
    marker = getattr(internal, "_TORCH_HANDLER_MARKER", "_torch_logging_internal_handler")
    return getattr(handler, marker, False) or handler in getattr(internal, "handlers", ())


def _warnings_and_up(record: logging.LogRecord) -> bool:
    return record.levelno >= logging.WARNING


def trace(step, path: Path, device: torch.device) -> Path:
    """A torch.profiler chrome trace (open in chrome://tracing or ui.perfetto.dev) of PROFILED_STEPS."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    path.parent.mkdir(parents=True, exist_ok=True)
    with profiler(activities) as prof:
        for i in range(PROFILED_STEPS):
            step(i)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
    prof.export_chrome_trace(str(path))
    return path
