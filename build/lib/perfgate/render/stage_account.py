"""Where a run's time went, stage by stage (perfgate.core.stages): the line a run ends with, and the per-cell
table of `perfgate report --cells`. Imports no torch."""

from __future__ import annotations

from typing import Sequence

from perfgate.core.stages import CONFIRM, STAGES, totals
from perfgate.plan.costs import gpus_held, hms
from perfgate.render.report import md_text

LABELS = {stage: stage.replace("_", " ") for stage in (*STAGES, CONFIRM)}
LABELS[CONFIRM] = "confirm round"


def run_line(records: Sequence[dict], precompile_s: float = 0.0) -> str | None:
    """ "perfgate: where the cells' 14:12 of GPU-time went: compile 4:06 (29%), timing 3:00 (21%), ..." (m:ss;
    GPU-time is a cell's seconds times the GPUs it held; CPU cells: their seconds), with the precompile before
    the first cell; None without records."""
    if not records:
        return None
    on_gpu = any(gpus_held(record) for record in records)
    seconds = totals(records, weight=gpus_held if on_gpu else lambda _r: 1.0)
    whole = sum(seconds.values())
    if not whole:
        return None
    parts = ", ".join(
        f"{LABELS[stage]} {hms(s)} ({s / whole:.0%})"
        for stage, s in sorted(seconds.items(), key=lambda item: -item[1])
        if s >= 0.5
    )
    unit = "GPU-time" if on_gpu else "time"
    text = f"perfgate: where the cells' {hms(whole)} of {unit} went: {parts}"
    if precompile_s:
        text += f"; before them, the precompile took {hms(precompile_s)}"
    return text


def cells_table(records: Sequence[dict]) -> str:
    """One row per cell: its wall seconds and each stage's seconds (Markdown); the timed rounds' share last."""
    stages = [stage for stage in STAGES if any((r.get("stages") or {}).get(stage) for r in records)]
    lines = [
        "| cell | wall s | " + " | ".join(LABELS[s] for s in stages) + " | timing share |",
        "|---|---|" + "---|" * len(stages) + "---|",
    ]
    for record in sorted(records, key=lambda r: r["cell"]):
        account = record.get("stages") or {}
        wall = record.get("wall_s") or 0.0
        cells = [f"{account[s]:.1f}" if account.get(s) else "–" for s in stages]
        share = f"{account.get('timing', 0.0) / wall:.0%}" if wall and account else "–"
        name = md_text(record["cell"]) + (f" ({record['remeasure']})" if record.get("remeasure") else "")
        lines.append(f"| {name} | {wall:.1f} | " + " | ".join(cells) + f" | {share} |")
    return "\n".join(lines)
