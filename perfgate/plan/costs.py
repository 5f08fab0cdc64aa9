"""What a cell costs in wall seconds, before it runs: from the history where the cell has run, else a prior
per device kind, phase and variant. Used to deal shards of equal cost and to print an ETA. Imports no torch.

Priors, whole-cell seconds with a cold compile, from the H100 records in baselines/runs/ (2026-11-22/23,
amp_bf16): inductor_default train 41-192 s (median ~60), inference 15-66 s (median ~25); captioner train
160-340 s; max-autotune vit_b16 inference 157 s and resnet50 inference unfinished at ~300 s; regional 17-27 s;
reduce-overhead 24-95 s. 2026-11-24 (docs/matrix.md), cold, in-process: reduce-overhead train 80-113 s,
inference 31-50 s; cudagraphs and aot_eager 45-94 s and 18-50 s; gpt2 train max-autotune 461 s (a 376 s
compile), and max-autotune compiles of 41-418 s measured compile-only. An isolated cell (the GPU default) adds
its process's start, ~25 s on an H100 lease: cold isolated train cells took 83-158 s there (2026-11-23:
vit_b16 83, resnet50 108, gpt2 128, segformer_b2 158). The CPU tier's tiny cells take 5-60 s on the 2-core CI
box.

A GPU cell's prior is that cold figure times 0.4 (GPU_NOW, 2026-11-26): on the rebuilt pipeline the PR tier's
12 inductor_default cells measured 40 s a train cell and 19 s an inference cell warm in pytest's process (H100,
lease BG; docs/time-to-verdict.md), 46 and 18 s from the precompiled cache after a cold precompile, 57 and 19 s
in the isolated worker (AU), where the cold priors said 120 and 50 s and the ETA line printed 17:00 for a tier
whose cells took 6:01. The variant factors stay as measured, cold. The nightly's rotation slices are dealt by
the cold figures (rotation_weight), as they were first dealt: scaling changes float ties, and a slice that
moved cells mid-pass would run some twice and some never.
"""

from __future__ import annotations

import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import TYPE_CHECKING, Collection, Iterable, Mapping, Sequence

from perfgate.core.output import OutputError, write_atomic
from perfgate.core.record_reading import unfinished

if TYPE_CHECKING:
    from perfgate.core.matrix import Cell

# Seconds of an inductor_default cell with a cold compile, by device kind and phase (the figures above).
# A data-parallel cell compiles twice (DDP, then one device for its scaling figure) and starts its ranks.
COLD_PRIOR_S = {
    ("gpu", "train"): 120.0,
    ("gpu", "infer"): 50.0,
    ("gpu", "ddp"): 300.0,
    ("cpu", "train"): 30.0,
    ("cpu", "infer"): 15.0,
    ("cpu", "ddp"): 60.0,
}
# A variant's cost relative to inductor_default (max-autotune benchmarks every kernel's configurations).
VARIANT_FACTOR = {
    "inductor_max_autotune": 6.0,
    "inductor_max_autotune_no_cudagraphs": 5.0,
    "inductor_reduce_overhead": 1.4,
    "cudagraphs": 0.8,
    "aot_eager": 0.6,
    "inductor_regional": 0.4,
    "inductor_compiled_optimizer": 1.2,
    "inductor_buckets": 3.0,
    "inductor_mark_dynamic": 1.5,
    "inductor_mark_dynamic_no_pad": 3.0,
    "inductor_dynamic": 3.0,
}


# A GPU cell's seconds now against the cold figures: the rebuilt pipeline's measured PR cells (above).
GPU_NOW = 0.4


def rotation_weight(cell) -> float:
    """The cold prior: what the nightly's rotation slices are dealt by, so that they never move."""
    return COLD_PRIOR_S[(cell.device_kind, cell.phase)] * VARIANT_FACTOR.get(cell.variant, 1.0)


def prior_s(cell, weight: float = 1.0) -> float:
    """A cell's expected seconds when it has never run; `weight`: its model's cost (ModelSpec.cost)."""
    return rotation_weight(cell) * (GPU_NOW if cell.device_kind == "gpu" else 1.0) * weight


