"""Fill a kept inductor cache with the selected cells' compiles, several processes at once, before the run
times them (--perf-precompile N with --perf-cache-dir). Timing needs the GPU alone; compiling does not:
on an H100 lease, 15-16 max-autotune and reduce-overhead compiles in 5-6 processes finished 3.4-3.8x
faster than one after another would have (docs/matrix.md, 2026-11-24). Each child builds a cell's compiled
side as the cell does (its model, batches, precision, TF32 policy, cache directory) and takes the steps
that compile it. The cells then find their compiles in the cache: their records say so
(compile_cache_hits), so a warm first call is never read as a cold one.

    python -m perfgate.measure.precompile --registry fixtures:REGISTRY --cache DIR --device cuda:0 \
        --tf32 on --out FILE CELL_JSON...      (what the plugin runs in each child; CPU cells compile on "cpu")

The children take the visible GPUs in turn: a runner's GPUs all compile, as they all time.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict
from pathlib import Path

from perfgate.core.matrix import VARIANTS, Cell
from perfgate.core.record import error_line
from perfgate.measure.children import child_environ, die_with_parent, import_path, kill_groups


def wanted(cell: Cell, has_cuda: bool) -> bool:
    """Cells whose compile a cache can hold: inductor's (aot_eager and cudagraphs compile in seconds and
    cache nothing); not a data-parallel cell, whose ranks compile under DDP in processes of their own; not a
    GPU cell without a GPU (it skips)."""
    return (VARIANTS[cell.variant].backend == "inductor" and cell.phase != "ddp"
            and (has_cuda or cell.device_kind != "gpu"))


def cuda_devices() -> list[str]:
    """Where GPU cells can compile: every visible CUDA device (the children take them in turn)."""
    import torch

    return [f"cuda:{index}" for index in range(torch.cuda.device_count())] if torch.cuda.is_available() else []


def run(shares: list[list[Cell]], *, cache_dir: str, registry: str, devices: list[str], tf32: bool, out: Path,
        limit_s: float) -> list[dict]:
    """Compile each share of cells in a child process of its own, all at once, child k's GPU cells on
    devices[k % len(devices)]; every child stops at `limit_s`. Returns one line per cell (status ok, or
    failed with its reason), also written to `out` (a JSON list)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = os.pathsep.join(import_path())
    started, children, results = time.monotonic(), [], []
    with tempfile.TemporaryDirectory(prefix="perfgate-precompile-") as scratch:
        for index, share in enumerate(s for s in shares if s):
            lines, stderr = Path(scratch) / f"{index}.jsonl", Path(scratch) / f"{index}.stderr"
            argv = [sys.executable, "-m", "perfgate.measure.precompile", "--registry", registry,
                    "--cache", cache_dir, "--device", devices[index % len(devices)] if devices else "cpu",
                    "--tf32", "on" if tf32 else "off", "--out", str(lines), "--sys-path", path,
                    *[json.dumps(asdict(cell)) for cell in share]]
            with stderr.open("w") as sink:  # a file, not a pipe: a chatty child must never block on it
                # Its own session: at the time limit the whole group goes, inductor's compile workers too.
                child = subprocess.Popen(argv, env=child_environ(), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=sink, start_new_session=True)
            children.append((share, lines, stderr, child))
        collected, timed_out = 0, False
        try:
            for share, lines, stderr, child in children:
                try:
                    if not timed_out:  # else it was killed with the first child past the limit
                        child.wait(timeout=max(limit_s - (time.monotonic() - started), 1.0))
                except subprocess.TimeoutExpired:
                    timed_out = True
                    kill_groups(*(c for *_, c in children[collected:]))  # one limit: every child left is past it
                why = f"timed out after {limit_s:g} s" if timed_out else (
                    stderr.read_text(errors="replace").strip().splitlines()[-1:] or
                    [f"exit code {child.returncode}"])[0]
                results += _lines(share, lines, why, stopped=timed_out)
                collected += 1
        except BaseException:  # Ctrl-C, a CI step's timeout: no child outlives the run; what it did is kept
            kill_groups(*(child for *_, child in children[collected:]))
            for share, lines, _, child in children[collected:]:
                results += _lines(share, lines, "interrupted", stopped=True)
            _write(out, results)
            raise
    _write(out, results)
    return results


