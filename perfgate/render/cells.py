"""The per-cell view of a results file (`perfgate report --cells`): one Markdown row per cell with what a
matrix run measured of it: both speedups, step times, the compile cold and warm, both peaks, graph counts,
numerics, status and reason, and what the cell cost in wall time; its batch where the records carry one (a
model may train at another batch under CUDA graphs, spec.Size.cuda_graph_train_batch). Data-parallel cells
get a second table of what only they have (perfgate.render.ddp_cells). Imports no torch.
"""

from __future__ import annotations

from typing import Sequence

from perfgate.core.matrix import PRECISIONS, VARIANTS
from perfgate.core.record_reading import first_call_cache
from perfgate.render import ddp_cells
from perfgate.render.report import first_call, md_code, md_text, peaks_text, ratio_text, shown, status_text

COLUMNS = (
    "cell",
    "status",
    "wall speedup [95 % CI]",
    "device speedup",
    "eager ms",
    "compiled ms",
    "first call s",
    "warm s",
    "peak MiB eager → compiled",
    "graph breaks",
    "recompiles",
    "numerics",
    "cost s",
    "reason",
)


def _order(record: dict) -> tuple:
    variants, precisions = list(VARIANTS), list(PRECISIONS)
    return (
        record.get("model") or "",
        record.get("phase") or "",
        precisions.index(record["precision"]) if record.get("precision") in precisions else len(precisions),
        variants.index(record["variant"]) if record.get("variant") in variants else len(variants),
    )


def row(record: dict, with_batch: bool = False) -> tuple[str, ...]:
    device = record.get("device_speedup")
    batch = (shown(record, "batch"),) if with_batch else ()
    return (
        md_code(record["cell"]),
        *batch,
        md_text(status_text(record)),
        ratio_text(record),
        "–" if device is None else f"{device:.3f}×",
        shown(record, "eager_ms"),
        shown(record, "compiled_ms"),
        first_call(record.get("compile_s"), first_call_cache(record)),
        shown(record, "compile_warm_s"),
        peaks_text(record),
        shown(record, "graph_breaks"),
        shown(record, "recompiles"),
        md_text(record.get("numerics") or "–"),
        shown(record, "wall_s"),
        md_text(record.get("reason") or ""),
    )


def render_markdown(records: Sequence[dict]) -> str:
    """One table, cells ordered by model, phase, precision and the matrix's variant order."""
    if not records:
        return "No records.\n"
    # Records written before records carried a batch leave the column out rather than fill it with dashes.
    with_batch = any(r.get("batch") is not None for r in records)
    columns = (COLUMNS[0], "batch", *COLUMNS[1:]) if with_batch else COLUMNS
    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(row(r, with_batch)) + " |" for r in sorted(records, key=_order)]
    lines.append("")
    lines.append(
        "First call: the compiled step's first call (the compile), cold unless marked; warm: the same "
        "compile again with the caches warm. Cost: the cell's wall seconds in its process (an isolated "
        "cell adds its process start)." + (" Batch: samples per step." if with_batch else "") + " – where not measured."
    )
    ddp = ddp_cells.render_markdown(sorted(records, key=_order))
    return "\n".join(lines) + "\n" + ("\n" + ddp if ddp else "")
