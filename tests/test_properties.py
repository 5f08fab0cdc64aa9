"""Property-based: generated bad records and baselines (NaN, inf, negatives, wrong types, missing fields) fed to
`perfgate compare`, `baseline update` and `report`. None ends in a traceback (exit 3), and none passes a
bad cell: a record with impossible figures is a failed cell, or the input is refused (exit 2). And (issue 36)
names that would put a baseline elsewhere, cells selected and not measured, and results files as killed
writers leave them; (issue 54) JSON nested past the parser, control characters, huge counts. Each judged by what
the generator did, never by the validator under test."""

from __future__ import annotations

import contextlib
import io
import json
import math
import sys
import unicodedata
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_hostile_input import FakeConfig

from perfgate.cli import main
from perfgate.core import validate
from perfgate.core.text import visible
from perfgate.judge.baseline import build_baseline, load_baseline
from perfgate.plugin import options

import synthetic as syn

KEY = (syn.H100, "pr")
RUN = syn.run(5, noise=0.005, run_noise=0.002)
BASE = build_baseline(syn.runs(3, first_seed=21, noise=0.005, run_noise=0.002))[KEY]
RECORD_FIELDS = (
    validate.NUMBER_FIELDS
    + validate.ROUND_FIELDS
    + validate.TEXT_FIELDS
    + ("status", "numerics", "env", "run_id", "tier")
)
CELL_FIELDS = validate.BASELINE_POSITIVE + validate.BASELINE_NONNEGATIVE + ("status", "speedup_runs", "numerics")
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

values = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(-(10**6), 10**6),
    st.none(),
    st.booleans(),
    st.text(max_size=8),
    st.sampled_from([math.nan, math.inf, -math.inf, 0.0, -1.0, 1e308]),
    st.lists(st.one_of(st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(), max_size=2),
)


class _Deleted:
    """A field removed from the record; its repr makes a failing example readable and the same every run."""

    def __repr__(self) -> str:
        return "DELETED"


DELETED = _Deleted()
edits = st.lists(
    st.tuples(st.integers(0, len(RUN) - 1), st.sampled_from(RECORD_FIELDS), st.one_of(values, st.just(DELETED))),
    min_size=1,
    max_size=4,
)
cell_edits = st.lists(
    st.tuples(
        st.sampled_from(sorted(BASE["cells"])), st.sampled_from(CELL_FIELDS), st.one_of(values, st.just(DELETED))
    ),
    max_size=3,
)


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
@example(
    changes=[(0, "eager_ms", None)],  # a spread that overflowed exp() of the gate's line (3000 examples)
    base_changes=[("bert_base-infer-inductor_default-amp_bf16", "host_speedup_spread", 308.0)],
)
def test_compare_never_crashes_and_never_passes_a_bad_cell(tmp_path_factory, changes, base_changes):
    tmp = tmp_path_factory.mktemp("cmp")
    records = _edited(RUN, changes)
    base = json.loads(json.dumps(BASE))
    for cid, name, value in base_changes:
        base["cells"][cid].pop(name, None) if value is DELETED else base["cells"][cid].__setitem__(name, value)
    (tmp / "base.json").write_text(json.dumps(base))
    rc = main(
        [
            "compare",
            _write(tmp / "r.jsonl", records),
            "--baseline",
            str(tmp / "base.json"),
            "--json",
            str(tmp / "g.json"),
        ]
    )
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


# Names for env.fingerprint and the tier, each with what the generator put in it: safe parts only (starting
# with a letter or digit), or a hazard that would name a file elsewhere, a hidden file or no file at all.
SAFE_LEADS, SAFE_TAIL = "aZ7", "abz019._+-"
HAZARDS = ("/", "../", "/tmp/", "\x00", "\n", ".")


@st.composite
def file_names(draw) -> tuple[str, bool]:
    """(name, hazardous): a safe name, or one with a hazard spliced in (a lead "." or "../" included)."""
    name = draw(st.sampled_from(SAFE_LEADS)) + draw(st.text(alphabet=SAFE_TAIL, max_size=12))
    if not draw(st.booleans()):
        return name, False
    at = draw(st.integers(0, len(name)))
    hazard = draw(st.sampled_from(HAZARDS))
    if hazard == "." and at > 0:  # a dot inside a name is safe; only a leading one hides the file
        at = 0
    return name[:at] + hazard + name[at:], True


