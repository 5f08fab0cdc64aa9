"""Bad input on purpose, one test per row of issue 15's table: nothing bad passes, nothing ends in a traceback.

Exit codes: 0 pass, 1 regression (a failed cell is one when the baseline had it ok), 2 unusable input, 3 a
crash in perfgate. docs/reliability.md lists what each bad input gets.
"""

from __future__ import annotations

import json
import math
import os
import re
import time

import pytest

from perfgate.cli import main
from perfgate.core import exits, validate
from perfgate.core.records_file import append_record
from perfgate.faces import compare as compare_face
from perfgate.judge.baseline import build_baseline, write_baseline

import synthetic as syn

KEY = (syn.H100, "pr")
CELL = "resnet50-train-inductor_default-amp_bf16"
QUIET = {"noise": 0.005, "run_noise": 0.002}


@pytest.fixture(scope="module")
def base():
    return build_baseline(syn.runs(3, first_seed=21, **QUIET))[KEY]


@pytest.fixture
def baseline_file(tmp_path, base):
    return str(write_baseline(tmp_path / "base.json", base))


def _results(tmp_path, **fields):
    """A run whose CELL record has `fields` replaced; written raw, as a broken writer would."""
    records = syn.run(5, **QUIET)
    for record in records:
        if record["cell"] == CELL:
            record.update(fields)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")  # NaN/Infinity as JSON does
    return str(path)


def _compare(tmp_path, baseline_file, capsys, **fields):
    rc = main(
        ["compare", _results(tmp_path, **fields), "--baseline", baseline_file, "--json", str(tmp_path / "g.json")]
    )
    out = capsys.readouterr()
    report = json.loads((tmp_path / "g.json").read_text())["reports"] if rc in (0, 1) else None
    return rc, out, report


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"speedup": math.nan}, "speedup nan"),
        ({"speedup": 0.0}, "speedup 0.0"),
        ({"speedup": -math.inf}, "speedup -inf"),
        ({"speedup": math.inf}, "speedup inf"),
        ({"speedup": None}, "speedup missing"),
        ({"speedup_lo": math.nan, "speedup_hi": math.nan}, "speedup_lo nan"),
        ({"compile_s": math.nan}, "compile_s nan"),
        ({"compiled_ms": -3.0}, "compiled_ms -3.0"),
        ({"compiled_round_ms": [10.0, math.nan]}, "compiled_round_ms holds nan"),
        ({"peak_mem_compiled_mb": math.inf}, "peak_mem_compiled_mb inf"),
        ({"device_speedup": 0.0}, "device_speedup 0.0"),
        ({"graph_breaks": -1}, "graph_breaks -1"),
        ({"recompiles": 10**30}, "recompiles 1000000000000000000000000000000"),  # past 2**53: no JSON count
        ({"speedup_lo": 2.5, "speedup_hi": 2.0}, "interval [2.5, 2.0] is upside down"),
    ],
    ids=lambda v: v if isinstance(v, str) else None,
)
def test_impossible_figures_on_an_ok_record_fail_the_cell_and_the_gate(tmp_path, baseline_file, capsys, fields, named):
    rc, out, report = _compare(tmp_path, baseline_file, capsys, **fields)
    assert rc == 1, out.err
    (finding,) = [f for f in report[0]["regressions"] if f["cell"] == CELL]
    assert finding["metric"] == "status" and validate.BAD_FIGURES in finding["message"] and named in finding["message"]
    assert CELL in report[0]["failed"] and not report[0]["improvements"]
    assert "NaN" not in json.dumps(report[0]["rows"]) and "Infinity" not in json.dumps(report[0]["rows"])


@pytest.mark.parametrize(
    "fields, named",
    [
        ({"speedup": "fast"}, "speedup: 'fast' is not a number"),
        ({"speedup": True}, "speedup: True is not a number"),
        ({"status": "great"}, "status: 'great' is not one of ok, failed, skipped"),
        ({"compiled_round_ms": "10,11"}, "compiled_round_ms"),
        ({"env": ["gpu"]}, "env:"),
        ({"env": {"fingerprint": 7}}, "env.fingerprint: 7 is not a safe name"),
    ],
)
def test_a_value_of_the_wrong_kind_is_unusable_input_named_by_file_line_cell_field(
    tmp_path, baseline_file, capsys, fields, named
):
    rc, out, _ = _compare(tmp_path, baseline_file, capsys, **fields)
    assert rc == 2 and "Traceback" not in out.err
    assert "r.jsonl:" in out.err and f"cell '{CELL}'" in out.err and named in out.err


