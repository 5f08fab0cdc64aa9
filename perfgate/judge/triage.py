"""From an alert to the next command: a triage line for every cell the gate flags, and for every change
point of a nightly history the nights around it and the `perfgate bisect` command that would settle it.
Imports no torch.

A flagged cell's class, from the evidence in its row and the records (first that applies):

    environment    the run's versions or host CPU differ from the baseline's: the numbers compare two
                   environments, so settle that first (perfgate ab, docs/ab.md)
    real           the device clock moved past its line: the GPU does more work per step (or a count,
                   memory, numerics or status rule tripped: those are not timings); a count of the step's
                   work past its band is named ("compiled step runs 412 GPU kernels, baseline 380") in
                   whichever class the row falls
    noise-limited  the clock that tripped had a line wider than its threshold: too little evidence to say
                   more; re-measure (more runs in the baseline, or perfgate ab with more processes)
    host-side      the wall or host clock tripped and the device clock, measured, did not: more Python,
                   guards or launches per step, or a slower host (the line gives the host probe's reading
                   against the baseline's, where both have one)
    wall only      no device clock (a CPU run, or the profiler failed): real and host-side look alike
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Sequence

from perfgate.core.matrix import Cell

ENV_KEYS = ("gpu", "driver", "cuda", "torch", "triton", "transformers", "timm", "cpu_model", "cupti_teardown")
# A baseline whose runs did not record it ran before perfgate detached CUPTI after each profiler session
# (2026-11-29): CUPTI stayed attached, and every host-bound step a process timed after its first cell read slower.
ATTACHED = (
    "CUPTI detached after each profiler session; the baseline's runs left it attached (perfgate before 2026-11-29)"
)
# perftests/test_compile_speedup.py's test per phase (tests/test_triage.py keeps this true)
PERF_TESTS = "perftests/test_compile_speedup.py"
TEST_OF_PHASE = {"train": "test_train_step", "infer": "test_infer_step", "ddp": "test_ddp_train_step"}
TIMED = ("speedup", "device_speedup", "compute_speedup", "host_speedup")
GPU_WORK_RATIOS = ("device_speedup", "compute_speedup")  # the ratios of GPU work: device, and a DDP cell's compute


@dataclass(frozen=True)
class Triage:
    cell: str
    node_id: str  # or the cell id, where its record lacks the parts of one
    command: str  # reproduces the measurement, gated against the same baselines
    env: dict  # ENV_KEYS of the record
    kind: str  # environment | real | noise-limited | host-side | wall only
    why: str

    def env_text(self) -> str:
        return ", ".join(f"{k} {v}" for k, v in self.env.items()) or "no environment recorded"


def node_id(record: dict) -> str | None:
    """The pytest node id of the record's cell; None where the record lacks the cell's parts."""
    if not all(record.get(k) for k in ("model", "phase", "variant", "precision")):
        return None
    cell = Cell(
        record["model"],
        record["phase"],
        record["variant"],
        record["precision"],
        record.get("device_kind") or "gpu",
        record.get("tier") or "nightly",
        _ranks(record),
    )
    return f"{PERF_TESTS}::{TEST_OF_PHASE.get(record['phase'], 'test_' + record['phase'])}[{cell.param_id}]"


def _ranks(record: dict) -> int | None:
    """A data-parallel record's ranks for its Cell (None: the phase's default world); a one-rank probe's
    record (tools/probes/ddp_one_gpu.py, PROBE_WORLD=1) is of the default cell too."""
    ranks = record.get("world_size")
    return ranks if record["phase"] == "ddp" and isinstance(ranks, int) and ranks > 1 else None


def selection(record: dict) -> list[str]:
    """Pytest args that select the record's cell alone: its node id, else the cell id as -k."""
    node = node_id(record)
    return [node] if node else [PERF_TESTS, "-k", record.get("cell") or "CELL"]


def env_of(record: dict) -> dict:
    env = record.get("env") or {}
    return {k: env[k] for k in ENV_KEYS if env.get(k) is not None}


def env_differences(record: dict, baseline: dict) -> list[str]:
    """'torch 2.11.0 → 2.12.0' for each version the baseline knows and the record has otherwise; the host CPU
    where the baseline names its hosts and this one is not among them."""
    versions, env = baseline.get("versions") or {}, env_of(record)
    diffs = [
        f"{k} {versions[k]} → {env[k]}"
        for k in ENV_KEYS
        if k != "cpu_model" and versions.get(k) is not None and k in env and str(versions[k]) != str(env[k])
    ]
    if env.get("cupti_teardown") == "1" and "cupti_teardown" not in versions and versions:
        diffs.append(ATTACHED)
    hosts = baseline.get("host_cpus") or []
    if hosts and env.get("cpu_model") and env["cpu_model"] not in hosts:
        diffs.append(f"host CPU {env['cpu_model']} (baseline: {', '.join(hosts)})")
    return diffs


def classify(row, record: dict, baseline: dict, findings=()) -> tuple[str, str]:
    """(kind, why) of a flagged gate row (perfgate.judge.gate_rows.CellRow) and its record (module docstring); the
    counts of a step's work that moved past their band (`findings` of the cell, form "band") are named after it,
    or are the why where no timing tripped: they say what the step does more of."""
    kind, why = _classify(row, record, baseline)
    bands = [f for f in findings if f.form == "band"]
    counts = [f.message for f in bands]
    if counts and kind == "real" and not [m for m in row.tripped if m in TIMED]:
        others = [m for m in row.tripped if m not in {f.metric for f in bands}]
        return kind, "; ".join([f"{', '.join(others)} moved (not a timing)"] * bool(others) + counts)
    return kind, "; ".join([why, *counts])


