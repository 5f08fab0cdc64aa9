"""A known issue is a pattern over cells: one that names no real phase, variant, precision or device kind would
mark nothing, and the cell it was written for would fail the gate as if the issue were new."""

from __future__ import annotations

import pytest

from perfgate.core import zoo
from perfgate.core.records_file import load_records
from perfgate.core.spec import KnownIssue
from perfgate.plugin.selection import cells

from tiny_suite import FAST, TINY_SUITE, fixture

suite = fixture()


@pytest.mark.parametrize(
    "field, value, valid",
    [
        ("phase", "training", "train, infer, ddp"),
        ("variant", "inductor_maxautotune", "inductor_max_autotune"),
        ("precision", "bf16", "amp_bf16"),
        ("device_kind", "cuda", "gpu, cpu"),
        ("action", "ignore", "xfail, skip"),
    ],
)
def test_a_misspelt_pattern_names_the_bad_value_and_the_valid_ones(field, value, valid):
    with pytest.raises(ValueError) as err:
        KnownIssue("slow compile", **{field: value})
    assert f"{field}={value!r}" in str(err.value) and valid in str(err.value)


def test_every_known_issue_of_the_zoo_marks_a_cell_it_collects():
    registry = zoo.load(zoo.DEFAULT)
    ids = {p.values[0].id: p.marks for phase in ("train", "infer", "ddp") for p in cells(registry, phase)}
    for spec in registry.values():
        for issue in spec.known_issues:
            marked = [
                i
                for i, marks in ids.items()
                if i.startswith(f"{spec.name}-") and any(issue.reason == m.kwargs.get("reason") for m in marks)
            ]
            assert marked, f"{spec.name}: known issue {issue.reason[:60]!r} marks no collected cell"


def test_a_known_issues_record_carries_its_reason_so_reports_tell_it_from_a_new_failure(suite):
    """The render layer does not know the zoo: the record says which known issue marked its cell."""
    marked = TINY_SUITE.replace(
        'cpu_variants=("aot_eager",),',
        'cpu_variants=("aot_eager",), known_issues=(KnownIssue("slow for a test", phase="infer"),),',
    ).replace("import ModelSpec, Size", "import KnownIssue, ModelSpec, Size")
    suite.makepyfile(test_tiny=marked)
    out = suite.runpytest_subprocess(*FAST, "--perf-results=r.jsonl")
    out.assert_outcomes(passed=1, xpassed=1)
    issues = {r["phase"]: r["known_issue"] for r in load_records([suite.path / "r.jsonl"])}
    assert issues == {"train": "", "infer": "slow for a test"}
