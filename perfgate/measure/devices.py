"""Where a cell runs, and the device made ready as the cell starts: the CUDA device an xdist worker owns made
current, and the fp32 policy (--perf-tf32) set. Both come in as run options and are applied at the start of
each cell, in this process or in an isolated cell's child, never as a side effect of a getter.
"""

from __future__ import annotations

import torch

from perfgate.measure.steps import set_tf32


def for_cell(device_kind: str, worker: str | None) -> str:
    """ "cpu", or the CUDA device of this xdist worker: one worker per visible GPU, gw0 -> cuda:0, gw1 -> cuda:1."""
    if device_kind == "cpu":
        return "cpu"
    return str(torch.device("cuda", int((worker or "gw0").lstrip("gw") or 0) % torch.cuda.device_count()))


def worker_gpu(worker: str | None) -> tuple[str, int]:
    """(the CUDA device of this xdist worker, the GPUs this process sees), or ("", 0) without CUDA."""
    if not torch.cuda.is_available():
        return "", 0
    return for_cell("gpu", worker), torch.cuda.device_count()


def start_cell(device: str, tf32: bool) -> torch.device:
    """Make `device` current and set its fp32 policy (TF32 tensor cores or full fp32) for the cell about to
    run. CPU cells change neither: TF32 is a CUDA policy, and their records say tf32 None."""
    dev = torch.device(device)
    if dev.type == "cuda":
        torch.cuda.set_device(dev)
        set_tf32(tf32)
    return dev
