"""The stages of a cell's run, and what each cost: one vocabulary for the measuring side (which fills a record's
`stages`), the run-end summary and the reports. Imports no torch.

Every moment of a cell belongs to exactly one stage, so a record's stages sum to its `wall_s`: the measuring
side switches from one stage to the next (perfgate.measure.pipeline.StageClock), and what no stage claims
(clean-up between stages) is "other". A cell measured again for the gate (a confirm round, or a flagged cell's
why-artifacts) is a cost of the gate, not of measuring: its whole wall time counts as CONFIRM in a run's totals.
"""

from __future__ import annotations

from typing import Callable, Iterable

# Stage -> what it is, in the order a cell runs them. The keys are the record's `stages` keys.
STAGES: dict[str, str] = {
    "process_start": "the cell's process: a new interpreter importing torch and the zoo, or a warm worker "
    "taking the job (~0 s)",
    "build": "seeded weights, batches, the eager and compiled sides",
    "reference": "the fp64 (else strict fp32) steps numerics judges against: read from the reference cache, or "
    "computed (and stored)",
    "held": "a paired side's wait for its turn: its first compiled call, which times the kernels' launch "
    "configs, and the other side's run with the GPU to themselves (perfgate.ab.pair_prepare: a cold first "
    "process pair)",
    "compile": "the first compiled call (cold, or from a kept cache: compile_cache_hits says which)",
    "numerics": "eager's and compiled's captured steps, and the judge",
    "warmup": "both sides' steps until steady",
    "timing": "the interleaved timed rounds: the wall clock, what a cell exists for",
    "device_clock": "profiled rounds: GPU-busy time per step (a data-parallel cell: its step breakdown)",
    "host_clock": "single steps from an idle GPU: host time to issue a step",
    "counts": "a few steps of each side counted (Python calls, ATen ops, kernels, cache lookups, instructions), "
    "never timed",
    "scaling": "a data-parallel cell's same step on one device, for its scaling figure",
    "extras": "recompile counts, FLOPs, throughput, other processes on the GPU, why-artifact traces",
    "warm_compile": "the compile again in this process with warm caches (--perf-warm-compile on; skipped where "
    "the first call was already warm)",
    "artifacts": "the compile in a fresh process handed the cache artifacts (--perf-warm-compile artifacts)",
    "other": "clean-up, and whatever no stage claimed",
}
# The cost of a cell measured again for the gate, in a run's totals (never a key of one record's stages).
CONFIRM = "confirm"
# A record's `remeasure`: why the gate measured this cell again.
REMEASURES = ("confirm", "why-artifacts")


def totals(records: Iterable[dict], weight: Callable[[dict], float] = lambda _r: 1.0) -> dict[str, float]:
    """Seconds per stage over `records` (each record's times `weight(record)`: the GPUs it held, for
    GPU-seconds), in STAGES order then CONFIRM; a re-measured record's whole wall time is CONFIRM. A record
    without a stage account (older schemas) counts its wall time as "other"."""
    out = {stage: 0.0 for stage in (*STAGES, CONFIRM)}
    for record in records:
        w = weight(record)
        wall = float(record.get("wall_s") or 0.0) * w
        if record.get("remeasure"):
            out[CONFIRM] += wall
            continue
        stages = record.get("stages") or {}
        for stage, seconds in stages.items():
            out[stage if stage in out else "other"] += float(seconds or 0.0) * w
        if not stages:
            out["other"] += wall
    return {stage: seconds for stage, seconds in out.items() if seconds > 0}


def share(stage_seconds: dict[str, float], stage: str) -> float | None:
    """`stage`'s fraction of the whole (None when nothing was counted)."""
    whole = sum(stage_seconds.values())
    return stage_seconds.get(stage, 0.0) / whole if whole else None