@pytest.mark.parametrize(
    "edit, named",
    [
        (lambda c: c.update(speedup="2.3"), "speedup: '2.3' is not a finite number > 0"),
        (lambda c: c.update(speedup=None), "speedup: missing on an ok cell"),
        (lambda c: c.update(device_speedup_runs=[2.4, -1]), "device_speedup_runs"),
        (lambda c: c.update(graph_breaks=0.5), "graph_breaks: 0.5 is not a whole number"),
        (lambda c: c.update(host_speedup_spread=308.0), "host_speedup_spread: 308.0 is past 10"),
        (lambda c: c.update(compiled_kernels_range=[390, 380]), "compiled_kernels_range: [390, 380] is not [least"),
        (lambda c: c.update(compiled_kernels_range="380-390"), "compiled_kernels_range: '380-390' is not"),
        (
            lambda c: c.update(compiled_kernels=400.0, compiled_kernels_range=[380, 390]),
            "compiled_kernels_range: [380, 390] is not [least, most], two finite numbers >= 0 around "
            "compiled_kernels 400.0",
        ),
        (lambda c: c.update(status="fine"), "status: 'fine'"),
    ],
)
def test_a_malformed_baseline_cell_is_unusable_input(tmp_path, base, capsys, edit, named):
    broken = json.loads(json.dumps(base))
    edit(broken["cells"][CELL])
    path = tmp_path / "base.json"
    path.write_text(json.dumps(broken))
    rc = main(["compare", _results(tmp_path), "--baseline", str(path)])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err and f"cell '{CELL}': {named}" in err and str(path) in err


def test_a_nan_in_a_baseline_file_is_unusable_input(tmp_path, base, capsys):
    text = json.dumps(base).replace(f'"speedup": {base["cells"][CELL]["speedup"]}', '"speedup": NaN', 1)
    path = tmp_path / "base.json"
    path.write_text(text)
    assert main(["compare", _results(tmp_path), "--baseline", str(path)]) == 2
    assert "is not a finite number" in capsys.readouterr().err


def test_report_on_nan_and_inf_records_marks_the_cells_failed(tmp_path, capsys):
    records = syn.run(5, **QUIET)
    records[0].update(speedup=math.nan, compile_s=math.inf)
    records[1].update(peak_mem_compiled_mb=-math.inf, tflops_compiled=math.nan)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    html, md = tmp_path / "r.html", tmp_path / "r.md"
    assert main(["report", str(path), "--html", str(html), "--markdown", str(md)]) == 0
    digest = md.read_text()
    for record in records[:2]:
        assert f"- failed `{record['cell']}`: {validate.BAD_FIGURES}:" in digest
    assert "NaN" not in html.read_text() and "Infinity" not in html.read_text()


def test_a_count_written_as_a_whole_float_is_that_count(tmp_path, baseline_file, capsys, base):
    """JSON has one number type: 3.0 graph breaks (a results file that went through pandas) are 3."""
    breaks = base["cells"][CELL]["graph_breaks"]
    rc, out, report = _compare(tmp_path, baseline_file, capsys, graph_breaks=float(breaks), recompiles=0.0)
    assert rc == 0, out.err
    (row,) = [r for r in report[0]["rows"] if r["cell"] == CELL]
    assert row["verdict"] == "ok" and row["graph_breaks"] == breaks and isinstance(row["graph_breaks"], int)


def test_a_count_that_is_no_count_renders_as_unknown_on_any_record(tmp_path, baseline_file, capsys):
    """A fractional count fails an ok record; on any record it renders as "–", never in a "d" format."""
    records = syn.run(5, **QUIET)
    cells = [r["cell"] for r in records[:2]]
    records[0].update(graph_breaks=0.5)
    records[1].update(status="failed", reason="OOM", recompiles=2.5)
    path = tmp_path / "r.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["compare", str(path), "--baseline", baseline_file, "--markdown", str(tmp_path / "g.md")]) == 1
    assert main(["report", str(path), "--html", str(tmp_path / "r.html"), "--markdown", str(tmp_path / "r.md")]) == 0
    digest = (tmp_path / "r.md").read_text()
    assert f"- failed `{cells[0]}`: {validate.BAD_FIGURES}: graph_breaks 0.5" in digest
    assert f"- failed `{cells[1]}`: OOM" in digest
    assert "Traceback" not in capsys.readouterr().err


