"""Property-based: generated bad records and baselines (NaN, inf, negatives, wrong types, missing fields) fed to
`perfgate compare`, `baseline update` and `report`. None ends in a traceback (exit 3), and none passes a
bad cell: a record with impossible figures is a failed cell, or the input is refused (exit 2)."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from perfgate.cli import main
from perfgate.core import validate
from perfgate.judge.baseline import build_baseline, load_baseline

import synthetic as syn

KEY = (syn.H100, "pr")
RUN = syn.run(5, noise=0.005, run_noise=0.002)
BASE = build_baseline(syn.runs(3, first_seed=21, noise=0.005, run_noise=0.002))[KEY]
RECORD_FIELDS = (validate.NUMBER_FIELDS + validate.ROUND_FIELDS + validate.TEXT_FIELDS
                 + ("status", "numerics", "env", "run_id", "tier"))
CELL_FIELDS = validate.BASELINE_POSITIVE + validate.BASELINE_NONNEGATIVE + ("status", "speedup_runs", "numerics")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**6, 10**6), st.none(), st.booleans(),
    st.text(max_size=8), st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e308]),
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2))


class _Deleted:
    """A field removed from the record; its repr makes a failing example readable and the same every run."""

    def __repr__(self) -> str:
        return "DELETED"


DELETED = _Deleted()
edits = st.lists(st.tuples(st.integers(0, len(RUN) - 1), st.sampled_from(RECORD_FIELDS),
                           st.one_of(values, st.just(DELETED))), min_size=1, max_size=4)
cell_edits = st.lists(st.tuples(st.sampled_from(sorted(BASE["cells"])), st.sampled_from(CELL_FIELDS),
                                st.one_of(values, st.just(DELETED))), max_size=3)


def _edited(records, changes):
    records = json.loads(json.dumps(records))
    for index, name, value in changes:
        if value is DELETED:
            records[index].pop(name, None)
        else:
            records[index][name] = value
    return records


def _write(path, records) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    return str(path)


def _bad_cells(records) -> set[str]:
    """Cells whose record an honest gate must not pass: impossible figures on a record that says ok."""
    return {r["cell"] for r in records if r.get("status") == "ok" and validate.checked(r)["status"] != "ok"}


@SETTINGS
@given(changes=edits, base_changes=cell_edits)
@example(changes=[(0, "graph_breaks", 0.0)], base_changes=[])  # a count as a float: rendered with "d"
@example(changes=[(0, "eager_ms", None)],  # a spread that overflowed exp() of the gate's line (3000 examples)
         base_changes=[("bert_base-infer-inductor_default-amp_bf16", "host_speedup_spread", 308.0)])
def test_compare_never_crashes_and_never_passes_a_bad_cell(tmp_path_factory, changes, base_changes):
    tmp = tmp_path_factory.mktemp("cmp")
    records = _edited(RUN, changes)
    base = json.loads(json.dumps(BASE))
    for cid, name, value in base_changes:
        base["cells"][cid].pop(name, None) if value is DELETED else base["cells"][cid].__setitem__(name, value)
    (tmp / "base.json").write_text(json.dumps(base))
    rc = main(["compare", _write(tmp / "r.jsonl", records), "--baseline", str(tmp / "base.json"),
               "--json", str(tmp / "g.json")])
    assert rc in (0, 1, 2)
    if rc == 2:
        return  # refused as unusable input, with a message
    assert not any(validate.shape_problems(r) for r in records)  # wrong kinds never get this far
    failed = {c for report in json.loads((tmp / "g.json").read_text())["reports"] for c in report["failed"]}
    assert _bad_cells(records) <= failed


@SETTINGS
@given(changes=edits)
@example(changes=[(0, "tier", 1.0)])  # a number where the tier goes: keys that do not sort
def test_baseline_update_never_crashes_and_never_folds_a_bad_figure(tmp_path_factory, changes):
    tmp = tmp_path_factory.mktemp("upd")
    records = _edited(RUN, changes)
    rc = main(["baseline", "update", _write(tmp / "r.jsonl", records), "--dir", str(tmp / "b")])
    assert rc in (0, 2)
    for path in (tmp / "b").glob("*.json") if rc == 0 else ():
        baseline = load_baseline(path)  # what it wrote, it can read: every figure checked on load
        for cid in _bad_cells(records) & set(baseline["cells"]):
            assert baseline["cells"][cid]["status"] != "ok"


@SETTINGS
@given(changes=edits)
@example(changes=[(0, "graph_breaks", 0.5)])
def test_report_never_crashes_on_bad_records(tmp_path_factory, changes):
    tmp = tmp_path_factory.mktemp("rep")
    records = _edited(RUN, changes)
    rc = main(["report", _write(tmp / "r.jsonl", records), "--html", str(tmp / "r.html"),
               "--markdown", str(tmp / "r.md")])
    assert rc in (0, 2)
    if rc == 0:
        digest = (tmp / "r.md").read_text()
        assert all(f"failed `{cid}`" in digest for cid in _bad_cells(records))
        assert "NaN" not in (tmp / "r.html").read_text()


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0.0, "2", None])
def test_the_checked_record_of_a_bad_speedup_is_failed_and_finite(value):
    record = dict(RUN[0], speedup=value)
    if validate.shape_problems(record):
        assert isinstance(value, str)
        return
    checked = validate.checked(record)
    assert checked["status"] == "failed" and checked["reason"].startswith(validate.BAD_FIGURES)
    assert all(not isinstance(v, float) or math.isfinite(v) for v in checked.values())
