"""Peak device memory of one side of a cell: what it allocated beyond what was resident when it started."""

from __future__ import annotations

import contextlib
import gc

import torch

MIB = 2**20


class Memory:
    """Peak device memory of one side: what it allocated beyond what was resident when it started. The
    absolute peak (not a delta around warm steps) counts a CUDA-graph pool, allocated at capture time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.base = resident() if self.cuda else 0
        self.kept = 0  # bytes: the peak before a set-aside block

    def rebase(self) -> None:
        self.base = resident() if self.cuda else 0
        self.reset()

    def reset(self) -> None:
        self.kept = 0
        if self.cuda:
            torch.cuda.reset_peak_memory_stats()

    @contextlib.contextmanager
    def set_aside(self):
        """A block whose allocations are not the side's: the numerics judge, whose float64 temporaries on the
        GPU read as +10 GB on gpt2 infer's compiled peak (11474 MiB for 1348). The peak before it stays."""
        if not self.cuda:
            yield
            return
        kept = torch.cuda.max_memory_allocated()
        try:
            yield
        finally:
            torch.cuda.reset_peak_memory_stats()
            self.kept = max(self.kept, kept)

    def peak_mb(self) -> float | None:
        if not self.cuda:
            return None
        return round((max(torch.cuda.max_memory_allocated(), self.kept) - self.base) / MIB, 1)


def resident() -> int:
    """Bytes allocated on the device once Python's garbage is collected. A base taken with the last cell's models
    still uncollected (held in reference cycles) sits above what the side finds resident once a collection runs
    mid-side, as CUDA-graph capture runs one: resnet50 infer under reduce-overhead, after gpt2_xl train in one
    worker (4 x H100 2789a879, 2026-11-27), read its compiled peak as -5152 MiB and failed as bad figures."""
    gc.collect()
    return torch.cuda.memory_allocated()