def test_results_and_history_take_bad_figures_as_failed_cells(tmp_path, capsys):
    path = _results(tmp_path, speedup=math.nan)
    assert main(["results", path]) == 0
    assert any(CELL in line and "failed" in line for line in capsys.readouterr().out.splitlines())
    db = str(tmp_path / "h.sqlite")
    assert main(["history", "add", path, "--db", db]) == 0
    assert main(["history", "show", CELL, "--db", db]) == 0
    assert "failed" in capsys.readouterr().out


def test_baselines_never_fold_a_record_with_bad_figures(tmp_path, capsys):
    paths = []
    for n in range(3):
        records = syn.run(40 + n, **QUIET)
        if n == 0:
            next(r for r in records if r["cell"] == CELL).update(speedup=1e9, speedup_hi=math.inf)
        paths.append(tmp_path / f"r{n}.jsonl")
        paths[-1].write_text("".join(json.dumps(r) + "\n" for r in records))
    assert main(["baseline", "update", *map(str, paths), "--dir", str(tmp_path / "b")]) == 0
    (written,) = (tmp_path / "b").glob("*.json")
    cell = json.loads(written.read_text())["cells"][CELL]
    assert cell["runs_ok"] == 2 and max(cell["speedup_runs"]) < 10


def test_a_crash_inside_perfgate_exits_3_never_1(tmp_path, baseline_file, capsys, monkeypatch):
    def broken(*args, **kwargs):
        raise ZeroDivisionError("a bug")

    monkeypatch.setattr(compare_face, "gate_run", broken)
    assert main(["compare", _results(tmp_path), "--baseline", baseline_file]) == exits.BUG == 3
    err = capsys.readouterr().err
    assert "ZeroDivisionError: a bug" in err and "internal error in `perfgate compare`" in err


def test_markdown_escapes_html_and_links_in_reasons_and_names(tmp_path, baseline_file, capsys):
    reason = "OOM <img src=x onerror=alert(1)> see [here](http://evil) | `x`"
    cells = syn.cells()
    run = syn.run(5, overrides={cells[0].id: syn.failed(cells[0], reason)}, **QUIET)
    path = syn.write_run(tmp_path / "r.jsonl", run)
    main(["compare", path, "--baseline", baseline_file, "--markdown", str(tmp_path / "g.md")])
    text = (tmp_path / "g.md").read_text()
    assert "<img" not in text and not re.search(r"(?<!\\)\]\(", text)  # no tag, no unescaped link
    assert "OOM &lt;img src=x onerror=alert(1)> see \\[here\\](http://evil) \\| \\`x\\`" in text


def test_a_killed_baseline_write_leaves_no_lasting_temp_file(tmp_path, base):
    stale = tmp_path / ".base.json.abc123.tmp"
    stale.write_text("{half")
    os.chmod(stale, 0o600)
    old = time.time() - 3600
    os.utime(stale, (old, old))
    fresh = tmp_path / ".base.json.def456.tmp"  # a write in flight right now: left alone
    fresh.write_text("{")
    write_baseline(tmp_path / "base.json", base)
    assert not stale.exists() and fresh.exists()


def test_records_that_the_writer_produces_pass_the_check(tmp_path):
    """The factory's records are what a real run writes: none is failed by the check."""
    path = tmp_path / "r.jsonl"
    for record in syn.run(7):
        append_record(path, record)
    from perfgate.core.records_file import load_records

    assert all(r["status"] == "ok" for r in load_records([path]))


def test_records_timed_by_workers_that_shared_the_machine_are_never_gated_or_folded(tmp_path, baseline_file, capsys):
    path = _results(tmp_path, unfit="timed by one of 2 xdist workers on 1 GPU(s): workers shared a GPU")
    assert main(["compare", path, "--baseline", baseline_file]) == 2
    assert main(["baseline", "update", path, "--dir", str(tmp_path / "b")]) == 2
    err = capsys.readouterr().err
    assert "1 record(s) are unfit for a timing gate" in err and "1 record(s) are unfit for a baseline" in err
    assert not (tmp_path / "b").exists()
