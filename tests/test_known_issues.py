"""A known issue is a pattern over cells: one that names no real phase, variant, precision or device kind would
mark nothing, and the cell it was written for would fail the gate as if the issue were new."""

from __future__ import annotations

import pytest

from perfgate.core import zoo
from perfgate.core.spec import KnownIssue
from perfgate.plugin.selection import cells


@pytest.mark.parametrize("field, value, valid", [
    ("phase", "training", "train, infer, ddp"),
    ("variant", "inductor_maxautotune", "inductor_max_autotune"),
    ("precision", "bf16", "amp_bf16"),
    ("device_kind", "cuda", "gpu, cpu"),
    ("action", "ignore", "xfail, skip"),
])
def test_a_misspelt_pattern_names_the_bad_value_and_the_valid_ones(field, value, valid):
    with pytest.raises(ValueError) as err:
        KnownIssue("slow compile", **{field: value})
    assert f"{field}={value!r}" in str(err.value) and valid in str(err.value)


def test_every_known_issue_of_the_zoo_marks_a_cell_it_collects():
    registry = zoo.load(zoo.DEFAULT)
    ids = {p.values[0].id: p.marks for phase in ("train", "infer", "ddp") for p in cells(registry, phase)}
    for spec in registry.values():
        for issue in spec.known_issues:
            marked = [i for i, marks in ids.items() if i.startswith(f"{spec.name}-")
                      and any(issue.reason == m.kwargs.get("reason") for m in marks)]
            assert marked, f"{spec.name}: known issue {issue.reason[:60]!r} marks no collected cell"
