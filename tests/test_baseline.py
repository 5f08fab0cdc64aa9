"""perfgate.judge.baseline: folding runs, the file format, atomic writes, and refusing unusable baselines."""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import statistics

import pytest

from perfgate.core.output import OutputError
from perfgate.core.record import CLOCKS, new_record
from perfgate.core.stats import interval_sd, rel_spread
from perfgate.judge import baseline as bl
from perfgate.judge import gate
from perfgate.judge.baseline_fold import run_to_run_sd

import synthetic as syn

KEY = (syn.H100, "pr")
RESNET = "resnet50-train-inductor_default-amp_bf16"


@pytest.fixture(scope="module")
def three_runs():
    return syn.runs(3, first_seed=7)


@pytest.fixture(scope="module")
def folded(three_runs):
    return bl.build_baseline(three_runs)[KEY]


def test_baseline_path():
    assert bl.baseline_path("baselines", syn.H100, "pr") == bl.Path(f"baselines/{syn.H100}_pr.json")


def test_header(folded):
    assert folded["schema"] == bl.BASELINE_SCHEMA
    assert (folded["fingerprint"], folded["tier"], folded["runs"]) == (syn.H100, "pr", 3)
    assert folded["device"] == "NVIDIA H100 80GB HBM3"
    assert "fingerprint" not in folded["versions"] and folded["versions"]["torch"] == "2.11.0+cu130"
    assert folded["created"] == dt.datetime.now(dt.timezone.utc).date().isoformat()
    assert len(folded["cells"]) == 10


def test_cell_folds_runs(three_runs, folded):
    recs = [next(r for r in run if r["cell"] == RESNET) for run in three_runs]
    cell = folded["cells"][RESNET]
    speedups = [r["speedup"] for r in recs]
    assert cell["speedup"] == pytest.approx(statistics.median(speedups), rel=1e-3)
    assert cell["speedup_runs"] == pytest.approx(speedups, rel=1e-3)
    assert cell["speedup_spread"] == pytest.approx(run_to_run_sd(recs, "speedup"), rel=1e-2)
    assert cell["speedup_lo"] == pytest.approx(min(r["speedup_lo"] for r in recs), rel=1e-3)
    assert cell["speedup_hi"] == pytest.approx(max(r["speedup_hi"] for r in recs), rel=1e-3)
    assert cell["compiled_ms"] == pytest.approx(statistics.median(r["compiled_ms"] for r in recs), rel=1e-3)
    assert (cell["status"], cell["numerics"], cell["runs_ok"]) == ("ok", "pass", 3)


@pytest.mark.parametrize("metric", [c for c in CLOCKS if c != "compute_speedup"])  # a DDP cell's: test_gate
def test_each_clock_folds_like_the_speedup(three_runs, folded, metric):
    recs = [next(r for r in run if r["cell"] == RESNET) for run in three_runs]
    cell = folded["cells"][RESNET]
    values = [r[metric] for r in recs]
    assert cell[metric] == pytest.approx(statistics.median(values), rel=1e-3)
    assert cell[f"{metric}_runs"] == pytest.approx(values, rel=1e-3)
    # The robust spread, never below the median run's own in-run sd.
    in_run = statistics.median(interval_sd(r[f"{metric}_lo"], r[f"{metric}_hi"]) for r in recs)
    assert cell[f"{metric}_spread"] == pytest.approx(max(rel_spread(values), in_run), rel=1e-2)
    assert cell[f"{metric}_lo"] == pytest.approx(min(r[f"{metric}_lo"] for r in recs), rel=1e-3)
    assert cell[f"{metric}_hi"] == pytest.approx(max(r[f"{metric}_hi"] for r in recs), rel=1e-3)


def test_device_and_host_times_busy_and_bound_fold_as_medians(three_runs, folded):
    recs = [next(r for r in run if r["cell"] == RESNET) for run in three_runs]
    cell = folded["cells"][RESNET]
    for name in (
        "eager_device_ms",
        "compiled_device_ms",
        "eager_host_ms",
        "compiled_host_ms",
        "busy_eager",
        "busy_compiled",
    ):
        assert cell[name] == pytest.approx(statistics.median(r[name] for r in recs), rel=1e-3), name
    assert cell["busy_compiled"] == pytest.approx(0.61, abs=0.02) and cell["bound"] == "host"
    assert folded["cells"]["segformer_b2-train-inductor_default-amp_bf16"]["bound"] == "device"


