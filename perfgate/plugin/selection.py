"""Which cells a run holds: the matrix as pytest params (generated, for each test marked perf_cells(phase),
from the zoo the ini setting perf_registry names), the --perf-models/variants/precisions narrowing at
collection, --perf-rotate's and --perf-shard's deals of cells of equal expected cost, and why no cell is left
when none is.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest

from perfgate.core import matrix, zoo
from perfgate.core.matrix import Cell

MARK = "perf_cells"  # @pytest.mark.perf_cells("train"): parametrize the test's `cell` with that phase's cells
MARK_HELP = f"{MARK}(phase): parametrize the test's `cell` with every cell of the phase in the perf_registry zoo"
CELL_KEY = pytest.StashKey[Cell]()  # each cell item's Cell, stashed at collection


@dataclass(frozen=True)
class Selection:
    """What --perf-models, --perf-variants, --perf-precisions (None: all), --perf-rotate and --perf-shard (I, N)
    keep."""

    model: tuple[str, ...] | None = None
    variant: tuple[str, ...] | None = None
    precision: tuple[str, ...] | None = None
    shard: tuple[int, int] | None = None
    rotate: tuple[int, int] | None = None
    data_parallel: str = "with"  # with | without | only (--perf-data-parallel)

    def selects(self, cell: Cell) -> bool:
        """--perf-models, --perf-variants, --perf-precisions (--perf-data-parallel is taken after -m and -k:
        data_parallel_split)."""
        return all(
            getattr(self, key) is None or getattr(cell, key) in getattr(self, key)
            for key in ("model", "variant", "precision")
        )

    def describe(self) -> str:
        chosen = [(key, getattr(self, key)) for key in ("model", "variant", "precision")]
        named = [f"--perf-{key}s {','.join(names)}" for key, names in chosen if names is not None]
        if self.data_parallel != "with":
            named.append(f"--perf-data-parallel {self.data_parallel}")
        return ", ".join(named) or "no --perf-* selection"


def parametrize(metafunc: pytest.Metafunc, registry_path: str) -> None:
    """Give a test marked perf_cells(phase) one call per cell of that phase."""
    mark = metafunc.definition.get_closest_marker(MARK)
    if mark is not None:
        metafunc.parametrize("cell", cells(zoo.load(registry_path), *mark.args))


def cells(registry: dict, phase: str) -> list:
    """pytest.param for every cell of `phase`: GPU cells over the whole matrix, CPU cells over each model's
    cpu_variants in fp32 (data-parallel ones on each of matrix.ddp_worlds' rank counts), with markers and
    known-issue marks from the model's record."""
    params = []
    for spec in registry.values():
        for world in matrix.ddp_worlds(phase, "gpu"):
            for variant in (v for v in matrix.VARIANTS.values() if spec.runs(v, phase)):
                for precision in matrix.PRECISIONS:
                    tier = matrix.tier_of(variant.name, precision, world) if spec.pr else "nightly"
                    params.append(_param(spec, Cell(spec.name, phase, variant.name, precision, "gpu", tier, world)))
        if phase in spec.cpu_phases:
            for world in matrix.ddp_worlds(phase, "cpu"):
                for variant in (v for v in spec.cpu_variants if spec.runs(matrix.VARIANTS[v], phase)):
                    params.append(_param(spec, Cell(spec.name, phase, variant, "fp32", "cpu", "nightly", world)))
    return params


def _param(spec, cell: Cell):
    marks = [getattr(pytest.mark, cell.device_kind)]
    if cell.device_kind == "gpu":
        marks.append(getattr(pytest.mark, cell.tier))
    issue = spec.known_issue(cell)
    if issue is not None:
        marks.append(
            pytest.mark.skip(reason=issue.reason)
            if issue.action == "skip"
            else pytest.mark.xfail(reason=issue.reason, strict=False)
        )
    return pytest.param(cell, marks=marks, id=cell.param_id)


def narrow(items: list, chosen: Selection) -> tuple[list, list]:
    """Stash each cell item's Cell; keep the items `chosen` selects, and every item that is no cell."""
    keep, drop = [], []
    for item in items:
        cell = _cell_param(item)
        if cell is not None:
            item.stash[CELL_KEY] = cell
        (keep if cell is None or chosen.selects(cell) else drop).append(item)
    return keep, drop


def data_parallel_split(items: list, choice: str) -> tuple[list, list]:
    """(kept, left out) under --perf-data-parallel `choice` (with, without, only): a data-parallel cell needs
    several GPUs, so a session of one (perfgate deal's shard) leaves it to one holding them all."""
    if choice == "with":
        return items, []
    keep, drop = [], []
    for item in items:
        cell = item.stash.get(CELL_KEY, None)
        data_parallel = cell is not None and cell.phase == "ddp"
        # A test that is no cell runs in the session that takes the other cells, not again in the one alone.
        alone = choice == "only"
        (keep if (cell is None and not alone) or (cell is not None and data_parallel == alone) else drop).append(item)
    return keep, drop


def cells_of(items: list) -> list[Cell]:
    """The cells of the cell items among `items` (stashed by narrow), in order."""
    return [item.stash[CELL_KEY] for item in items if CELL_KEY in item.stash]


def _cell_param(item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("cell") if callspec else None
    return value if isinstance(value, Cell) else None


def shard(items: list, costs: dict[str, float], index: int, count: int) -> tuple[list, list]:
    """Deal cells into shards of near-equal expected cost (perfgate.plan.costs.deal: the history's wall seconds,
    else priors per variant and model), independent of collection order. Items that are not cells stay in shard 1."""
    from perfgate.plan.costs import shard_of

    mine = shard_of(sorted(costs), costs, index, count)
    keep, drop = [], []
    for item in items:
        cell = item.stash.get(CELL_KEY, None)
        ours = cell.id in mine if cell is not None else index == 1
        (keep if ours else drop).append(item)
    return keep, drop


def longest_first(items: list, costs: dict[str, float], workers: int = 1) -> list:
    """The cells by expected cost, dearest first (ties in their collected order), then what is no cell; with
    several workers, the `workers` cheapest cells right after the `workers` dearest. Under pytest-xdist's
    `--dist loadgroup` a test with no group is a unit of its own, handed out in this order: each worker starts
    with one of the dearest and the next unit queued behind it (xdist keeps one queued behind the one running),
    then takes the rest as it frees up, close to LPT list scheduling. What waits behind the dearest is the
    cheapest: behind a 456 s cell of a 4/15 slice on 4 x H200 (1c60ab9c, 2026-11-28) one of the next four
    dearest waited while the other three GPUs idled. Replayed on that slice's cell times
    (tools/probes/deal_replay.py), this order takes the slowest worker from 1.41 to 1.26 of the mean ranked by
    the cells' own times, from 1.34 to 1.30 by the cold priors (1.32 by the warm ones a precompiled run goes by
    now, perfgate.plan.costs.warm_prior_s; its one 456 s cell sets that slice); no deal could do better than
    1.23. xdist's default
    `load` hands each worker runs of consecutive items, one model's variants: its two max-autotune cells, the
    matrix's longest compiles, may land on one GPU (on 4 H100s, 2026-11-27, one such compile held its GPU for
    most of an 18-minute slice)."""
    order = {id(item): n for n, item in enumerate(items)}
    priced = {id(item): _cost(item, costs) for item in items}
    ranked = sorted(items, key=lambda item: (priced[id(item)] is None, -(priced[id(item)] or 0.0), order[id(item)]))
    if workers < 2:
        return ranked
    cells = [item for item in ranked if priced[id(item)] is not None]
    # the dearest, then queued behind them the cheapest (behind the dearest of all), then every other item
    first = cells[:workers] + cells[workers:][::-1][:workers]
    placed = {id(item) for item in first}
    return first + [item for item in ranked if id(item) not in placed]


def _cost(item, costs: dict[str, float]) -> float | None:
    cell = item.stash.get(CELL_KEY, None)
    return costs.get(cell.id) if cell is not None else None


def rotate(items: list, index: int, count: int) -> tuple[list, list]:
    """Slice `index` of `count`, dealt like a shard but by fixed weights (the cold priors per variant): the
    history's costs change with every night, and a deal that followed them would move cells between slices
    mid-rotation, so that some ran twice in a pass and some never."""
    from perfgate.plan.costs import rotation_weight

    return shard(items, {cell.id: rotation_weight(cell) for cell in cells_of(items)}, index, count)


def why_none(chosen: Selection, collected: int, offered: list[Cell], markexpr: str, keyword: str) -> str:
    """Why the --perf-* options and -m/-k together left no cell (pytest alone says "313 deselected")."""
    options = chosen.describe()
    if not offered:
        return f"{options} matches none of the {collected} cells collected"
    kinds = sorted({cell.device_kind for cell in offered})
    variants = sorted({cell.variant for cell in offered})
    filters = " ".join(f"{flag} {value!r}" for flag, value in (("-m", markexpr), ("-k", keyword)) if value)
    return (
        f"{options} matches {len(offered)} cell(s), all {'/'.join(kinds)} cells (variants "
        f"{', '.join(variants)}), and {filters or 'the shard'} removed every one of them; CPU cells run "
        f"fp32 with each model's cpu_variants, GPU cells the whole matrix"
    )


def skip_gpu_cells_without_cuda(items: list) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if not torch.cuda.is_available():
        reason = f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})"
        for item in gpu_items:
            item.add_marker(pytest.mark.skip(reason=reason))
        return
    gpus = torch.cuda.device_count()
    for item in gpu_items:
        cell = item.stash.get(CELL_KEY, None)
        if cell is not None and gpus < cell.world:
            item.add_marker(
                pytest.mark.skip(reason=f"{cell.world} GPUs needed for a data-parallel cell, {gpus} visible")
            )