def _classify(row, record: dict, baseline: dict) -> tuple[str, str]:
    timed = [m for m in row.tripped if m in TIMED]
    # how CUPTI was left changes the clocks alone: a graph break or more memory is no less real for it
    diffs = [d for d in env_differences(record, baseline) if timed or d != ATTACHED]
    if diffs:
        return "environment", "; ".join(diffs)
    if not timed:
        return "real", f"{', '.join(row.tripped) or row.verdict} moved (not a timing)"
    device = next((c for c in (row.clock(m) for m in GPU_WORK_RATIOS) if c is not None and c.change is not None), None)
    if device is not None and device_moved(device.metric, device.change, device.threshold, row.tripped):
        return "real", f"{device.clock} clock {device.change:+.1%} (line {device.threshold:.1%})"
    limited = [c for c in (row.clock(m) for m in timed) if c is not None and c.noise_limited]
    if limited:
        c = limited[0]
        return "noise-limited", f"{c.clock} line {c.threshold:.1%} is wider than its threshold (change {c.change:+.1%})"
    probe = host_probe_text(record, (baseline.get("cells") or {}).get(row.cell) or {})
    if device is not None:
        return "host-side", f"{', '.join(timed)} tripped, {device.clock} clock {device.change:+.1%} did not move{probe}"
    return "wall only", f"{', '.join(timed)} tripped; no device clock to tell GPU from host{probe}"


def device_moved(metric: str, change: float, threshold: float | None, tripped) -> bool:
    """A device clock moved: its rule's finding counted, or its change reached the row's threshold (the smallest
    drop that trips) without one."""
    return metric in tripped or change <= -(threshold or 0)


def host_probe_text(record: dict, base_cell: dict) -> str:
    """How fast the host ran for this record against the baseline's runs, by the host probe (schema 12,
    perfgate.measure.host_speed): context for a reader, not a verdict. On one quiet H100 machine the probe read
    1.33-3.56 ms from cell to cell (lease BR, 2026-11-26), and followed the inference cells' host clocks but not
    the training cells' (docs/time-to-verdict.md), so the gate does not act on it."""
    was, now = base_cell.get("host_probe_ms"), record.get("host_probe_ms")
    if not was or not now:
        return ""
    return f"; host probe {now:.2f} ms against the baseline's {was:.2f} ms ({now / was - 1:+.0%}: + is a slower host)"


def triage(report) -> list[Triage]:
    """A Triage per cell with a regression in a GateReport (perfgate.judge.gate)."""
    records = {r["cell"]: r for r in report.records}
    flagged = dict.fromkeys(f.cell for f in report.regressions)
    lines = []
    for row in (r for r in report.rows if r.cell in flagged and r.cell in records):
        record = records[row.cell]
        found = [f for f in (*report.regressions, *report.improvements) if f.cell == row.cell]
        kind, why = classify(row, record, report.baseline, found)
        command = shlex.join(
            [
                "python",
                "-m",
                "pytest",
                *selection(record),
                "-p",
                "no:randomly",
                "--perf-baseline",
                report.baseline_location,
            ]
        )
        lines.append(Triage(row.cell, node_id(record) or row.cell, command, env_of(record), kind, why))
    return lines


# ---------------------------------------------------------------------------------------------- nightly


def bisect_hint(
    points: Sequence[dict], ok: Sequence[int], index: int, processes: int = 3, rule: str = "speedup"
) -> str:
    """The nights around a change point (index into `ok`, the ok points of a history series) and the
    command that would settle it on `rule`'s metric (the clock whose series moved): commits when the versions
    agree, the versions that moved otherwise."""
    good, bad = points[ok[index - 1]], points[ok[index]]
    nights = (
        f"last good {good['date']} ({(good.get('commit') or 'unknown')[:12]}), first bad {bad['date']} "
        f"({(bad.get('commit') or 'unknown')[:12]})"
    )
    changed = [
        k for k in ENV_KEYS if (good.get("env") or {}).get(k) != (bad.get("env") or {}).get(k) and k != "cpu_model"
    ]
    moved = [f"{k} {good['env'].get(k)} → {bad['env'].get(k)}" for k in changed if k != "cupti_teardown"]
    select = ["--", *selection(bad), "-p", "no:randomly"]
    if "cupti_teardown" in changed and not moved:  # perfgate's own measuring changed between the nights
        return (
            f"{nights}; CUPTI was left attached after profiler sessions on one night and detached on the other "
            "(perfgate from 2026-11-29, docs/measuring.md step 5): host-bound steps timed another way, no code "
            "to bisect"
        )
    if moved:
        return (
            f"{nights}; versions moved: {'; '.join(moved)}: bisect the releases between, e.g. perfgate "
            f"bisect --step-pip 'PKG==OLD' ... --step-pip 'PKG==NEW' --rule {rule} --processes 3 {shlex.join(select)}"
        )
    if not good.get("commit") or not bad.get("commit"):
        return f"{nights}; no commits recorded to bisect (perfgate history add --commit SHA files them)"
    if good["commit"] == bad["commit"]:
        return f"{nights}; same commit and versions: the machine moved, not the code (host CPU, driver, load)"
    return f"{nights}: " + shlex.join(
        [
            "perfgate",
            "bisect",
            "--good",
            good["commit"],
            "--bad",
            bad["commit"],
            "--rule",
            rule,
            "--processes",
            str(processes),
            *select,
        ]
    )