# A variant's cost relative to inductor_default once a kept cache holds its compiles (a run after a precompile,
# as the nightly's): the compile, which VARIANT_FACTOR weighs, is gone; warm-up, numerics and rounds are left.
# Measured on 4 x H200 1c60ab9c (2026-11-28, rotation slice 4/15 precompiled, -n 4), each ok cell's seconds over
# its inductor_default prior: inductor_default itself 0.6-1.7, max-autotune 1.3-2.4 and its no-cudagraphs twin 2.1,
# regional 1.0-1.6, reduce-overhead 0.8-1.5, fullgraph 0.6-2.2 (2.2 is the captioner's stream of 8 lengths, in every
# variant). So max-autotune 1.6, dynamic=True 4 (it recompiles inside the timed cell: the captioner's train step
# took 456 s, 3.9 times its inductor_default cell on that host), the rest 1. aot_eager and cudagraphs keep their
# cold factors: no cache holds their compiles (seconds each). With the cold factors that run's ETA read 0.18-0.39
# of the time it had left, with these 0.47-0.68 (docs/options.md).
WARM_VARIANT_FACTOR = {
    "inductor_max_autotune": 1.6,
    "inductor_max_autotune_no_cudagraphs": 1.6,
    "inductor_dynamic": 4.0,
}


def warm_prior_s(cell, weight: float = 1.0) -> float:
    """A cell's expected seconds when it has never run and a kept cache holds its compiles (`weight` as in
    prior_s)."""
    scale = GPU_NOW if cell.device_kind == "gpu" else 1.0
    return COLD_PRIOR_S[(cell.device_kind, cell.phase)] * WARM_VARIANT_FACTOR.get(cell.variant, 1.0) * scale * weight


# A paired cell's seconds (both sides, every process pair: cell_seconds) over its own side's (the record's
# wall_s, what the priors and the costs history hold): 1.50 and 1.50 in the whole PR tier's cold and warm A/As
# on 2xH200 23ebdea2, 1.32 and 1.14 on 4xH200 2aa41d77 (2026-11-27). The opening line and the ETA of a paired
# run use it; the costs themselves stay each cell's own, as the shards and the nightly's slices deal them.
PAIRED_OVER_OWN = 1.35


# A kept compile cache (--perf-cache-dir) keeps the seconds each cell took there: KEPT_COSTS, one JSON line a
# finished cell, {"cell", "seconds", "paired"} (cell_seconds: a paired cell's both sides and every process pair).
# `perfgate deal` deals its shards by a copy of it taken before they start (--perf-costs), so a runner whose cache
# was restored deals by what its cells cost there: dealt by the priors per phase, two H200s' warm shards took 4:44
# and 2:36 (8316f553, 2026-11-29), the slower one holding the captioner's train cell (118 s, both sides) and a
# second process pair. A copy, because its shards deal themselves and must read the same costs.
KEPT_COSTS = "costs.jsonl"
KEPT_PER_CELL = 5  # a cell's latest lines that its cost is the median of


def cost_line(record: dict) -> dict | None:
    """The kept cache's line for a finished cell's record, or None (a checkpoint, a skip, no seconds)."""
    seconds = cell_seconds(record)
    if record.get("status") not in ("ok", "failed") or unfinished(record) or not seconds > 0:
        return None
    return {"cell": record["cell"], "seconds": round(float(seconds), 2), "paired": bool(record.get("paired"))}


def cost_lines(path: str | os.PathLike) -> list[dict]:
    """A costs file's lines, oldest first; a line that is no cost (torn by a killed writer, edited, nested past
    the parser's depth) is left out, and a file that is not there has none. A file that cannot be read raises
    OSError."""
    if not Path(path).is_file():
        return []
    return parse_cost_lines(Path(path).read_text(encoding="utf-8", errors="replace"))


def costs_file_problem(path: str | os.PathLike) -> str:
    """Why a file given as --perf-costs that is no database is no costs file either, or "" (an empty file is
    one of no costs)."""
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as err:
        return f"cannot read it: {err.strerror or err}"
    if text.strip() and not parse_cost_lines(text):
        shape = '{"cell": id, "seconds": s}'
        return f"neither a history database nor a costs file (JSON lines of {shape}, as a --perf-cache-dir keeps)"
    return ""


def parse_cost_lines(text: str) -> list[dict]:
    """cost_lines of a costs file's text."""
    lines = []
    for raw in text.splitlines():
        try:
            line = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if not isinstance(line, dict):
            continue
        seconds = _seconds(line.get("seconds"))
        if isinstance(line.get("cell"), str) and seconds is not None:
            lines.append({"cell": line["cell"], "seconds": seconds, "paired": line.get("paired") is True})
    return lines