@SETTINGS
@given(fingerprint=file_names(), tier=file_names())
@example(fingerprint=("../../escaped", True), tier=("pr", False))
def test_baseline_update_writes_inside_its_dir_or_refuses(tmp_path_factory, fingerprint, tier):
    tmp = tmp_path_factory.mktemp("names")
    (tmp / "in" / "side").mkdir(parents=True)
    records = [dict(r, env=dict(r["env"], fingerprint=fingerprint[0]), tier=tier[0]) for r in RUN]
    results = _write(tmp / "r.jsonl", records)
    rc = main(["baseline", "update", results, "--dir", str(tmp / "in" / "side" / "b")])
    assert rc == (2 if fingerprint[1] or tier[1] else 0)
    written = {str(p.relative_to(tmp)) for p in tmp.rglob("*") if p.is_file()} - {"r.jsonl"}
    assert written == (set() if rc else {f"in/side/b/{fingerprint[0]}_{tier[0]}.json"})


@SETTINGS
@given(skips=st.dictionaries(st.integers(0, len(RUN) - 1), st.booleans(), max_size=len(RUN)))
@example(skips={i: True for i in range(len(RUN))})  # a PR gate on a runner without its GPU
def test_a_cell_selected_and_not_measured_never_passes(tmp_path_factory, skips):
    """`skips`: which cells the generator marked skipped, each with its environment kept or not. Every
    baseline cell is ok, so the expected exit follows from the generator alone."""
    tmp = tmp_path_factory.mktemp("skip")
    records = [
        dict(r, status="skipped", reason="no CUDA device", env=r["env"] if skips[i] else {}) if i in skips else r
        for i, r in enumerate(RUN)
    ]
    (tmp / "base.json").write_text(json.dumps(BASE))
    rc = main(["compare", _write(tmp / "r.jsonl", records), "--baseline", str(tmp / "base.json")])
    if len(skips) == len(RUN) or not all(skips.values()):
        assert rc == 2  # nothing measured, or a skipped cell no baseline can be found for
    elif skips:
        assert rc == 1  # a cell the baseline had ok was not measured
    else:
        assert rc in (0, 1)


# A results file as killed writers leave it: whole records, each maybe after a torn one (a prefix of a
# record's line) that the next writer either glued its record onto (before issue 36) or appended after.
LINES = [json.dumps(r, sort_keys=True) for r in RUN]
pieces = st.lists(
    st.tuples(st.integers(0, len(RUN) - 1), st.one_of(st.none(), st.floats(0.0, 0.999)), st.booleans()),
    min_size=1,
    max_size=8,
)


@SETTINGS
@given(pieces=pieces, torn_tail=st.one_of(st.none(), st.floats(0.0, 0.999)))
@example(pieces=[(0, 0.5, True), (1, None, False)], torn_tail=None)
@example(pieces=[(1, None, False), (2, 0.0, False)], torn_tail=0.3)
def test_every_whole_record_survives_torn_lines_and_later_appends(tmp_path_factory, pieces, torn_tail):
    """The oracle is what the generator wrote whole, not the reader's rules: every whole record, in order."""
    from perfgate.core.records_file import append_record, iter_records

    path = tmp_path_factory.mktemp("torn") / "r.jsonl"
    whole = []
    for index, cut, glued in pieces:
        if cut is not None:  # a writer killed mid-line, at least one character in and one short of the end
            torn = LINES[(index + 1) % len(LINES)]
            with path.open("a", encoding="utf-8") as fh:
                fh.write(torn[: max(1, int(cut * len(torn)))])
        if cut is not None and glued:  # the old writer: the next record on the torn line
            with path.open("a", encoding="utf-8") as fh:
                fh.write(LINES[index] + "\n")
        else:
            append_record(path, RUN[index])
        whole.append(RUN[index]["cell"])
    if torn_tail is not None:
        with path.open("a", encoding="utf-8") as fh:
            fh.write(LINES[0][: max(1, int(torn_tail * len(LINES[0])))])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the warnings name the torn lines; what is kept is the property
        assert [r["cell"] for r in iter_records(path)] == whole


@SETTINGS
@given(changes=edits)
@example(changes=[(0, "graph_breaks", 0.5)])
def test_report_never_crashes_on_bad_records(tmp_path_factory, changes):
    tmp = tmp_path_factory.mktemp("rep")
    records = _edited(RUN, changes)
    rc = main(
        ["report", _write(tmp / "r.jsonl", records), "--html", str(tmp / "r.html"), "--markdown", str(tmp / "r.md")]
    )
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


# Issue 54: deep nesting, control characters and huge counts, each judged by what the generator put in.
FEW = settings(SETTINGS, max_examples=20)  # each example runs a command: CI time is tight
UNSAFE_CATEGORIES = ("Cc", "Cf", "Cs", "Zl", "Zp")  # what no person may meet raw: controls, format, separators


