"""Which of a gate's regressions the runner's host can explain, so that only an A/B on that runner may judge
them (`perfgate settle`, docs/gate.md "Host-side alarms"). Imports no torch.

The committed baseline comes from other machines. The device clock carries across them (a cell's device
speedup repeats to ~0.2 % between H100 leases), the wall and host clocks do not where the compiled step has
little host headroom: on H100 leases whose host ran slow, clean runs of unchanged code read gpt2 infer's wall
speedup 7-21 % low and resnet50 infer's 9 % low with their device clocks within 1.8 % (BQ, BW, CA,
2026-11-26/27), and the confirm round, on the same slow host, confirmed them. Of the ten clean 12-cell runs
gated live from BK on, five failed, each on one such cell alone, while every cell caught in the eight
planted-GPU-loss runs was caught by its device clock. A baseline from other hosts cannot tell a slower host
from a change that adds host work; the base revision measured beside the change on the same runner can.

So a cell is *host-side* when every regression the gate found on it is on the wall or host clock and its
device clock was measured and did not move (perfgate.judge.triage's test); `perfgate settle` runs those cells
A/B, base revision against the change, and that verdict stands for them. Every other regression stands as
the gate found it, and a report the gate could not judge settles nothing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from perfgate.judge.triage import DEVICE, device_moved

HOST_SIDE_METRICS = frozenset({"speedup", "host_speedup"})  # the wall and host clocks' ratio rules


class SettleError(ValueError):
    """A gate report that cannot be read: the message names the file and what is wrong."""


@dataclass(frozen=True)
class Settlement:
    """What a gate report leaves to settle. `host_side`: pytest node ids of the host-side cells (`cells`
    their ids); `standing`: "cell: metrics (why)" for each regression that stands; `problem`: why the report
    settles nothing (the gate could not compare), else None."""

    host_side: tuple[str, ...] = ()
    cells: tuple[str, ...] = ()
    standing: tuple[str, ...] = ()
    problem: str | None = None

    @property
    def exit_code(self) -> int:
        """The verdict before any A/B: 2 nothing judged, 1 a regression stands, 0 nothing (else) to settle."""
        return 2 if self.problem else 1 if self.standing else 0


def read_report(path: str | Path) -> dict:
    """The gate's report.json (pytest --perf-report DIR, perfgate compare --json)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as err:
        raise SettleError(f"cannot read the gate report {path}: {err.strerror or err}") from None
    except ValueError as err:
        raise SettleError(f"the gate report {path} is not JSON: {err}") from None
    if not isinstance(data, dict) or not isinstance(data.get("reports"), list) or "exit_code" not in data:
        raise SettleError(
            f"{path} is not a gate report (expected the report.json of pytest --perf-report or perfgate compare "
            "--json, with 'exit_code' and 'reports')"
        )
    return data


def _device_held(row: dict) -> bool:
    """The row's device clock was compared and did not move (a JSON CellRow of the gate report)."""
    tripped = tuple(row.get("tripped") or ())
    for clock in row.get("clocks") or ():
        if clock.get("metric") in DEVICE and clock.get("change") is not None:
            return not device_moved(clock["metric"], clock["change"], clock.get("threshold"), tripped)
    return False


def settlement(data: dict) -> Settlement:
    """The host-side cells and the standing regressions of a gate report (read_report's data)."""
    if data.get("errors") or data.get("exit_code") not in (0, 1):
        why = "; ".join(map(str, data.get("errors") or ())) or f"the gate exited {data.get('exit_code')}"
        return Settlement(problem=f"the gate judged nothing: {why}")
    host_side, cells, standing = [], [], []
    for report in data["reports"]:
        rows = {row.get("cell"): row for row in report.get("rows") or ()}
        kinds = {t.get("cell"): t for t in report.get("triage") or ()}
        metrics: dict[str, list[str]] = {}
        for finding in report.get("regressions") or ():
            metrics.setdefault(finding.get("cell"), []).append(finding.get("metric"))
        for cell, tripped in metrics.items():
            triage = kinds.get(cell) or {}
            node = triage.get("node_id") or ""
            if set(tripped) <= HOST_SIDE_METRICS and _device_held(rows.get(cell) or {}) and "::" in node:
                host_side.append(node)
                cells.append(cell)
            else:
                standing.append(f"{cell}: {', '.join(tripped)} ({triage.get('kind') or 'no triage'})")
    return Settlement(tuple(host_side), tuple(cells), tuple(standing))


def text(s: Settlement) -> str:
    """What settle found, before any A/B: one line each."""
    if s.problem:
        return f"perfgate settle: nothing to settle, {s.problem} (exit 2)"
    lines = [f"perfgate settle: regression stands: {line}" for line in s.standing]
    if s.standing and s.host_side:
        lines.append(f"perfgate settle: {len(s.host_side)} host-side cell(s) not run A/B: a regression stands anyway")
    elif s.host_side:
        lines.append(
            f"perfgate settle: {len(s.host_side)} host-side cell(s), judged again A/B on this runner "
            f"(the base revision against this tree): {', '.join(s.cells)}"
        )
    elif not s.standing:
        lines.append("perfgate settle: the gate found no regression: nothing to settle")
    return "\n".join(lines)
