"""A warm compile from torch.compiler.save_cache_artifacts() output, in a fresh process.

With `--perf-warm-compile=artifacts`, after a cell's cold compile and measurement this process saves the
"mega-cache" its compile left (FX graph, AOTAutograd, autotune and Triton artifacts). A new Python process
with brand-new, empty inductor and Triton cache directories loads those bytes and compiles the same side
again; what it pays for the load and the first compiled call is what a new machine handed the artifacts
pays. Measured in this process the number would mean nothing: here the compile is as fast without them.

The child finds the model by the registry's import path and the model's name (a spec holds lambdas and
cannot be pickled), builds the side with the cell's own code (perfgate.measure.steps) and writes one JSON result.
A child that fails or hangs never fails the cell: the record's compile_artifacts_note says why its time is null.

The fresh process is perfgate.measure.child, handed the cell as a job of purpose "artifacts".
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from pathlib import Path

import torch

from perfgate.core import zoo
from perfgate.core.job import Job
from perfgate.core.record import error_line
from perfgate.measure import introspect
from perfgate.measure.launch import import_path, kill_groups, spawn, stderr_tail, supervise
from perfgate.measure.record_builder import ArtifactsCompile, SavedArtifacts
from perfgate.measure.steps import cell_batches, compiled_side, initial_state, sync

# A cold GPU training compile took 25-70 s on an H100; loading artifacts should cost less. Past this many
# seconds the child (and its compile workers) is killed and the cell goes on without the number.
CHILD_TIMEOUT_S = 600.0


@contextlib.contextmanager
def fresh_recording():
    """Give the cell an empty artifact recorder. torch records the artifacts of every compile in the process
    (CacheArtifactManager, class-level state), so without this the cell would save every earlier cell's
    compiles too, and the session would hold them all in memory. with_fresh_cache restores what was there
    before; a torch without it gets the recorder cleared; one without the manager gets nothing."""
    try:
        from torch.compiler._cache import CacheArtifactManager
    except ImportError:
        yield
        return
    fresh = getattr(CacheArtifactManager, "with_fresh_cache", None)
    if fresh is None:
        getattr(CacheArtifactManager, "clear", lambda: None)()
        yield
        return
    with fresh():
        yield


def save() -> SavedArtifacts:
    """This cell's cache artifacts as bytes (the record keeps their size), or none and a note why."""
    save_artifacts = getattr(torch.compiler, "save_cache_artifacts", None)
    if save_artifacts is None:
        return SavedArtifacts(None, f"torch {torch.__version__} has no torch.compiler.save_cache_artifacts")
    try:
        saved = save_artifacts()
    except Exception as err:  # noqa: BLE001 - a failed save must not fail a cell that measured fine
        return SavedArtifacts(None, f"save_cache_artifacts: {error_line(err)}")
    if saved is None:
        return SavedArtifacts(
            None,
            "save_cache_artifacts() returned None: the compile left no cache "
            "artifacts (a backend without inductor caches, or caches off)",
        )
    return SavedArtifacts(saved[0])


def measure_in_child(
    data: bytes, cell, options, timeout_s: float = CHILD_TIMEOUT_S, tf32: bool | None = None
) -> ArtifactsCompile:
    """Time load + first compiled call in a fresh process handed `data` (the record's compile_artifacts_*
    fields). Never raises: whatever goes wrong becomes the note."""
    if options.registry is None:
        return ArtifactsCompile(note="no model registry to rebuild the model from (RunOptions.registry)")
    try:
        with tempfile.TemporaryDirectory(prefix="perfgate-artifacts-") as tmp:
            result = _run_child(Path(tmp), data, cell, options, timeout_s, tf32)
    except Exception as err:  # noqa: BLE001 - the cell measured fine; this number is extra
        result = {"error": f"could not run the child: {error_line(err)}"}
    if "error" in result:
        return ArtifactsCompile(note=f"fresh process: {result['error']}")
    cold = (
        f"no cache hit in the fresh process ({result['misses']} misses): it compiled cold, the artifacts went unused"
        if result["hits"] == 0
        else None
    )
    return ArtifactsCompile(result["seconds"], result["hits"], cold)


def _run_child(directory: Path, data: bytes, cell, options, timeout_s: float, tf32: bool | None) -> dict:
    """A fresh process (perfgate.measure.child) with brand-new, empty inductor and Triton cache directories:
    nothing of this process's caches reaches it. Its fp32 policy is this process's (part of inductor's cache
    key): the cell's TF32 setting where it is a CUDA cell."""
    (directory / "artifacts.bin").write_bytes(data)
    cache = directory / "inductor"
    if tf32 is None:
        tf32 = options.device.startswith("cuda") and torch.get_float32_matmul_precision() != "highest"
    job = Job(
        cell=cell,
        options=options,
        tf32=tf32,
        purpose="artifacts",
        limit_s=timeout_s,
        artifacts_path=str(directory / "artifacts.bin"),
        sys_path=tuple(import_path()),
    )
    child = spawn(
        directory / "child",
        "the fresh process",
        TORCHINDUCTOR_CACHE_DIR=str(cache),
        TRITON_CACHE_DIR=str(cache / "triton"),
    )
    events = child.send(job.to_json(), last=True)
    try:
        failure = supervise([child], limit_s=timeout_s, events=events, finished=lambda: events.result is not None)
    finally:
        kill_groups(child)  # timed out, or interrupted while waiting: leave no orphan compiling
    events.read()
    if events.result is not None:
        return events.result
    if failure and failure.startswith("timed out"):
        return {"error": failure.partition(" while ")[0]}
    tail = [line for line in stderr_tail(child.stderr)]
    return {"error": f"exit status {child.poll()}: {tail[-1][:500] if tail else '(no stderr)'}"}


def first_call(job) -> dict:
    """In the fresh process: build the cell's compiled side as the cell does, then time load + first compiled
    call (device-synchronised). Interpreter start, imports and the model build are not counted. Any failure
    is the result's "error"."""
    try:
        return _first_call(job)
    except Exception as err:  # noqa: BLE001 - reported to the parent as the note's first line
        return {"error": error_line(err)}


def _first_call(job) -> dict:
    from perfgate.measure.devices import start_cell

    registry, name = zoo.load(job.options.registry), job.cell.model
    if name not in registry:
        raise LookupError(f"no model {name!r} in {job.options.registry}")
    spec, cell = registry[name], job.cell
    device = start_cell(job.options.device, job.tf32)
    size = spec.size(cell)
    state = initial_state(spec, size, job.options.seed, device)
    _, batches, _ = cell_batches(spec, cell, size, job.options.seed, device)
    side = compiled_side(spec, cell, size, state, device, job.options.fault)
    data = Path(job.artifacts_path).read_bytes()
    sync(device)
    t0 = time.perf_counter()
    if torch.compiler.load_cache_artifacts(data) is None:
        raise RuntimeError("load_cache_artifacts() could not read the saved artifacts")
    side.step(batches[0])
    sync(device)
    seconds = time.perf_counter() - t0
    # Zero hits means the load went unused (a key that differs between the processes) however fast the
    # compile was.
    return {"seconds": round(seconds, 3), **introspect.cache_counts()}
