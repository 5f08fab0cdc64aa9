"""The gate report's rows: one CellRow per cell, the current record's figures beside the baseline's, with a
ClockRow per ratio rule as that rule saw it, and the cell's verdict (regression, improvement, advisory, ok, failed,
new, missing). perfgate.judge.gate builds them from each cell's findings; the reports and the triage read them.
Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any, Sequence

from perfgate.core.record import FIELD
from perfgate.judge.finding import ADVISORY, IMPROVEMENT, REGRESSION, Finding
from perfgate.judge.rules import SpeedupRule


@dataclass(frozen=True)
class ClockRow:
    """One clock of one cell as its ratio rule saw it. `change` and `threshold` are in the rule's terms:
    a speedup's change (-0.05: 5 % lower) and the smallest drop that trips; for the host clock the change
    of compiled host ms relative to eager's (+0.15: 15 % more) and the smallest growth that trips."""

    metric: str  # speedup | device_speedup | host_speedup
    clock: str  # wall | device | host
    value: float | None
    lo: float | None
    hi: float | None
    baseline: float | None
    change: float | None
    threshold: float | None  # None: not compared (no baseline value, or not ok in both)
    noise_limited: bool  # noise alone puts that line past the nominal threshold
    noise: float | None  # the sd of the log drop the rule assumed (0.01 ~ 1 %)
    run_to_run_known: bool | None  # the baseline cell had 2+ runs of this clock (None: not compared)


@dataclass(frozen=True)
class CellRow:
    """One line of the report's tables: the current record's numbers beside the baseline's. The wall
    clock's fields sit flat (speedup ... run_to_run_known) as before; `clocks` holds every ratio rule's."""

    cell: str
    verdict: str  # regression | improvement | advisory | ok | failed | new | missing
    status: str | None
    reason: str
    eager_ms: float | None
    compiled_ms: float | None
    speedup: float | None
    speedup_lo: float | None
    speedup_hi: float | None
    baseline_speedup: float | None
    change: float | None  # speedup / baseline speedup - 1
    threshold: float | None  # the wall rule's effective threshold: the smallest drop that trips
    noise_limited: bool  # noise alone puts that line past the nominal threshold
    noise: float | None  # the sd of the speedup's log drop the rule assumed (0.01 ~ 1 %)
    run_to_run_known: bool | None  # the baseline cell had 2+ ok runs (None: speedup not gated here)
    compile_s: float | None
    graph_breaks: int | None
    recompiles: int | None
    peak_mem_compiled_mb: float | None
    numerics: str | None
    clocks: tuple[ClockRow, ...] = ()  # one per ratio rule, in the rules' order (wall, device, host)
    busy_compiled: float | None = None  # GPU-busy fraction of the compiled step (device ms / wall ms)
    bound: str | None = None  # "device" | "host": what the compiled step's wall time follows
    eager_host_ms: float | None = None  # host ms to issue one step
    compiled_host_ms: float | None = None
    tripped: tuple[str, ...] = ()  # metrics of this cell's findings (any kind), in the rules' order

    def clock(self, metric: str) -> ClockRow | None:
        return next((c for c in self.clocks if c.metric == metric), None)


def clock_row(rule: SpeedupRule, base: dict, cur: dict) -> ClockRow:
    m = rule.metric
    gated = rule.compared(base, cur)
    ref, now = base.get(m), cur.get(m)
    noise = rule.noise(base, cur) if gated else None
    return ClockRow(
        metric=m,
        clock=rule.clock,
        value=now,
        lo=cur.get(f"{m}_lo"),
        hi=cur.get(f"{m}_hi"),
        baseline=ref,
        change=rule.change(ref, now) if gated and ref is not None and now is not None else None,
        threshold=rule.effective_threshold(base, cur) if gated else None,
        noise_limited=gated and rule.noise_limited(base, cur),
        noise=noise.sigma if noise else None,
        run_to_run_known=noise.known if noise else None,
    )


# CellRow's fields named as record fields (perfgate.core.record.FIELDS) hold the current record's values; `cell`
# is the id from either side (a missing cell has no current record).
ROW_RECORD_FIELDS = tuple(f.name for f in fields(CellRow) if f.name in FIELD and f.name != "cell")


def cell_row(
    cell_id: str, verdict: str, base: dict | None, cur: dict | None, rules: Sequence, findings: Sequence[Finding]
) -> CellRow:
    cur, base = cur or {}, base or {}
    clocks = tuple(clock_row(r, base, cur) for r in rules if isinstance(r, SpeedupRule))
    wall = next((c for c in clocks if c.metric == "speedup"), None)
    ref, now = base.get("speedup"), cur.get("speedup")
    found = {f.metric for f in findings}
    values: dict[str, Any] = {name: cur.get(name) for name in ROW_RECORD_FIELDS}  # JSON values, as read
    values["reason"] = values["reason"] or ""
    return CellRow(
        cell=cell_id,
        verdict=verdict,
        **values,
        baseline_speedup=ref,
        change=now / ref - 1 if ref and now is not None and cur.get("status") == "ok" else None,
        threshold=wall.threshold if wall else None,
        noise_limited=bool(wall and wall.noise_limited),
        noise=wall.noise if wall else None,
        run_to_run_known=wall.run_to_run_known if wall else None,
        clocks=clocks,
        tripped=tuple(r.metric for r in rules if r.metric in found),
    )


def verdict_of(findings: Sequence[Finding], base: dict | None, cur: dict | None) -> str:
    if cur is None:
        return "missing"
    if base is None:
        return "new"
    kinds = {f.kind for f in findings}
    for kind in (REGRESSION, IMPROVEMENT, ADVISORY):
        if kind in kinds:
            return kind
    return "ok" if cur.get("status") == "ok" else "failed"
