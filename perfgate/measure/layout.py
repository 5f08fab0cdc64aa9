"""Another layout of GPU memory before each of a paired side's profiled device rounds.

Some kernels' time follows the addresses of the tensors they touch. In a probe on an H200 (boot 1c426606,
2026-11-28, tools/probes/layout_probe.py), upernet_convnext_t train's compiled step read 46.6-47.7 ms of GPU
time across six layouts of one process, as far apart as six processes' first layouts (1.1-1.9 % within a
process, 1.1 % across): a wgrad convolution ran 4.93 or 5.50 ms and a log_softmax backward 4.55-5.15 ms by
layout. That is the "process effect" of the paired device clock (13 of 171 A/A process pairs beyond +-1 %,
8 of them this cell): one process keeps one layout for its life, so its rounds repeat within 0.1-0.3 % and
no number of them averages it out. A fresh layout each round makes it round noise, which the rounds and
their interval do average (perfgate.ab.paired's device estimator, the mean).
"""

from __future__ import annotations

import random

import torch

MIB = 1 << 20
PAD_MIB = 512  # the pad's most: the probe's layouts spread as far as processes did with pads of 0-512 MiB
PIECE = 512  # bytes: the allocator rounds every block to these; a pad of 1-4095 of them shifts what follows it
FREE_SHARE = 8  # the pad takes at most this fraction of the GPU's free memory: the other side shares the GPU


class Relayout:
    """A callable that empties the caching allocator's free blocks and holds a pad of random size, so that the
    next step's tensors are allocated afresh on other addresses. Each process draws its own sizes (the steps'
    own tensors move with the emptied cache alone, where the GPU has no room for a pad). `release` gives the
    pad back once the device rounds are done, so that the wall rounds after them never run short of memory."""

    def __init__(self, device: torch.device, rng: random.Random | None = None):
        self.device = device
        self.rng = rng or random.Random()
        self.pad: torch.Tensor | None = None

    def __call__(self) -> int:
        """A new layout; returns the pad's bytes (0 where the GPU had no room for one)."""
        self.release()
        free, _ = torch.cuda.mem_get_info(self.device)
        most = max(1, min(PAD_MIB, free // FREE_SHARE // MIB))  # MiB: drawn below the cap, so the sizes still vary
        size = self.rng.randrange(0, most) * MIB + self.rng.randrange(1, 4096) * PIECE
        try:
            self.pad = torch.empty(size, dtype=torch.uint8, device=self.device)
        except torch.OutOfMemoryError:
            self.pad = None
            return 0
        return size

    def release(self) -> None:
        """The pad freed and the allocator's free blocks given back to the GPU."""
        torch.cuda.synchronize(self.device)
        self.pad = None
        torch.cuda.empty_cache()