def test_spread_has_a_floor_at_the_runs_own_noise():
    """Three runs that agree to 0.01 % by chance would give a MAD of ~0 and a line at the current run's
    noise alone; each run's median has its interval's error, so the spread keeps at least that."""
    runs = syn.runs(3, first_seed=7, run_noise=0.0, overrides={RESNET: {"speedup": 2.3}})
    for run, speedup in zip(runs, (2.3, 2.3002, 2.2998)):
        rec = next(r for r in run if r["cell"] == RESNET)
        rec.update(speedup=speedup, speedup_lo=speedup / 1.02, speedup_hi=speedup * 1.02)
    cell = bl.build_baseline(runs)[KEY]["cells"][RESNET]
    assert rel_spread(cell["speedup_runs"]) < 0.001
    assert cell["speedup_spread"] == pytest.approx(math.log(1.02**2) / 3.92, rel=0.01)


def test_header_lists_the_host_cpus():
    epyc = syn.env(cpu_model=syn.EPYC)
    runs = [syn.run(1), syn.run(2, environment=epyc), syn.run(3, environment=syn.env(cpu_model=None)), syn.run(4)]
    assert bl.build_baseline(runs)[KEY]["host_cpus"] == sorted([syn.EPYC, syn.XEON])


def test_header_lists_where_the_runs_cells_ran():
    runs = [syn.run(1, process="worker"), syn.run(2, process="pytest"), syn.run(3, process=None)]
    assert bl.build_baseline(runs)[KEY]["processes"] == ["pytest", "worker"]
    assert bl.build_baseline([syn.run(4, process=None)])[KEY]["processes"] == []


def test_a_baseline_from_before_the_clocks_still_loads_and_gates(tmp_path):
    """A file written before the device and host clocks: same schema, without their fields."""
    old = bl.build_baseline([[syn.before_clocks(r) for r in run] for run in syn.runs(3, first_seed=7)])[KEY]
    for cell in old["cells"].values():
        for name in [n for n in cell if "device" in n or "host" in n or "busy" in n or n == "bound"]:
            del cell[name]
    del old["host_cpus"]
    path = bl.write_baseline(bl.baseline_path(tmp_path, *KEY), old)
    loaded = bl.load_baseline(path, *KEY)
    report = gate.compare(syn.run(5), loaded)
    assert report.exit_code in (0, 1) and any("predates the device clock" in n for n in report.notes)
    assert {f.metric for f in report.regressions} <= {"speedup"}


def test_compiled_memory_of_old_records_is_not_folded():
    """Schema-1 records measured the compiled peak without the compiled weights (low by their size), and
    schema-4 ones with the numerics judge's GPU temporaries: a baseline mixing them with right runs keeps
    their speedups but takes the compiled peak from the right ones only."""
    old = syn.run(1, overrides={RESNET: dict(schema=1, peak_mem_compiled_mb=5455.3)})
    new = syn.run(2, overrides={RESNET: dict(peak_mem_compiled_mb=5553.0)})
    cell = bl.build_baseline([old, new])[KEY]["cells"][RESNET]
    assert cell["peak_mem_compiled_mb"] == 5553.0 and cell["runs_ok"] == 2
    only_old = bl.build_baseline([old])[KEY]["cells"][RESNET]
    assert only_old["peak_mem_compiled_mb"] is None and only_old["peak_mem_eager_mb"] is not None
    judged_in = syn.run(3, overrides={RESNET: dict(schema=4, peak_mem_compiled_mb=11474.2)})
    assert bl.build_baseline([judged_in, new])[KEY]["cells"][RESNET]["peak_mem_compiled_mb"] == 5553.0


def test_host_clock_folds_from_runs_with_the_newer_host_rounds():
    """Schema-3 records took 11 host rounds (about twice the in-run error of today's 41): where two or more
    newer runs measured the host clock, it folds from them alone; the other clocks keep every run."""
    old = [syn.run(i, overrides={RESNET: dict(schema=3, host_speedup=h)}) for i, h in ((1, 1.2), (2, 1.6))]
    new = [syn.run(i, overrides={RESNET: dict(host_speedup=h)}) for i, h in ((3, 1.40), (4, 1.42))]
    cell = bl.build_baseline(old + new)[KEY]["cells"][RESNET]
    assert cell["host_speedup_runs"] == [1.40, 1.42] and len(cell["device_speedup_runs"]) == 4
    one_new = bl.build_baseline(old + new[:1])[KEY]["cells"][RESNET]
    assert one_new["host_speedup_runs"] == [1.2, 1.6, 1.40]


