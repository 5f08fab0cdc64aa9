"""Which cells a run holds: the matrix as pytest params, generated from the zoo the ini setting perf_registry
names for each test marked perf_cells(phase).
"""

from __future__ import annotations

import pytest

from perfgate import matrix, zoo
from perfgate.matrix import Cell

MARK = "perf_cells"  # @pytest.mark.perf_cells("train"): parametrize the test's `cell` with that phase's cells
MARK_HELP = f"{MARK}(phase): parametrize the test's `cell` with every cell of the phase in the perf_registry zoo"


def parametrize(metafunc: pytest.Metafunc, registry_path: str) -> None:
    """Give a test marked perf_cells(phase) one call per cell of that phase."""
    mark = metafunc.definition.get_closest_marker(MARK)
    if mark is not None:
        metafunc.parametrize("cell", cells(zoo.load(registry_path), *mark.args))


def cells(registry: dict, phase: str) -> list:
    """pytest.param for every cell of `phase`: GPU cells over the whole matrix, CPU cells over each model's
    cpu_variants in fp32, with markers and known-issue marks from the model's record."""
    params = []
    for spec in registry.values():
        for variant in (v for v in matrix.VARIANTS.values() if spec.runs(v, phase)):
            for precision in matrix.PRECISIONS:
                params.append(_param(spec, Cell(spec.name, phase, variant.name, precision, "gpu",
                                                matrix.tier_of(variant.name, precision))))
        if phase in spec.cpu_phases:
            for variant in spec.cpu_variants:
                params.append(_param(spec, Cell(spec.name, phase, variant, "fp32", "cpu", "nightly")))
    return params


def _param(spec, cell: Cell):
    marks = [getattr(pytest.mark, cell.device_kind)]
    if cell.device_kind == "gpu":
        marks.append(getattr(pytest.mark, cell.tier))
    issue = spec.known_issue(cell)
    if issue is not None:
        marks.append(pytest.mark.skip(reason=issue.reason) if issue.action == "skip"
                     else pytest.mark.xfail(reason=issue.reason, strict=False))
    return pytest.param(cell, marks=marks, id=cell.param_id)
