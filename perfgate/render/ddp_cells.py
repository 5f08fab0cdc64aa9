"""The data-parallel cells of a results file as their own table (`perfgate report --cells` adds it after the
per-cell table): what only a ddp record has, the slowest rank's step, the scaling against one device, the
splits DDPOptimizer made, and where the step's time went (perfgate.measure.ddp_clocks). Imports no torch.
"""

from __future__ import annotations

from typing import Sequence

from perfgate.core.record_reading import first_call_cache
from perfgate.render.report import first_call, fmt, md_code, md_text, peaks_text, ratio_text, status_text

COLUMNS = (
    "cell",
    "status",
    "wall speedup [95 % CI]",
    "ms eager → compiled (slowest rank)",
    "one device ms eager → compiled",
    "scaling eager → compiled of the ideal (efficiency)",
    "compute speedup",
    "compute ms",
    "NCCL ms (exposed)",
    "GPU idle ms",
    "buckets / splits / wrapper breaks",
    "first call s",
    "peak MiB a rank",
    "numerics",
)
NOTE = (
    "Scaling: throughput on the ranks / on one device, against its ideal, the rank count; efficiency: scaling "
    "/ ranks. Compute: each rank's GPU work "
    "but NCCL's kernels, the ranks' mean; NCCL ms: the all-reduce's kernels, and in brackets the part with no "
    "compute beside it (not hidden by the backward, or waiting for the slower rank); GPU idle: the timed "
    "step less the GPU's busy time (the host issuing). Eager → compiled in each. – where not measured "
    "(no CUDA: the CPU tier's ranks)."
)


def _pair(record: dict, eager: str, compiled: str) -> str:
    e, c = record.get(eager), record.get(compiled)
    return "–" if e is None and c is None else f"{fmt(e, '.2f')} → {fmt(c, '.2f')}"


def _scaling(record: dict) -> str:
    """ "1.90 → 1.40 of 2 (95 % → 70 %)": scaling against the ideal of the record's world (its rank count)."""
    pair, world = _pair(record, "scaling_eager", "scaling_compiled"), record.get("world_size")
    if pair == "–" or not world:
        return pair
    shares = " → ".join(
        "–" if record.get(f"scaling_{side}") is None else f"{record[f'scaling_{side}'] / world:.0%}".replace("%", " %")
        for side in ("eager", "compiled")
    )
    return f"{pair} of {world} ({shares})"


def _comm(record: dict) -> str:
    if record.get("eager_comm_ms") is None:
        return "–"
    return " → ".join(
        f"{fmt(record[f'{side}_comm_ms'], '.2f')} ({fmt(record[f'{side}_comm_exposed_ms'], '.2f')})"
        for side in ("eager", "compiled")
    )


def _numerics(record: dict) -> str:
    ranks = record.get("ranks_param_diff")
    agree = "" if ranks is None else (", ranks identical" if ranks == 0 else f", ranks differ by {ranks:.3g}")
    return md_text((record.get("numerics") or "–") + agree)


def row(record: dict) -> tuple[str, ...]:
    structure = " / ".join(fmt(record.get(k), "d") for k in ("ddp_buckets", "ddp_splits", "ddp_wrapper_breaks"))
    return (
        md_code(record["cell"]),
        md_text(status_text(record)),
        ratio_text(record),
        _pair(record, "eager_ms", "compiled_ms"),
        _pair(record, "single_eager_ms", "single_compiled_ms"),
        _scaling(record),
        ratio_text(record, "compute_speedup"),
        _pair(record, "eager_compute_ms", "compiled_compute_ms"),
        _comm(record),
        _pair(record, "eager_gpu_idle_ms", "compiled_gpu_idle_ms"),
        structure,
        first_call(record.get("compile_s"), first_call_cache(record)),
        peaks_text(record),
        _numerics(record),
    )


def render_markdown(records: Sequence[dict]) -> str:
    """The table of the ddp-phase records (empty text where there are none), in the order given."""
    ddp = [r for r in records if r.get("phase") == "ddp"]
    if not ddp:
        return ""
    lines = ["### Data-parallel cells", "", "| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(row(r)) + " |" for r in ddp]
    return "\n".join(lines + ["", NOTE, ""])
