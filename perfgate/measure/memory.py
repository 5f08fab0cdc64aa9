"""Peak device memory of one side of a cell: what it allocated beyond what was resident when it started."""

from __future__ import annotations

import contextlib

import torch

MIB = 2**20


class Memory:
    """Peak device memory of one side: what it allocated beyond what was resident when it started. The
    absolute peak (not a delta around warm steps) counts a CUDA-graph pool, allocated at capture time."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.base = torch.cuda.memory_allocated() if self.cuda else 0
        self.kept = 0  # bytes above base: the peak before a set-aside block, or before a base was lowered

    def rebase(self) -> None:
        self.base = torch.cuda.memory_allocated() if self.cuda else 0
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
        kept = torch.cuda.max_memory_allocated() - self.base
        try:
            yield
        finally:
            torch.cuda.reset_peak_memory_stats()
            self.kept = max(self.kept, kept)

    @contextlib.contextmanager
    def freeing(self):
        """A block that frees tensors which were resident at the base (the eager side's captured steps and the
        numerics reference, after the judge): what it frees leaves the base too. Else every later reading is
        low by it: resnet50 infer under CUDA graphs read its compiled peak as -5152 MiB (4 x H100 2789a879,
        2026-11-27). The peak before the block stays, above the old base."""
        if not self.cuda:
            yield
            return
        self.kept = max(self.kept, torch.cuda.max_memory_allocated() - self.base)
        before = torch.cuda.memory_allocated()
        try:
            yield
        finally:
            self.base -= max(0, before - torch.cuda.memory_allocated())
            torch.cuda.reset_peak_memory_stats()

    def peak_mb(self) -> float | None:
        if not self.cuda:
            return None
        return round(max(torch.cuda.max_memory_allocated() - self.base, self.kept) / MIB, 1)
