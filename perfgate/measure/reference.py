"""The higher-precision reference numerics judges a cell against, and its on-disk cache.

A reference is two captured steps (perfgate.measure.steps.Side.captured_step) of an fp64 copy of the model on the
cell's first two batches, else strict fp32 (AMP cells, where fp64 does not fit), else none; a data-parallel cell's
is DDP done in one process (every rank's batch, their gradients averaged). It is the same for every run of an
environment, and it cost 4-13 s a cell on an H100 (2026-11-25: the fp64 build and steps, their tensors copied
to the host), so it is kept on disk under --perf-reference-cache (default .perfgate/reference) and read back with
mmap: later runs, the later processes of an A/B side and the cells of other variants of the same model and
phase (the reference does not depend on the variant) pay a file open instead.

The key is everything a reference depends on: the model's name and the source of the files that define its
builder and its loss (or predict) function, its config, batch, learning rate and seed, the phase, the kinds
of reference the precision allows (AMP cells may fall back to fp32), the bytes of the batches themselves (the
variant's padding and the seed reach them), torch, transformers and timm versions, the device's name, the
world size of a data-parallel cell, and REFERENCE_FORMAT. A key that cannot be formed (a builder whose source
cannot be read) is not cached, and the record says why.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import inspect
import json
import os
import tempfile
from pathlib import Path
from typing import Callable

import torch

from perfgate.core.matrix import PRECISIONS
from perfgate.core.record import error_line
from perfgate.measure.compile_cache import clean_up
from perfgate.measure.steps import Side, build_model, captured_steps, to_device

# What a stored reference holds; a change to captured_steps, to the DDP reference or to the initial weights
# bumps it, so that an older file is never read as today's. 2: a GPU cell's weights are drawn on the GPU
# (perfgate.measure.steps.initial_state), so format 1's GPU references are of other weights.
REFERENCE_FORMAT = 2
# A reference larger than this (fp64 bytes) is computed each time rather than written: gpt2_xl's two steps
# would be ~25 GB.
MAX_STORED_BYTES = 8 * 2**30


def kinds(precision: str) -> tuple[str, ...]:
    """The references a precision may use, best first: fp64, and for AMP cells strict fp32 where fp64 does not
    fit (numerics then judges against the better of the two that fits)."""
    return ("fp64", "fp32") if PRECISIONS[precision].amp else ("fp64",)


def compute(spec, cell, size, state, host_batches, device):
    """(two captured steps of a higher-precision copy, its kind): fp64 where it fits, else (AMP cells) strict
    fp32, else (None, "eager (why)"): numerics then compares compiled with eager by the fallback tolerance."""
    notes = []
    for kind in kinds(cell.precision):
        dtype = torch.float64 if kind == "fp64" else torch.float32
        side = None
        try:
            with strict_fp32():
                side = Side(spec, build_model(spec, size, state, device, dtype), cell.phase, "fp32", device)
                return captured_steps(side, [to_device(b, device, dtype) for b in host_batches]), kind
        except (torch.OutOfMemoryError, RuntimeError) as err:
            notes.append(f"{kind}: {error_line(err).partition(': ')[2][:120]}")
        finally:
            side = None
            clean_up()
    return None, "eager (" + "; ".join(notes) + ")"


class strict_fp32:
    """Full fp32 for the reference, then the exact state before. torch's matmul setting
    (torch.backends.cuda.matmul.fp32_precision, where torch has it) is restored as it was: going back through
    set_float32_matmul_precision would turn its "none" into "ieee", which is part of inductor's cache key, so a
    cell would miss a compile that a process without the reference (--perf-precompile) had cached."""

    def __enter__(self):
        matmul = torch.backends.cuda.matmul
        self.old = (
            torch.get_float32_matmul_precision(),
            torch.backends.cudnn.allow_tf32,
            getattr(matmul, "fp32_precision", None),
        )
        torch.set_float32_matmul_precision("highest")
        torch.backends.cudnn.allow_tf32 = False

    def __exit__(self, *exc):
        torch.set_float32_matmul_precision(self.old[0])
        torch.backends.cudnn.allow_tf32 = self.old[1]
        if self.old[2] is not None:
            torch.backends.cuda.matmul.fp32_precision = self.old[2]


def cached(directory: str | None, key: str | None, make: Callable[[], tuple]) -> tuple[list | None, str, str]:
    """(steps, kind, what the cache did): "hit" (read from `directory`), "stored" (computed by `make` and
    written), "off" (no directory), or "not stored: why" (computed; the key could not be formed, the
    reference is too large, the write failed). A file that cannot be read is computed again and replaced."""
    if directory is None:
        return (*make(), "off")
    if key is None:
        return (*make(), "not stored: no key (a builder or loss function whose source cannot be read)")
    path = Path(directory) / key[:2] / f"{key}.pt"
    if path.is_file():
        try:
            saved = torch.load(path, mmap=True, weights_only=True)
            if saved.get("format") == REFERENCE_FORMAT:
                return saved["steps"], saved["kind"], "hit"
        except Exception:  # noqa: BLE001 - a torn or foreign file: compute it again, below
            pass
    steps, kind = make()
    if steps is None:
        return steps, kind, "not stored: no reference fitted"
    size = sum(t.numel() * t.element_size() for step in steps for t in step.values())
    if size > MAX_STORED_BYTES:
        return steps, kind, f"not stored: {size / 2**30:.1f} GiB is over {MAX_STORED_BYTES / 2**30:.0f} GiB"
    try:
        _write(path, {"format": REFERENCE_FORMAT, "kind": kind, "steps": steps})
    except OSError as err:
        return steps, kind, f"not stored: {error_line(err)}"
    return steps, kind, "stored"


def _write(path: Path, payload: dict) -> None:
    """Atomically: a temp file beside it, then a rename (two processes storing one key both leave a whole file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.stem[:8]}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            torch.save(payload, fh)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def key(spec, cell, size, seed: int, batches: list[dict], device: torch.device, world: int = 1) -> str | None:
    """The cache key of a reference (module docstring), or None where a source file cannot be read."""
    functions = [spec.build, spec.loss if cell.phase != "infer" else spec.predict]
    try:
        sources = sorted({_source_digest(fn) for fn in functions})
    except (OSError, TypeError):
        return None
    parts = {
        "format": REFERENCE_FORMAT,
        "model": spec.name,
        "sources": sources,
        "config": repr(sorted(size.config.items())),
        "batch": size.batch,
        "lr": spec.lr,
        "seed": seed,
        "phase": "train" if cell.phase == "ddp" else cell.phase,
        "kinds": kinds(cell.precision),
        "batches": _batches_digest(batches),
        "world": world,
        "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
        "versions": {dist: _version(dist) for dist in ("torch", "transformers", "timm")},
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()


def _source_digest(fn) -> str:
    path = inspect.getsourcefile(inspect.unwrap(getattr(fn, "func", fn)))
    if path is None:
        raise TypeError(f"no source file for {fn!r}")
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def _batches_digest(batches: list[dict]) -> str:
    digest = hashlib.sha256()
    for batch in batches:
        for name in sorted(batch):
            tensor = batch[name].detach().cpu().contiguous()
            digest.update(f"{name}:{tensor.dtype}:{tuple(tensor.shape)}".encode())
            digest.update(tensor.view(torch.uint8).numpy().tobytes() if tensor.numel() else b"")
    return digest.hexdigest()


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
