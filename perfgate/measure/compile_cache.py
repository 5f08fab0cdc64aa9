"""Where a cell's compiles go: a fresh inductor cache per cell (cold compiles), or a kept one, one per
precision; and the clean-up between cells that keeps one cell's compiles out of the next."""

from __future__ import annotations

import contextlib
import gc
import os
import shutil
import tempfile

import torch

from perfgate.measure import introspect


@contextlib.contextmanager
def compile_cache(cache_dir: str | None, precision: str):
    """Cold compiles by default: a fresh inductor cache directory (and in-memory caches cleared) per cell.
    A kept directory (`--perf-cache-dir`) lets CI reuse compiles between runs; the record says which
    (cache_kind).
    A kept directory holds one inductor cache per precision (its Triton kernels are shared: keyed by their
    source): torch 2.11's AOTAutograd cache keys whether autocast is on, not its dtype, so an amp_bf16 cell
    was served amp_fp16's compiled graph (H100, 2026-11-24: its numerics failed, 214 of 298 tensors off)."""
    from torch._inductor.utils import clear_caches

    directory = tempfile.mkdtemp(prefix="perfgate-inductor-") if cache_dir is None else cache_dir
    saved = {key: os.environ.get(key) for key in ("TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(directory, precision)
    os.environ["TRITON_CACHE_DIR"] = os.path.join(directory, "triton")
    clear_caches()
    try:
        yield
    finally:
        clear_caches()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
        if cache_dir is None:
            shutil.rmtree(directory, ignore_errors=True)


def cache_kind(cache_dir: str | None) -> str:
    """The record's compile_cache: "fresh" (a directory per cell) or "persistent" (`--perf-cache-dir`)."""
    return "fresh" if cache_dir is None else "persistent"


def clean_up() -> None:
    """Forget compiled graphs and free what the cell held, so the next cell in this process starts clean."""
    introspect.reset_compiler()
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
