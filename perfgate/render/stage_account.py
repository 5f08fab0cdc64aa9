"""Where a run's time went, stage by stage (perfgate.core.stages): the line a run ends with, and the per-cell
table of `perfgate report --cells`. Imports no torch."""

from __future__ import annotations

from typing import Sequence

from perfgate.core.stages import CONFIRM, STAGES, totals
from perfgate.plan.costs import cell_seconds, gpus_held, hms
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
    return text + paired_line(records)


def paired_line(records: Sequence[dict]) -> str:
    """ "; paired, both sides: 9:40 (prepare 4:02, looks 5:10 of which wall rounds 2:01, ..., finish 0:28)":
    where a paired run's time went beyond this tree's own stages (perfgate.ab.duet's seconds); "" unpaired."""
    paired = [r for r in records if (r.get("paired") or {}).get("seconds")]
    if not paired:
        return ""
    spent: list[dict] = [r["paired"]["seconds"] for r in paired]
    total = {key: sum(sum(s.get(key) or [], 0.0) for s in spent) for key in ("prepare", "looks", "finish")}
    rounds = {clock: sum(s.get(f"{clock}_rounds", 0.0) for s in spent) for clock in ("wall", "host", "device")}
    within = ", ".join(f"{clock} rounds {hms(x)}" for clock, x in rounds.items() if x >= 0.5)
    return (
        f"; paired, both sides: {hms(sum(cell_seconds(r) for r in paired))} (prepare {hms(total['prepare'])}, "
        f"looks {hms(total['looks'])}" + (f" of which {within}" if within else "") + f", finish {hms(total['finish'])})"
    )


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