def test_runs_that_disagree_on_a_peak_or_a_graph_count_are_named():
    """The fold keeps maxima: one odd run would set the baseline unseen, so the update names it."""
    runs = [syn.run(i, overrides={RESNET: dict(peak_mem_compiled_mb=5553.0)}) for i in (1, 2)]
    assert bl.disagreements(runs) == []
    odd = syn.run(3, overrides={RESNET: dict(peak_mem_compiled_mb=11474.2, graph_breaks=3)})
    lines = bl.disagreements(runs + [odd])
    assert len(lines) == 2 and all(RESNET in line for line in lines)
    assert "5553 (2 runs), 11474.2 (1 run)" in lines[0] and "graph_breaks" in lines[1]


def test_max_over_runs_and_numerics_need_every_run():
    runs = [
        syn.run(1),
        syn.run(
            2, overrides={RESNET: dict(graph_breaks=2, peak_mem_compiled_mb=7500.0, numerics="fail", compile_s=61.0)}
        ),
    ]
    cell = bl.build_baseline(runs)[KEY]["cells"][RESNET]
    assert (cell["graph_breaks"], cell["peak_mem_compiled_mb"], cell["compile_s"]) == (2, 7500.0, 61.0)
    assert cell["numerics"] == "fail"


def test_single_run_has_no_spread():
    cell = bl.build_baseline([syn.run(3)])[KEY]["cells"][RESNET]
    assert cell["speedup_spread"] is None and len(cell["speedup_runs"]) == 1


@pytest.mark.parametrize(
    "statuses, expected",
    [(["failed", "failed"], "failed"), (["skipped", "skipped"], "skipped"), (["failed", "ok"], "ok")],
)
def test_failed_cells_kept_with_reason(statuses, expected):
    cell = syn.cells()[0]
    runs = [
        syn.run(i, overrides={cell.id: syn.failed(cell, f"reason {i}", s) if s != "ok" else {}})
        for i, s in enumerate(statuses)
    ]
    folded = bl.build_baseline(runs)[KEY]["cells"][cell.id]
    assert folded["status"] == expected
    if expected == "ok":
        assert folded["runs_ok"] == 1 and folded["speedup_spread"] is None
    else:
        assert folded["reason"] == "reason 1" and folded.get("speedup") is None


def test_groups_by_fingerprint_and_tier():
    a100 = syn.env(syn.A100, "NVIDIA A100-SXM4-80GB")
    run = syn.run(1) + syn.run(2, environment=a100) + syn.run(3, cell_list=syn.cells(tier="nightly"))
    assert sorted(bl.build_baseline([run])) == sorted([KEY, (syn.A100, "pr"), (syn.H100, "nightly")])


def test_file_is_human_diffable(tmp_path, folded):
    path = bl.write_baseline(tmp_path / "b.json", folded)
    text = path.read_text()
    assert text == json.dumps(json.loads(text), indent=2, sort_keys=True) + "\n"
    cell = json.loads(text)["cells"][RESNET]
    for name in ("speedup", "speedup_lo", "eager_ms", "compiled_ms"):
        assert len(repr(cell[name]).replace(".", "").lstrip("0")) <= 4, (name, cell[name])
    assert oct(path.stat().st_mode & 0o777) == oct(0o644)


def _poisoned(folded):
    """A baseline whose serialisation fails midway: the last cell holds something JSON cannot write."""
    bad = json.loads(json.dumps(folded))
    bad["cells"]["zzz-last"] = {"speedup": object()}
    return bad


@pytest.mark.parametrize("failure", ["serialise", "fsync"])
def test_atomic_write_keeps_old_file(tmp_path, folded, monkeypatch, failure):
    path = bl.write_baseline(bl.baseline_path(tmp_path, *KEY), folded)
    before = path.read_bytes()
    new = _poisoned(folded) if failure == "serialise" else dict(folded, runs=99)
    if failure == "fsync":
        monkeypatch.setattr(bl.os, "fsync", lambda fd: (_ for _ in ()).throw(OSError("disk full")))
    with pytest.raises((TypeError, OutputError)):
        bl.write_baseline(path, new)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]  # no temp file left behind


def test_save_and_load_round_trip(tmp_path, three_runs):
    (path,) = bl.save_baselines(three_runs, tmp_path / "baselines")
    assert path == bl.baseline_path(tmp_path / "baselines", *KEY)
    assert bl.load_baseline(path, *KEY) == bl.build_baseline(three_runs)[KEY]
    assert bl.resolve_baseline(tmp_path / "baselines", *KEY)["fingerprint"] == syn.H100


def _corrupt(path):
    path.write_text('{"schema": 1, "cells": {')


def _old_schema(path):
    path.write_text(json.dumps({"schema": 0, "cells": {}}))


