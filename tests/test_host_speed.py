"""perfgate.measure.host_speed: the host probe's figures and how they fold into a record (what they read on GPU
hosts: docs/time-to-verdict.md)."""

from __future__ import annotations

from perfgate.measure import record_builder
from perfgate.measure.host_speed import HostSpeed


def test_the_probe_folds_into_the_record_as_medians():
    speed = HostSpeed()
    record = {}
    record_builder.merge_host_speed(record, speed.result())
    assert record == {}  # never sampled: nothing claimed
    for _ in range(3):
        speed.sample()
    record_builder.merge_host_speed(record, speed.result())
    assert 0 < record["host_probe_cpu_ms"] <= record["host_probe_ms"] * 1.05
