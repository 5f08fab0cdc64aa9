"""The compile-modes view: per model and precision, eager and each compile variant side by side, as the
seed article on compile modes tabulates them (first call, its memory, train and inference step times,
speedups). Built from any results file; imports no torch.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from typing import Sequence

from perfgate.core.matrix import PRECISIONS, VARIANTS
from perfgate.core.record_reading import first_call_cache
from perfgate.render.report import first_call, fmt, md_code, md_text, status_text

COLUMNS = (
    "mode",
    "first call s",
    "first call MiB",
    "train ms",
    "train speedup (device)",
    "infer ms",
    "infer speedup (device)",
    "status",
)


@dataclass(frozen=True)
class ModeRow:
    """One line of a modes table: eager, or one compile variant over both phases."""

    mode: str
    first_call_s: float | None  # the compile: first call of the compiled step, seconds (eager: none)
    first_call_mb: float | None  # peak MiB during that call (eager: its own step's peak)
    first_call_cache: str | None  # what that call found in the inductor cache (record_reading.first_call_cache)
    train_ms: float | None
    train_speedup: float | None
    train_device_speedup: float | None
    infer_ms: float | None
    infer_speedup: float | None
    infer_device_speedup: float | None
    status: str  # "ok", or each failed phase with its reason


def _ok(record: dict | None) -> bool:
    return record is not None and record.get("status") == "ok"


def _median(values) -> float | None:
    values = [v for v in values if v]
    return statistics.median(values) if values else None


def _eager_row(records: Sequence[dict]) -> ModeRow:
    """Eager's step times: the median over every ok cell's eager side (each cell measured eager anew). Its
    peak is the train step's where one ran, as the variants' first call is (a train step holds gradients and
    optimizer state: medians over both phases would flip between them as cells are added)."""
    by_phase = {phase: [r for r in records if r["phase"] == phase and _ok(r)] for phase in ("train", "infer")}
    peak = _median(r.get("peak_mem_eager_mb") for r in by_phase["train"] or by_phase["infer"])
    measured = any(by_phase.values())
    return ModeRow(
        "eager",
        None,
        peak,
        None,
        _median(r.get("eager_ms") for r in by_phase["train"]),
        None,
        None,
        _median(r.get("eager_ms") for r in by_phase["infer"]),
        None,
        None,
        "ok" if measured else "no cell finished",
    )


def _variant_row(variant: str, train: dict | None, infer: dict | None) -> ModeRow:
    first = train if _ok(train) else infer if _ok(infer) else None
    problems = [
        f"{r['phase']} {status_text(r)}: {r.get('reason') or 'no reason given'}"
        for r in (train, infer)
        if r and not _ok(r)
    ]
    problems += [f"{phase} not run" for phase, r in (("train", train), ("infer", infer)) if r is None]

    def get(record, name):
        return record.get(name) if _ok(record) else None

    return ModeRow(
        variant,
        get(first, "compile_s"),
        get(first, "peak_mem_compile_mb"),
        first_call_cache(first) if first else None,
        get(train, "compiled_ms"),
        get(train, "speedup"),
        get(train, "device_speedup"),
        get(infer, "compiled_ms"),
        get(infer, "speedup"),
        get(infer, "device_speedup"),
        "; ".join(problems) or "ok",
    )


def _variant_order(name: str) -> tuple:
    names = list(VARIANTS)
    return (names.index(name) if name in names else len(names), name)


def modes_tables(records: Sequence[dict]) -> dict[tuple[str, str], list[ModeRow]]:
    """{(model, precision): [eager row, one row per variant in the matrix's order]} over the records (one per
    cell: perfgate.core.records_file.load_records). Records of several machines are merged as they come: say so."""
    groups: dict[tuple[str, str], dict[tuple[str, str], dict]] = {}
    for record in records:
        key = (record.get("model") or "?", record.get("precision") or "?")
        groups.setdefault(key, {})[(record.get("variant") or "?", record.get("phase") or "?")] = record
    tables = {}
    order = {p: i for i, p in enumerate(PRECISIONS)}
    for key in sorted(groups, key=lambda k: (k[0], order.get(k[1], len(order)), k[1])):
        cells = groups[key]
        variants = sorted({variant for variant, _ in cells}, key=_variant_order)
        tables[key] = [_eager_row(list(cells.values()))] + [
            _variant_row(v, cells.get((v, "train")), cells.get((v, "infer"))) for v in variants
        ]
    return tables


def _speedup(wall: float | None, device: float | None) -> str:
    if wall is None:
        return "–"
    return f"{wall:.2f}×" + (f" ({device:.2f}×)" if device else "")


def render_markdown(records: Sequence[dict]) -> str:
    """One Markdown table per model and precision; speedups are eager / compiled step time (wall, and the
    device clock's in brackets where it was measured)."""
    tables = modes_tables(records)
    if not tables:
        return "No records.\n"
    lines = []
    for (model, precision), rows in tables.items():
        lines += [
            f"### {md_text(model)}, {md_text(precision)}",
            "",
            "| " + " | ".join(COLUMNS) + " |",
            "|" + "---|" * len(COLUMNS),
        ]
        for row in rows:
            cells = (
                md_code(row.mode),
                first_call(row.first_call_s, row.first_call_cache),
                fmt(row.first_call_mb, ".0f"),
                fmt(row.train_ms, ".2f"),
                _speedup(row.train_speedup, row.train_device_speedup),
                fmt(row.infer_ms, ".2f"),
                _speedup(row.infer_speedup, row.infer_device_speedup),
                md_text(row.status),
            )
            lines.append("| " + " | ".join(cells) + " |")
        lines.append("")
    lines.append(
        "First call: the compiled step's first call (the compile), seconds, and the peak memory during "
        "it (the train step's where it ran; eager: its own step's peak); cold unless marked (\"warm\": "
        'the compile came from a kept cache; "kept cache": a kept inductor cache, in a record too old '
        "to say whether it was warm). Eager's step times are the median over every cell's own eager "
        "side. – where not measured."
    )
    return "\n".join(lines) + "\n"
