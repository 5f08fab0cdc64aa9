"""What a kept cache already holds: a marker per cell that --perf-precompile compiled into it, so a later run
with the same cache skips those cells' precompile (on an H100 lease, 2026-11-25, the PR tier's precompile took
1:04 with a warm cache, only to find its 12 cells' graphs there; markers make that seconds).

A marker's key is everything that decides the cell's graphs: the cell, the TF32 policy, the GPU's name, torch,
triton, transformers and timm versions, and the source of perfgate and of the zoo's package. A stale or lost
cache entry behind a marker costs time, never a wrong figure: the cell's first call then compiles in its own
process, and its record says so (compile_cache_misses). Each key has a marker of its own, so two trees sharing
a cache (a runner that gates main and a PR in turn) keep each other's: with one marker a cell, each overwrote
the other's and the next run of the first precompiled again (an H100 lease, 2026-11-27: 39 s for 6 cells).

A second marker per key says the cache holds the cell's launch-config picks as a cell timed them, with its GPU to
itself (`picks_timed`): a precompile removes the picks its processes timed beside each other (perfgate.measure.
precompile), so a compiled marker alone says the picks are gone. A paired cell's two sides prepare at once only
where the picks marker is there; else the first side times the picks alone and the second loads them.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import importlib.util
import json
from pathlib import Path
from typing import Iterable

from perfgate.core.matrix import Cell

MARKERS = "perfgate-precompiled"  # the markers' folder, inside the kept cache
PICKS = "perfgate-picked"  # the picks markers' folder, beside it


def key(cell: Cell, tf32: bool, gpu: str | None, registry: str) -> str:
    parts = {
        "cell": cell.id,
        "tf32": tf32,
        "gpu": gpu if cell.device_kind == "gpu" else None,
        "versions": {d: _version(d) for d in ("torch", "triton", "transformers", "timm")},
        "sources": sources_digest(registry),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()


# Once per process: every cell's key shares it, and a nightly's 369 cells would otherwise read the whole tree
# 369 times before the first compile.
@functools.cache
def sources_digest(registry: str) -> str:
    """sha256 of every .py file of perfgate and of the registry's top package (the zoo), by relative path."""
    digest = hashlib.sha256()
    # sorted: a set of paths iterates in an order that changes with each process's hash seed
    for root in sorted({_package_dir("perfgate"), _package_dir(registry.partition(":")[0].split(".")[0])} - {None}):
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def split(cells: Iterable[Cell], cache_dir: str, keys: dict[str, str]) -> tuple[list[Cell], list[Cell]]:
    """(cells to compile, cells the cache holds under the same key)."""
    todo, held = [], []
    for cell in cells:
        try:
            same = json.loads(marker(cache_dir, cell.id, keys[cell.id]).read_text()).get("key") == keys[cell.id]
        except (OSError, ValueError, AttributeError):
            same = False
        (held if same else todo).append(cell)
    return todo, held


def marker(cache_dir: str, cell_id: str, key: str, folder: str = MARKERS) -> Path:
    """The marker of a cell compiled under `key` (its file name carries the key's first 16 hex digits); in
    `folder` PICKS, the marker of its timed picks."""
    return Path(cache_dir) / folder / f"{cell_id}.{key[:16]}.json"


def marked(cache_dir: str) -> set[str]:
    """The ids of the cells a precompile marked in the cache, under any key (no torch: an ETA's and an order's
    guess, never a figure)."""
    return {path.name.rsplit(".", 2)[0] for path in (Path(cache_dir) / MARKERS).glob("*.json")}


def mark(results: list[dict], cache_dir: str, keys: dict[str, str]) -> None:
    """A marker for each cell whose precompile went ok; its picks marker goes, as the precompile removed the
    picks it timed."""
    (Path(cache_dir) / MARKERS).mkdir(parents=True, exist_ok=True)
    for line in results:
        if line.get("status") == "ok" and line["cell"] in keys:
            key = keys[line["cell"]]
            marker(cache_dir, line["cell"], key).write_text(json.dumps({"key": key}) + "\n")
            marker(cache_dir, line["cell"], key, PICKS).unlink(missing_ok=True)


def picks_timed(cell_ids: Iterable[str], cache_dir: str, keys: dict[str, str], pair: str) -> set[str]:
    """The cells whose picks a cell of an earlier run timed alone on its GPU, under the same key and between
    the same two sides (`pair`: a base of other code compiles other kernels, whose picks are not there)."""
    timed = set()
    for cell_id in (c for c in cell_ids if c in keys):
        try:
            held = json.loads(marker(cache_dir, cell_id, keys[cell_id], PICKS).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(held, dict) and held.get("key") == keys[cell_id] and held.get("pair") == pair:
            timed.add(cell_id)
    return timed


def mark_picked(cache_dir: str, cell_id: str, key: str, pair: str) -> None:
    """The cell ran whole with this cache between the two sides `pair` describes: its kernels' picks are
    there, timed by its own first side."""
    path = marker(cache_dir, cell_id, key, PICKS)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"key": key, "pair": pair}) + "\n")


def _package_dir(name: str) -> Path | None:
    spec = importlib.util.find_spec(name)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return Path(locations[0]) if locations else None


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None
