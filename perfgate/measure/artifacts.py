"""A warm compile from torch.compiler.save_cache_artifacts() output, in a fresh process.

With `--perf-warm-compile=artifacts`, after a cell's cold compile and measurement this process saves the
"mega-cache" its compile left (FX graph, AOTAutograd, autotune and Triton artifacts). A new Python process
with brand-new, empty inductor and Triton cache directories loads those bytes and compiles the same side
again; what it pays for the load and the first compiled call is what a new machine handed the artifacts
pays. Measured in this process the number would mean nothing: here the compile is as fast without them.

The child finds the model by the registry's import path and the model's name (a spec holds lambdas and
cannot be pickled), builds the side with the cell's own code (perfgate.measure.steps) and writes one JSON result. A child that fails
or hangs never fails the cell: the record's compile_artifacts_note says why its time is null.

Run as `python -m perfgate.measure.artifacts JOB_DIR` (by measure_in_child only).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from perfgate.measure import introspect
from perfgate.measure.children import child_environ, die_with_parent, import_path, kill_groups
from perfgate.measure.faults import Fault
from perfgate.core import zoo
from perfgate.core.matrix import Cell
from perfgate.core.record import error_line
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


def save(record: dict) -> bytes | None:
    """This cell's cache artifacts as bytes (their size goes into the record), or None with a note why."""
    save_artifacts = getattr(torch.compiler, "save_cache_artifacts", None)
    if save_artifacts is None:
        record["compile_artifacts_note"] = f"torch {torch.__version__} has no torch.compiler.save_cache_artifacts"
        return None
    try:
        saved = save_artifacts()
    except Exception as err:  # noqa: BLE001 - a failed save must not fail a cell that measured fine
        record["compile_artifacts_note"] = f"save_cache_artifacts: {error_line(err)}"
        return None
    if saved is None:
        record["compile_artifacts_note"] = ("save_cache_artifacts() returned None: the compile left no cache "
                                            "artifacts (a backend without inductor caches, or caches off)")
        return None
    data = saved[0]
    record["compile_artifacts_bytes"] = len(data)
    return data


def measure_in_child(data: bytes, cell, options, record: dict, timeout_s: float = CHILD_TIMEOUT_S) -> None:
    """Time load + first compiled call in a fresh process handed `data`; fills the compile_artifacts_*
    fields of `record`. Never raises: whatever goes wrong becomes compile_artifacts_note."""
    if options.registry is None:
        record["compile_artifacts_note"] = "no model registry to rebuild the model from (RunOptions.registry)"
        return
    try:
        with tempfile.TemporaryDirectory(prefix="perfgate-artifacts-") as job_dir:
            result = _run_child(Path(job_dir), data, _job(cell, options), timeout_s)
    except Exception as err:  # noqa: BLE001 - the cell measured fine; this number is extra
        result = {"error": f"could not run the child: {error_line(err)}"}
    if "error" in result:
        record["compile_artifacts_note"] = f"fresh process: {result['error']}"
        return
    record["compile_artifacts_s"], record["compile_artifacts_hits"] = result["seconds"], result["hits"]
    if result["hits"] == 0:
        record["compile_artifacts_note"] = (f"no cache hit in the fresh process ({result['misses']} misses): "
                                            "it compiled cold, the artifacts went unused")


def _job(cell, options) -> dict:
    """What the child needs to rebuild the compiled side, as JSON: the cell, where its spec lives, the
    device, seed, planted fault and the fp32 (TF32) policy in force here."""
    fault = options.fault
    return {
        "registry": options.registry,
        "cell": {key: getattr(cell, key) for key in ("model", "phase", "variant", "precision", "device_kind",
                                                      "tier")},
        "device": options.device,
        "seed": options.seed,
        "fault": None if fault is None else {"kind": fault.kind, "arg": fault.arg},
        "matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn_tf32": torch.backends.cudnn.allow_tf32,
        # torch's own matmul setting, where it has one: part of inductor's cache key, and "none" (never set)
        # is not what set_float32_matmul_precision("highest") leaves ("ieee").
        "matmul_fp32_precision": getattr(torch.backends.cuda.matmul, "fp32_precision", None),
        "sys_path": import_path(),
    }


def _run_child(job_dir: Path, data: bytes, job: dict, timeout_s: float) -> dict:
    (job_dir / "artifacts.bin").write_bytes(data)
    (job_dir / "job.json").write_text(json.dumps(job), encoding="utf-8")
    cache = job_dir / "inductor"  # brand-new and empty: nothing of this process's caches reaches the child
    env = child_environ(TORCHINDUCTOR_CACHE_DIR=str(cache), TRITON_CACHE_DIR=str(cache / "triton"))
    stderr_path = job_dir / "stderr.txt"
    with stderr_path.open("w", encoding="utf-8") as stderr:
        # Its own session: on a timeout the whole group goes, inductor's compile workers included.
        child = subprocess.Popen([sys.executable, "-m", "perfgate.measure.artifacts", str(job_dir)], env=env,
                                 stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr,
                                 start_new_session=True)
        try:
            child.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            return {"error": f"timed out after {timeout_s:g} s"}
        finally:
            kill_groups(child)  # timed out, or interrupted while waiting: leave no orphan compiling
    result = job_dir / "result.json"
    if result.exists():
        return json.loads(result.read_text(encoding="utf-8"))
    lines = [line for line in stderr_path.read_text(encoding="utf-8", errors="replace").splitlines() if line]
    return {"error": f"exit status {child.returncode}: {lines[-1][:500] if lines else '(no stderr)'}"}


def _first_call(job: dict, data: bytes) -> dict:
    """In the child: build the cell's compiled side as the cell does, then time load + first compiled call
    (device-synchronised). Interpreter start, imports and the model build are not counted."""
    registry, name = zoo.load(job["registry"]), job["cell"]["model"]
    if name not in registry:
        raise LookupError(f"no model {name!r} in {job['registry']}")
    spec = registry[name]

    cell = Cell(**job["cell"])
    device = torch.device(job["device"])
    if device.type == "cuda":
        torch.cuda.set_device(device)
    torch.set_float32_matmul_precision(job["matmul_precision"])
    torch.backends.cudnn.allow_tf32 = job["cudnn_tf32"]
    if job.get("matmul_fp32_precision") is not None:
        torch.backends.cuda.matmul.fp32_precision = job["matmul_fp32_precision"]
    size = spec.size(cell)
    state = initial_state(spec, size, job["seed"])
    _, batches, _ = cell_batches(spec, cell, size, job["seed"], device)
    side = compiled_side(spec, cell, size, state, device, Fault(**job["fault"]) if job["fault"] else None)
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


def main(argv: list[str] | None = None) -> int:
    die_with_parent()  # its own session: a parent killed hard must not leave it compiling
    job_dir = Path((sys.argv[1:] if argv is None else argv)[0])
    job = json.loads((job_dir / "job.json").read_text(encoding="utf-8"))
    sys.path[:] = job["sys_path"]
    try:
        result = _first_call(job, (job_dir / "artifacts.bin").read_bytes())
    except Exception as err:  # noqa: BLE001 - reported to the parent as the note's first line
        result = {"error": error_line(err)}
    (job_dir / "result.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
