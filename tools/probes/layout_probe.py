"""Is a cell's per-process device-time effect its GPU memory layout? A pytest plugin (`-p tools.probes.layout_probe`,
with `--perf-isolate off`): once a cell is warm, before it times itself as usual, its compiled and eager steps
are profiled in LAYOUTS layouts of GPU memory, one after another in this process. Layout 0 is the one the cell
warmed up in; before each later one the allocator's cache is emptied and a pad of random size held, so that
the step's activations land on other addresses, then 2 passes re-warm it. One JSON line a cell and layout
into LAYOUT_OUT: GPU-busy ms per step of each side (3 profiled rounds) and the compiled side's dearest kernels.

If the layouts of one process spread as far as processes do (upernet_convnext_t train's compiled step: 13 of
171 A/A process pairs beyond +-1 %, one kernel 0.6 ms apart), the layout is the process effect, and rounds
taken over several layouts average it out where one process's rounds cannot. They did (2 x H200 1c426606,
2026-11-28: baselines/runs/paired/README.md), and the paired engine now takes a fresh layout each device round
(perfgate.measure.layout). That moves the step's activations, not the tensors that live across steps: with
LAYOUT_PERSISTENT=1 each later layout also copies every weight, buffer and optimizer state tensor of both sides
to new addresses (after the pad, so they land elsewhere too), to tell whether those make the rest of the effect.

    LAYOUTS=6 LAYOUT_OUT=layouts.jsonl pytest perftests -m "gpu and pr" -k "upernet_convnext_t and train" \
        -p tools.probes.layout_probe --perf-isolate off --perf-numerics off --perf-warm-compile off
"""

from __future__ import annotations

import json
import os
import random
import time

from perfgate.measure import cell as cell_module

_run_cell = cell_module.run_cell


def _layouts(run, eager_ms: float, compiled_ms: float):
    import torch

    from perfgate.measure import clocks
    from perfgate.measure.layout import MIB, Relayout

    relayout = Relayout(run.device, random.Random(f"{os.getpid()}:{time.time_ns()}"))
    persistent = os.environ.get("LAYOUT_PERSISTENT") == "1"
    stream = len(run.timed)
    with open(os.environ.get("LAYOUT_OUT", "layouts.jsonl"), "a", encoding="utf-8") as out:
        for layout in range(int(os.environ.get("LAYOUTS", "6"))):
            pad_mib = 0.0
            if layout:
                pad_mib = relayout() / MIB  # the engine's own: the cache emptied, a pad of 0-512 MiB held
                if persistent:
                    for side in (run.eager, run.compiled):
                        _move_persistent(side)
                    torch.cuda.synchronize(run.device)
                    torch.cuda.empty_cache()  # the old copies' blocks
                for i in range(2 * stream):
                    run.compiled_step(i)
                    run.eager_step(i)
                torch.cuda.synchronize(run.device)
            block, kernels = clocks.device_block(run.eager_step, run.compiled_step, run.device, stream, 3)
            line = {
                "cell": run.cell.id,
                "pid": os.getpid(),
                "alloc_conf": os.environ.get("PYTORCH_CUDA_ALLOC_CONF", ""),
                "persistent_moved": persistent and layout > 0,
                "layout": layout,
                "pad_mib": round(pad_mib, 3),
                "compiled_ms": [round(x, 4) for x in block.compiled_ms],
                "eager_ms": [round(x, 4) for x in block.eager_ms],
                "kernels": dict(list(kernels.get("compiled", {}).items())[:6]),
                "reserved_mib": round(torch.cuda.memory_reserved(run.device) / MIB),
            }
            out.write(json.dumps(line) + "\n")
            out.flush()
    relayout.release()
    return None  # the cell then times itself as usual


def _move_persistent(side) -> None:
    """Every weight, buffer and optimizer state tensor of a side copied to a new allocation, in place of the
    old (the same Parameter objects: the compiled graphs take them as inputs and guard on no address)."""
    import torch

    with torch.no_grad():
        for tensor in [*side.model.parameters(), *side.model.buffers()]:
            tensor.data = tensor.data.clone()
        for state in side.optimizer.state.values() if side.optimizer is not None else ():
            for key, value in state.items():
                if torch.is_tensor(value) and value.device.type == "cuda":
                    state[key] = value.clone()


def _probed(spec, cell, options, env, *args, **kwargs):
    if cell.phase != "ddp" and options.device.startswith("cuda"):
        kwargs["serve"] = _layouts
    return _run_cell(spec, cell, options, env, *args, **kwargs)


cell_module.run_cell = _probed