def _seconds(value) -> float | None:
    """A line's seconds: a finite number above 0, else None."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        seconds = float(value)  # an int past float's range: OverflowError
    except OverflowError:
        return None
    return seconds if math.isfinite(seconds) and seconds > 0 else None


def kept_costs(lines: Sequence[dict]) -> dict[str, float]:
    """{cell id: seconds} from a costs file's lines: the median of a cell's latest (latest_lines), in its own
    side's seconds as the history and the priors give them (a paired cell's over PAIRED_OVER_OWN), so that
    cells priced from either compare."""
    seen: dict[str, list[float]] = {}
    for line in latest_lines(lines):
        seen.setdefault(line["cell"], []).append(line["seconds"] / (PAIRED_OVER_OWN if line["paired"] else 1.0))
    return {cell: statistics.median(values) for cell, values in seen.items()}


def latest_lines(lines: Sequence[dict]) -> list[dict]:
    """Each cell's latest KEPT_PER_CELL lines, in their order: what kept_costs reads, and a costs file trimmed."""
    counted: dict[str, int] = {}
    kept = []
    for line in reversed(lines):
        counted[line["cell"]] = counted.get(line["cell"], 0) + 1
        if counted[line["cell"]] <= KEPT_PER_CELL:
            kept.append(line)
    return kept[::-1]


def snapshot(cache_dir: str | os.PathLike, dest: Path) -> bool:
    """A dealt run's copy of the kept cache's costs at `dest` (each cell's latest lines), for its shards'
    --perf-costs; whether there was one. The cache's own file is trimmed to them where it grew past four times
    as many: a line a session appends in that moment is lost, a cost and no measurement. Raises OutputError
    where `dest` cannot be written, OSError where the cache's file cannot be read."""
    path = Path(cache_dir) / KEPT_COSTS
    lines = cost_lines(path)
    kept = latest_lines(lines)
    if not kept:
        return False
    text = "".join(json.dumps(line, sort_keys=True) + "\n" for line in kept)
    write_atomic(dest, text)
    if len(lines) > 4 * len(kept):
        try:
            write_atomic(path, text)
        except OutputError:
            pass  # a read-only cache: its file keeps growing, read all the same
    return True


def known_costs(records: Iterable[dict]) -> dict[str, float]:
    """{cell id: median wall_s} over finished records (a record's checkpoints are not costs)."""
    seen: dict[str, list[float]] = {}
    for record in records:
        if record.get("wall_s") and record.get("status") in ("ok", "failed") and not unfinished(record):
            seen.setdefault(record["cell"], []).append(float(record["wall_s"]))
    return {cell: statistics.median(values) for cell, values in seen.items()}


def expected_s(
    cells: Iterable, known: Mapping[str, float], warm: Collection[str] = (), weights: Mapping[str, float] | None = None
) -> dict[str, float]:
    """{cell id: expected seconds}: the history's median where there is one, else the prior (the warm prior for
    the cells in `warm`, whose compiles a kept cache will hold when they run), a GPU cell's times its model's
    weight (`weights`: model name -> ModelSpec.cost, measured on GPUs; 1 for a model it does not name)."""
    weights = weights or {}

    def weight(cell) -> float:
        return weights.get(cell.model, 1.0) if cell.device_kind == "gpu" else 1.0

    return {
        cell.id: known.get(cell.id) or (warm_prior_s if cell.id in warm else prior_s)(cell, weight(cell))
        for cell in cells
    }


def deal(costs: Mapping[str, float], shards: int) -> list[list[str]]:
    """Cell ids dealt into `shards` of near-equal total cost: the longest first, each to the lightest shard
    (LPT; within 4/3 of the best split). Deterministic: ties go by id and shard index."""
    loads: list[tuple[float, int, list[str]]] = [(0.0, index, []) for index in range(shards)]  # (s, shard, ids)
    for cell_id in sorted(costs, key=lambda c: (-costs[c], c)):
        load, index, members = min(loads, key=lambda s: (s[0], s[1]))
        loads[index] = (load + costs[cell_id], index, members + [cell_id])
    return [members for _, _, members in loads]


