"""The clocks are one concept (perfgate.core.clocks): each one's record fields, rule and report column follow from
its definition, so a clock added there cannot be half-wired."""

from __future__ import annotations

import pytest

from perfgate.ab import process_report
from perfgate.ab.process_rows import Process
from perfgate.ab.process_verdict import judge_ab
from perfgate.core import record
from perfgate.core.clocks import CLOCKS, COMPUTE, DEVICE
from perfgate.judge.rules import CLOCK_NAMES, DEFAULT_RULES, SpeedupRule

import synthetic as syn

IDS = [clock.name for clock in CLOCKS]


@pytest.mark.parametrize("clock", CLOCKS, ids=IDS)
def test_a_clock_has_its_record_fields(clock):
    for name in (clock.eager_rounds, clock.compiled_rounds, clock.eager_ms, clock.compiled_ms):
        assert record.FIELD[name].unit == "ms"
    for name in (clock.ratio, f"{clock.ratio}_lo", f"{clock.ratio}_hi"):
        assert record.FIELD[name].unit == "x"
    assert clock.ratio in record.CLOCKS and CLOCK_NAMES[clock.ratio] == clock.name


@pytest.mark.parametrize("clock", CLOCKS, ids=IDS)
def test_a_clock_has_its_rule_at_its_line(clock):
    (rule,) = [r for r in DEFAULT_RULES if isinstance(r, SpeedupRule) and r.metric == clock.ratio]
    assert (rule.threshold, rule.phases, rule.clock) == (clock.threshold, clock.phases, clock.name)


def test_a_data_parallel_cell_shows_its_compute_clock_in_the_ab_device_column():
    cells = syn.cells(models=["gpt2"], phases=["train"])

    def side(label, compute):
        out = []
        for rep in range(1, 4):
            extra = {
                "phase": "ddp",
                COMPUTE.ratio: compute * (1 + rep / 1000),
                f"{COMPUTE.ratio}_lo": compute * 0.999,
                f"{COMPUTE.ratio}_hi": compute * 1.003,
            }
            records = syn.run(
                100 * rep + (label == "B"),
                cell_list=cells,
                overrides={c.id: extra for c in cells},
                noise=0.005,
                run_noise=0.002,
            )
            out.append(Process(label, rep, tuple(records), cold=rep == 1))
        return out

    report = judge_ab(side("A", 2.0) + side("B", 1.8))
    (row,) = report.rows
    assert COMPUTE.ratio in row.tripped  # a 10 % compute loss, gated by the device line
    cells_shown = process_report._timed_row(row).split(" | ")
    device_at = 1 + 2 * [metric for metric, _ in process_report.TIMED].index(DEVICE.ratio)
    assert cells_shown[device_at] == process_report._timed_cells(row.comparison(COMPUTE.ratio))[0]