def _foreign(path):
    bl.write_baseline(path, {"schema": 1, "fingerprint": syn.A100, "tier": "pr", "cells": {}})


def _other_tier(path):
    bl.write_baseline(path, {"schema": 1, "fingerprint": syn.H100, "tier": "nightly", "cells": {}})


@pytest.mark.parametrize(
    "spoil, words",
    [
        (None, ["no baseline at", "perfgate baseline update RESULTS... --dir ", "--perf-save-baseline"]),
        (_corrupt, ["not valid JSON"]),
        (_old_schema, ["schema 0"]),
        (_foreign, [f"fingerprint '{syn.A100}'"]),
        (_other_tier, ["tier 'nightly'"]),
    ],
)
def test_unusable_baseline_names_the_expected_file(tmp_path, spoil, words):
    expected = bl.baseline_path(tmp_path, *KEY)
    given = tmp_path / "given.json" if spoil in (_foreign, _other_tier) else expected
    if spoil:
        spoil(given)
    with pytest.raises(bl.BaselineError) as err:
        bl.load_baseline(given, *KEY)
    for word in [str(expected), *words]:
        assert word in str(err.value)


def test_missing_baseline_dir_names_the_file(tmp_path):
    with pytest.raises(bl.BaselineError, match=f"{syn.H100}_pr.json"):
        bl.resolve_baseline(tmp_path / "not-yet", *KEY)


def test_record_without_fingerprint_is_refused():
    rec = syn.run(1)[0]
    rec["env"] = {}
    with pytest.raises(bl.BaselineError, match="no env.fingerprint"):
        bl.build_baseline([[rec]])


# ------------------------------------------------------------------------------------------------ run ids


def test_new_record_carries_a_run_id():
    cell = syn.cells()[0]
    assert new_record(cell, syn.env())["run_id"] is None
    assert new_record(cell, syn.env(), run_id="s1")["run_id"] == "s1"


def test_xdist_workers_of_one_session_are_one_run():
    run = syn.run(1, run_id="session-1")
    workers = [run[0::2], run[1::2]]  # each worker file holds half the cells
    folded = bl.build_baseline(workers)[KEY]
    assert folded["runs"] == 1 and all(c["runs_ok"] == 1 for c in folded["cells"].values())
    without_ids = [[{**r, "run_id": None} for r in w] for w in workers]
    assert bl.build_baseline(without_ids)[KEY]["runs"] == 2  # one file, one run: the old rule


def test_sessions_appended_to_one_file_are_separate_runs():
    one_file = syn.run(1, run_id="s1") + syn.run(2, run_id="s2") + syn.run(3, run_id="s3")
    folded = bl.build_baseline([one_file])[KEY]
    assert folded["runs"] == 3
    speedups = [next(r["speedup"] for r in one_file[i * 10 : (i + 1) * 10] if r["cell"] == RESNET) for i in range(3)]
    assert folded["cells"][RESNET]["speedup_runs"] == pytest.approx(speedups, rel=1e-3)
    assert folded["cells"][RESNET]["speedup_spread"] is not None


def test_split_runs_keeps_order_and_mixes_ids_with_files():
    a0, a1 = syn.run(1, run_id="a")[:5], syn.run(1, run_id="a")[5:]
    plain, b = syn.run(2), syn.run(3, run_id="b")
    runs = bl.split_runs([a0 + b, plain, a1])
    assert [len(r) for r in runs] == [10, 10, 10]
    assert [{r.get("run_id") for r in run} for run in runs] == [{"a"}, {"b"}, {None}]


def test_a_confirm_record_within_a_run_replaces_the_first():
    run = syn.run(1, run_id="s1")
    again = syn.run(9, run_id="s1", cell_list=syn.cells()[:1])  # the confirm round re-measured resnet50
    folded = bl.build_baseline([run, again])[KEY]
    assert folded["runs"] == 1
    assert folded["cells"][RESNET]["speedup"] == pytest.approx(again[0]["speedup"], rel=1e-3)


def test_a_host_clock_taken_after_the_profiler_is_not_folded():
    """Schema 8 took the host clock after the device clock's profiler, which read host times 25-33 % long:
    its host speedups never fold; its other clocks do."""
    right = [syn.run(i, overrides={RESNET: dict(host_speedup=h)}) for i, h in ((1, 1.88), (2, 1.86))]
    after = [syn.run(i, overrides={RESNET: dict(schema=8, host_speedup=1.30)}) for i in (3, 4)]
    cell = bl.build_baseline(right + after)[KEY]["cells"][RESNET]
    assert cell["host_speedup_runs"] == [1.88, 1.86] and len(cell["device_speedup_runs"]) == 4
