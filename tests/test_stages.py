"""Where a run's time went: the stage totals, the run-end line and `perfgate report --stages` (no torch)."""

import numpy as np
import pytest

from perfgate.cli import main
from perfgate.core.stages import CONFIRM, share, totals
from perfgate.render.stage_account import cells_table, run_line

import synthetic as syn


def _record(cell="gpu-gpt2-train-inductor_default-amp_bf16", world=None, remeasure="", **stages):
    return {
        "cell": cell,
        "device_kind": "gpu",
        "world_size": world,
        "remeasure": remeasure,
        "wall_s": sum(stages.values()),
        "stages": stages,
    }


def test_totals_add_stages_weighted_by_the_gpus_a_cell_held_and_charge_a_remeasure_to_confirm():
    records = [
        _record(compile=30.0, timing=10.0),
        _record(cell="gpu-gpt2-ddp-inductor_default-fp32", world=2, compile=20.0, timing=5.0),
        _record(remeasure="confirm", timing=8.0, device_clock=4.0),
    ]
    seconds = totals(records, weight=lambda r: r["world_size"] or 1)
    assert seconds == {"compile": 70.0, "timing": 20.0, CONFIRM: 12.0}
    assert share(seconds, "timing") == pytest.approx(20 / 102)


def test_a_record_without_a_stage_account_counts_as_other():
    assert totals([{"cell": "c", "wall_s": 5.0}]) == {"other": 5.0}


def test_the_run_line_lists_stages_largest_first_with_the_precompile():
    line = run_line([_record(compile=90.0, timing=30.0)], precompile_s=61.0)
    assert line == (
        "perfgate: where the cells' 2:00 of GPU-time went: compile 1:30 (75%), timing 0:30 (25%); "
        "before them, the precompile took 1:01"
    )


def test_the_cells_table_has_a_column_per_stage_measured_and_the_timing_share():
    table = cells_table([_record(compile=30.0, timing=10.0)]).splitlines()
    assert table[0] == "| cell | wall s | compile | timing | timing share |"
    assert table[2] == "| gpu-gpt2-train-inductor_default-amp_bf16 | 40.0 | 30.0 | 10.0 | 25% |"


def test_report_stages_prints_the_table_and_the_totals(tmp_path, capsys):
    rec = syn.record(syn.cells()[0], rng=np.random.default_rng(0))
    rec.update(stages={"compile": 30.0, "timing": 10.0}, wall_s=40.0)
    assert main(["report", syn.write_run(tmp_path / "results.jsonl", [rec]), "--stages"]) == 0
    out = capsys.readouterr().out
    assert "| timing share |" in out and "where the cells' 0:40 of GPU-time went: compile 0:30 (75%)" in out


def test_a_paired_run_line_adds_where_both_sides_time_went():
    record = _record(compile=10.0, timing=20.0)
    record["paired"] = {
        "seconds": {
            "prepare": [30.0, 25.0],
            "looks": [40.0, 20.0],
            "finish": [3.0, 2.0],
            "wall_rounds": 35.0,
            "host_rounds": 12.0,
            "device_rounds": 13.0,
            "total": 121.0,
        }
    }
    assert run_line([record]).endswith(
        "; paired, both sides: 2:01 (prepare 0:55, looks 1:00 of which wall rounds 0:35, host rounds 0:12, "
        "device rounds 0:13, finish 0:05)"
    )