def _lines(share: list[Cell], lines: Path, why: str, stopped: bool = False) -> list[dict]:
    """What a child wrote for its share, and a failed line with `why` for each cell it did not finish. Where
    the child was `stopped` (killed now: the limit, an interrupt), the cell it was compiling says for how long
    (`stopped_after_s`): a lower bound on its compile, the figure a known issue needs ("max-autotune compile
    > 505 s"); the cells after it say "not started"."""
    written = [json.loads(line) for line in lines.read_text().splitlines()] if lines.exists() else []
    done = [line for line in written if "status" in line]
    started = {line["cell"]: line["started_at"] for line in written if "started_at" in line}
    seen = {line["cell"] for line in done}
    missing = []
    for cell in (c for c in share if c.id not in seen):
        line = {"cell": cell.id, "status": "failed", "reason": f"not compiled: {why[:300]}"}
        if cell.id not in started:
            line["reason"] += " (not started)"
        elif stopped:
            line["stopped_after_s"] = round(time.time() - started[cell.id], 1)
        missing.append(line)
    return done + missing


def _write(out: Path, results: list[dict]) -> None:
    # One JSON list, not JSON lines: a results folder's *.jsonl are cell records, which these are not.
    out.write_text(json.dumps(results, indent=1) + "\n")


def compile_cell(spec, cell: Cell, cache_dir: str, device: str, tf32: bool, seed: int = 0) -> dict:
    """The cell's compiled side, built and stepped as perfgate.measure.cell does, into `cache_dir`."""
    from perfgate.measure import introspect
    from perfgate.measure.cell import clean_up, compile_cache
    from perfgate.measure.devices import start_cell
    from perfgate.measure.steps import cell_batches, compiled_side, initial_state, sync

    line = {"cell": cell.id}
    started = time.perf_counter()
    try:
        dev = start_cell(device, tf32)
        size = spec.size(cell)
        with compile_cache(cache_dir, {}, cell.precision):
            introspect.reset_compiler()
            state = initial_state(spec, size, seed)
            _, batches, _ = cell_batches(spec, cell, size, seed, dev)
            side = compiled_side(spec, cell, size, state, dev, None)
            first = time.perf_counter()
            side.captured_step(batches[0], tensors=False)
            sync(dev)
            line["first_call_s"] = round(time.perf_counter() - first, 3)
            for batch in batches[1:] + batches[:1]:  # every length of a stream; a train step's second call
                side.captured_step(batch, tensors=False)
            sync(dev)
            line.update(introspect.cache_counts(), status="ok")
    except Exception as err:  # noqa: BLE001 - one cell's failure is its line, the next cell still compiles
        line.update(status="failed", reason=error_line(err))
    finally:
        clean_up()
    line["wall_s"] = round(time.perf_counter() - started, 3)
    return line


def main(argv: list[str] | None = None) -> int:
    from perfgate.core import zoo

    # Its own session keeps it from a terminal's Ctrl-C, so without this a parent killed hard (a CI step's
    # or a device call's limit) would leave it compiling: seen on an H100 lease (2026-11-24), where seven
    # orphaned max-autotune compiles autotuned on the GPU beside the next calls' timed cells.
    die_with_parent()
    parser = argparse.ArgumentParser(prog="python -m perfgate.measure.precompile")
    parser.add_argument("--registry", required=True)
    parser.add_argument("--cache", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--tf32", choices=("on", "off"), required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--sys-path", required=True, help="the parent's sys.path, os.pathsep-joined")
    parser.add_argument("cells", nargs="+", metavar="CELL_JSON")
    args = parser.parse_args(argv)
    sys.path[:] = args.sys_path.split(os.pathsep)  # the parent's (children.import_path)
    registry = zoo.load(args.registry)
    for text in args.cells:
        cell = Cell(**json.loads(text))
        device = "cpu" if cell.device_kind == "cpu" else args.device  # --device: where GPU cells compile
        with open(args.out, "a") as sink:  # line by line: a child killed at its limit keeps what it did
            sink.write(json.dumps({"cell": cell.id, "started_at": time.time()}) + "\n")  # Unix s, for _lines
        line = compile_cell(registry[cell.model], cell, args.cache, device, args.tf32 == "on")
        with open(args.out, "a") as sink:
            sink.write(json.dumps(line) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