def precompile_shares(cells: list[Cell], expected: dict[str, float], workers: int) -> list[list[Cell]]:
    """The cells dealt into `workers` shares of near-equal expected cost, each model x phase x precision whole
    and its dearest variant first: its variants compile many of the same kernels, which the later ones find
    in the cache (on an H100, max-autotune-no-cudagraphs took 41-110 s after max-autotune's 317-418 s)."""
    groups: dict[str, list[Cell]] = {}
    for cell in sorted(cells, key=lambda c: (-expected[c.id], c.id)):
        groups.setdefault(f"{cell.device_kind}-{cell.model}-{cell.phase}-{cell.precision}", []).append(cell)
    dealt = deal({key: sum(expected[c.id] for c in group) for key, group in groups.items()}, workers)
    return [[cell for key in share for cell in groups[key]] for share in dealt]


class Progress:
    """k/N, elapsed and an ETA over `planned` cells expected to take `planned_s` seconds in all. The ETA
    scales the expected seconds left by how the finished cells ran against theirs (this machine may be
    faster or slower than the history), over the parallel workers."""

    def __init__(self, planned: int, planned_s: float, workers: int = 1, clock=time.monotonic, started=None):
        self.planned, self.planned_s, self.workers, self.clock = planned, planned_s, max(workers, 1), clock
        self.started = clock() if started is None else started  # the clock's reading when the work began
        self.done: dict[str, tuple[float, float]] = {}  # cell id -> (wall s, expected s)
        self.gpu_s = 0.0  # GPU-seconds: each cell's wall time times the GPUs it held

    def finish(self, cell_id: str, wall_s: float | None, expected: float, gpus: int = 0) -> str:
        """Count a finished cell that held `gpus` GPUs (a data-parallel cell: its ranks; a CPU cell: none);
        the "[k/N] elapsed m:ss, about m:ss left" text."""
        self.done[cell_id] = (wall_s or 0.0, expected)
        self.gpu_s += (wall_s or 0.0) * gpus
        done_wall = sum(wall for wall, _ in self.done.values())
        done_expected = sum(exp for _, exp in self.done.values())
        text = f"[{len(self.done)}/{max(self.planned, len(self.done))}] elapsed {hms(self.clock() - self.started)}"
        if len(self.done) < self.planned:
            left = max(self.planned_s - done_expected, 0.0)
            text += f", about {hms(eta_s(left, done_expected, done_wall, self.workers))} left"
        return text

    def slowest(self, count: int = 3) -> str:
        ranked = sorted(self.done.items(), key=lambda item: -item[1][0])[:count]
        return ", ".join(f"{cell} {wall:.0f} s" for cell, (wall, _) in ranked)

    def summary(self) -> str:
        gpu = f"; {self.gpu_s / 60:.1f} GPU-minutes" if self.gpu_s else ""
        return (
            f"perfgate: {len(self.done)} cell(s) in {hms(self.clock() - self.started)}{gpu}; slowest: {self.slowest()}"
        )


def cell_seconds(record: dict) -> float:
    """The seconds a cell took: a paired cell's whole comparison (both sides, every process pair), another's
    own wall_s (its stages' sum; for a paired cell only this tree's side's)."""
    paired = record.get("paired") or {}
    return (paired.get("seconds") or {}).get("total") or record.get("wall_s") or 0.0


def gpus_held(record: dict) -> int:
    """The GPUs a cell's record says it held: its ranks for a data-parallel cell, one for another GPU cell."""
    return (record.get("world_size") or 1) if record.get("device_kind") == "gpu" else 0


def eta_s(left_expected: float, done_expected: float, done_wall: float, workers: int = 1) -> float:
    """Seconds left: the expected seconds of the cells left, scaled by how the finished cells ran against
    theirs (clamped to 1/4..4: one odd cell must not swing it), over the parallel workers."""
    ratio = min(max(done_wall / done_expected, 0.25), 4.0) if done_expected else 1.0
    return left_expected * ratio / max(workers, 1)


def hms(seconds: float) -> str:
    """m:ss, or h:mm:ss."""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def shard_of(cell_ids: Sequence[str], costs: Mapping[str, float], index: int, count: int) -> set[str]:
    """The ids of shard `index` (1-based) of `count`, dealt by cost."""
    return set(deal({c: costs[c] for c in cell_ids}, count)[index - 1])
