"""The HTML report's bar charts of one environment's records: speedup per phase with its interval, compile time
(the same compile again inside) and peak memory compiled / eager, drawn as inline SVG by perfgate.render.charts;
and the record figures the page's table shares with them. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from perfgate.core.matrix import PHASES
from perfgate.core.record_reading import first_call_cache
from perfgate.render.charts import Bar, bar_chart
from perfgate.render.report import shown
from perfgate.render.trends import ratio_text

PHASE_ORDER = PHASES  # train, infer, ddp: the table's order and one geomean line each


@dataclass(frozen=True)
class Chart:
    title: str
    svg: str
    note: str = ""


# ---------------------------------------------------------------------------------------------- formatting


def mem_ratio(record: dict) -> float | None:
    """Peak memory compiled / eager (warm steps, MiB / MiB); None where either is unknown (CPU)."""
    eager, compiled = record.get("peak_mem_eager_mb"), record.get("peak_mem_compiled_mb")
    return compiled / eager if eager and compiled is not None else None


def speedup_text(record: dict) -> str:
    return ratio_text(record)


def _label(record: dict) -> str:
    return f"{record.get('model')} · {record.get('variant')} · {record.get('precision')}"


def cell_order(record: dict) -> tuple:
    """The charts' and the table's order: phase (PHASE_ORDER), model, variant, precision."""
    phase = record.get("phase")
    return (
        PHASE_ORDER.index(phase) if phase in PHASE_ORDER else 9,
        str(record.get("model")),
        str(record.get("variant")),
        str(record.get("precision")),
        record["cell"],
    )


def ok_with(records: Sequence[dict], name: str) -> list[dict]:
    """The ok records that have the figure `name`."""
    return [r for r in records if r.get("status") == "ok" and r.get(name) is not None]


# ---------------------------------------------------------------------------------------------- charts


def speedup_charts(records: Sequence[dict], verdicts: dict[str, str]) -> list[Chart]:
    charts = []
    for phase in sorted({r.get("phase") for r in records}, key=lambda p: cell_order({"phase": p, "cell": ""})):
        rows = sorted((r for r in ok_with(records, "speedup") if r.get("phase") == phase), key=cell_order)
        bars = [
            Bar(
                _label(r),
                r["speedup"],
                speedup_text(r),
                r["cell"],
                r.get("speedup_lo"),
                r.get("speedup_hi"),
                css=f"verdict-{verdicts[r['cell']]}" if r["cell"] in verdicts else "",
                group=r.get("model"),
                tooltip=f"{r['cell']}: {speedup_text(r)}, eager {shown(r, 'eager_ms')} ms, "
                f"compiled {shown(r, 'compiled_ms')} ms per step",
            )
            for r in rows
        ]
        if bars:
            charts.append(
                Chart(
                    f"Speedup, {phase} (eager ms / compiled ms per step; bar: median over rounds, "
                    f"whisker: 95 % interval)",
                    bar_chart(bars, label=f"speedup {phase}", unit="×", ref=1.0, ref_label="1× = no gain"),
                )
            )
    return charts


# The same compile again, beside the cold one: in this process with warm caches, and in a fresh process
# handed the cell's saved cache artifacts (--perf-warm-compile artifacts).
_COMPILED_AGAIN = (("compile_warm_s", "warm"), ("compile_artifacts_s", "from artifacts"))


def _compile_text(record: dict) -> str:
    text = f"{record['compile_s']:.1f} s"
    again = [f"{label} {record[key]:.1f} s" for key, label in _COMPILED_AGAIN if record.get(key) is not None]
    if again:
        text += f" ({', '.join(again)})"
    state = first_call_cache(record)
    return text + (f" · {state}" if state not in ("cold", "no cache") else "")


def compile_chart(records: Sequence[dict]) -> list[Chart]:
    rows = sorted(ok_with(records, "compile_s"), key=cell_order)
    bars = [
        Bar(
            f"{_label(r)} · {r.get('phase')}",
            r["compile_s"],
            _compile_text(r),
            r["cell"],
            secondary=r.get("compile_warm_s"),
            group=r.get("model"),
            tooltip=f"{r['cell']}: first compiled call {r['compile_s']:.1f} s, {first_call_cache(r)}",
        )
        for r in rows
    ]
    note = (
        "Bar: the first compiled call, cold with a fresh inductor cache; inner bar: the same compile again "
        'with the caches warm. "from artifacts": the same compile in a fresh process with empty caches, '
        'handed the cell\'s torch.compiler.save_cache_artifacts(). "kept cache": compiled from a cache '
        "kept between runs (--perf-cache-dir), so that first call may be warm too."
    )
    if not bars:
        return []
    return [Chart("Compile time (seconds)", bar_chart(bars, label="compile seconds", unit=" s"), note)]


def memory_chart(records: Sequence[dict]) -> list[Chart]:
    rows = sorted((r for r in records if r.get("status") == "ok" and mem_ratio(r) is not None), key=cell_order)
    bars = [
        Bar(
            f"{_label(r)} · {r.get('phase')}",
            ratio,
            f"{ratio:.2f} ({r['peak_mem_compiled_mb']:.0f} / {r['peak_mem_eager_mb']:.0f} MiB)",
            r["cell"],
            group=r.get("model"),
        )
        for r in rows
        if (ratio := mem_ratio(r)) is not None  # every row's is (above): the filter names the type
    ]
    if not bars:
        return []
    return [
        Chart(
            "Peak memory, compiled / eager (warm steps, CUDA-graph pools counted)",
            bar_chart(bars, label="memory ratio", ref=1.0, ref_label="1 = as eager"),
            "Below 1: the compiled step needs less memory than eager.",
        )
    ]