@FEW
@given(
    depth=st.one_of(st.integers(1, 3000), st.just(100_000)),
    kind=st.sampled_from("[{"),
    where=st.sampled_from(["extra", "env", "reason", "baseline"]),
    command=st.sampled_from(["results", "compare", "history"]),
)
@example(depth=100_000, kind="[", where="baseline", command="compare")
@example(depth=900, kind="{", where="extra", command="history")  # parsed, then stored as JSON again
def test_json_nested_at_any_depth_is_read_or_refused_never_a_crash(tmp_path_factory, depth, kind, where, command):
    tmp = tmp_path_factory.mktemp("deep")
    nested = "[" * depth + "]" * depth if kind == "[" else '{"a":' * depth + "0" + "}" * depth
    lines = [json.dumps(r) for r in RUN]
    base = json.dumps(BASE)
    if where == "baseline":
        base = base[:-1] + f', "extra": {nested}}}'
    else:
        lines[1] = json.dumps({k: v for k, v in RUN[1].items() if k != where})[:-1] + f', "{where}": {nested}}}'
    (tmp / "r.jsonl").write_text("\n".join(lines) + "\n")
    (tmp / "b.json").write_text(base)
    argv = {
        "results": ["results", str(tmp / "r.jsonl")],
        "compare": ["compare", str(tmp / "r.jsonl"), "--baseline", str(tmp / "b.json")],
        "history": ["history", "add", str(tmp / "r.jsonl"), "--db", str(tmp / "h.db")],
    }[command]
    rc = main(argv)
    assert rc in (0, 1, 2)  # never 3
    if depth > sys.getrecursionlimit() and (where != "baseline" or command == "compare"):
        assert rc == 2  # no reader of Python's can follow it: the file is refused, naming it


unsafe_text = st.text(
    st.one_of(st.characters(whitelist_categories=UNSAFE_CATEGORIES), st.sampled_from("ab <|`[")), min_size=1
)


@settings(SETTINGS, max_examples=200)
@given(text=st.text(st.characters(), max_size=40))
def test_visible_leaves_no_unsafe_character_and_changes_nothing_else(text):
    shown = visible(text)
    assert not [c for c in shown if unicodedata.category(c) in UNSAFE_CATEGORIES]
    if not any(unicodedata.category(c) in UNSAFE_CATEGORIES for c in text):
        assert shown == text


@FEW
@given(texts=st.lists(unsafe_text, min_size=4, max_size=4))
@example(texts=["\x1b[31m", "\x00", "\u202e", "\r\n\u2028"])
def test_control_characters_put_in_any_shown_field_reach_no_person_raw(tmp_path_factory, texts):
    tmp = tmp_path_factory.mktemp("ctl")
    records = json.loads(json.dumps(RUN))
    first = records[0]
    first.update(status="failed", reason=texts[0], model=first["model"] + texts[1], variant=first["variant"] + texts[2])
    first["env"] = {**first["env"], "torch": texts[3]}
    put = {c for text in texts for c in text if unicodedata.category(c) in UNSAFE_CATEGORIES} - {"\n"}
    (tmp / "b.json").write_text(json.dumps(BASE))
    results = _write(tmp / "r.jsonl", records)
    with contextlib.redirect_stdout(io.StringIO()) as shown:
        assert main(["results", results]) == 0
        assert main(["compare", results, "--baseline", str(tmp / "b.json"), "--markdown", str(tmp / "c.md")]) == 1
    for name, text in (("terminal", shown.getvalue()), ("compare --markdown", (tmp / "c.md").read_text())):
        assert not put & set(text), f"{name}: {sorted(put & set(text))!r} raw"


@settings(SETTINGS, max_examples=200)
@given(
    option=st.sampled_from(["shard", "min_rounds", "max_rounds", "round_ms", "inject", "cell_timeout"]),
    huge=st.booleans(),
    data=st.data(),
)
def test_a_huge_count_or_duration_is_refused_and_a_sane_one_is_not(tmp_path, monkeypatch, option, huge, data):
    """Sane: what a user means (up to 100 shards or rounds, a second a round); huge: 10^4 times past any use."""
    monkeypatch.chdir(tmp_path)
    count = data.draw(st.integers(10**6, 10**18) if huge else st.integers(1, 100))
    ms = data.draw(st.floats(1e7, 1e308) if huge else st.floats(0.1, 1000.0))
    value = {
        "shard": f"1/{count}",
        "min_rounds": count,
        "max_rounds": count,
        "round_ms": ms,
        "inject": f"{data.draw(st.sampled_from(['slow', 'host_slow', 'device_slow', 'hang']))}:{ms:.17g}",
        "cell_timeout": ms,
    }[option]
    config = FakeConfig(**{option: value})
    if not huge:
        options.check(config)
        return
    with pytest.raises(ValueError, match=f"--perf-{option.replace('_', '-')}="):
        options.check(config)
