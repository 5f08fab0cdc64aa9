"""Reading a stored record: what it says beyond its fields' own values, whichever schema wrote it (the schemas:
perfgate.core.record's docstring). Did its cell finish, does any baseline file own it, where did it run, how warm
was its first compile, does its compiled peak mean today's. Apart from the table and the making of new records
(perfgate.core.record), which the measuring side imports; these are the data side's. Imports no torch.
"""

from __future__ import annotations

from perfgate.core.record import COMPILED_PEAK_MISREAD, ENGINE_FAILED, UNFINISHED


def unfinished(record: dict) -> bool:
    """A checkpoint whose cell never ended: what its process reached when it was stopped (cell.py)."""
    return record.get("status") == "failed" and str(record.get("reason", "")).startswith(UNFINISHED)


def engine_failed(record: dict) -> bool:
    """A failed record whose cell never ran because perfgate's own paired engine broke: no verdict on the code."""
    return record.get("status") == "failed" and str(record.get("reason", "")).startswith(ENGINE_FAILED)


def unfiled(record: dict) -> bool:
    """A skipped record with no environment: nothing measured it, so no baseline file is its own (a GPU
    cell skipped on a machine without CUDA)."""
    return record.get("status") == "skipped" and not (record.get("env") or {}).get("fingerprint")


def process_of(record: dict) -> str | None:
    """Where the cell of `record` ran: its `process` (schema 10 on); for schemas 8 and 9, "worker" where its
    stage account has the worker's process start and "pytest" where it has none; None where nobody can tell
    (older records, whose isolation depended on --perf-isolate, or a data-parallel cell before 10)."""
    if record.get("process"):
        return record["process"]
    stages = record.get("stages")
    if (record.get("schema") or 1) < 8 or not stages or record.get("phase") == "ddp":
        return None
    return "worker" if "process_start" in stages else "pytest"


def first_call_cache(record: dict) -> str:
    """What the first compiled call found in the inductor cache: "cold" (a fresh cache, or a kept one it
    missed in), "warm" (every lookup hit), "partly warm", "kept cache" (a kept cache of a record older than
    schema 6: it may have been warm) or "no cache" (a backend that looks nothing up)."""
    hits, misses = record.get("compile_cache_hits"), record.get("compile_cache_misses")
    if hits is None or misses is None:
        return "cold" if record.get("compile_cache") == "fresh" else "kept cache"
    if hits == 0:
        return "cold" if misses or record.get("compile_cache") == "fresh" else "no cache"
    return "warm" if misses == 0 else "partly warm"


def graphs_came_alike(a: dict, b: dict) -> bool:
    """Whether two records' processes got their compiled graphs the same way: both compiled them ("cold") or
    both loaded every one from the cache ("warm", first_call_cache). A graph loaded from the cache runs
    another runtime wrapper than one compiled in the process, and the step's Python calls differ
    (docs/measuring.md); unknown, partly warm or no cache is not alike."""
    way = first_call_cache(a)
    return way in ("cold", "warm") and first_call_cache(b) == way


def compiled_peak_is_right(record: dict) -> bool:
    """Whether the record's peak_mem_compiled_mb means what it means today (COMPILED_PEAK_MISREAD)."""
    return (record.get("schema") or 1) not in COMPILED_PEAK_MISREAD
