"""A factory of realistic synthetic result records for the data side's tests.

Each record's rounds are drawn from a seeded numpy rng: eager and compiled ms per step with ~2 % noise per
round, plus a per-run offset on the compiled side (a different compile per process moves the compiled step;
eager stays put, as seen on an H100). Speedup, lo and hi come from perfgate.stats.bootstrap_median over the
per-round ratios, so the tests exercise the real statistics.
"""

from __future__ import annotations

import statistics

import numpy as np

from perfgate.matrix import Cell
from perfgate.record import append_record, new_record
from perfgate.stats import bootstrap_median

H100 = "nvidia-h100-80gb-hbm3_torch2.11_cuda13"
A100 = "nvidia-a100-sxm4-80gb_torch2.11_cuda12"

MODELS = ("resnet50", "vit_b16", "gpt2", "bert_base", "segformer_b2")
# (eager ms per step, true speedup) per model; compiled ms = eager / speedup.
PROFILE = {"resnet50": (59.6, 2.3), "vit_b16": (41.0, 1.45), "gpt2": (33.0, 1.6), "bert_base": (21.0, 1.3),
           "segformer_b2": (48.0, 1.05)}


def env(fingerprint: str = H100, gpu: str | None = "NVIDIA H100 80GB HBM3") -> dict:
    return {"fingerprint": fingerprint, "gpu": gpu, "driver": "580.65", "cuda": "13.0",
            "torch": "2.11.0+cu130", "triton": "3.5.0", "transformers": "5.17.0", "timm": "1.0.20",
            "python": "3.11.9", "host": "runner-1", "tf32": False}


def cells(models=MODELS, phases=("train", "infer"), tier: str = "pr") -> list[Cell]:
    """The PR slice: every model x phase, inductor_default, amp_bf16 (10 cells for the default models)."""
    return [Cell(m, p, "inductor_default", "amp_bf16", "gpu", tier) for m in models for p in phases]


def record(cell: Cell, *, rng: np.random.Generator, speedup: float | None = None, eager_ms: float | None = None,
           noise: float = 0.02, run_noise: float = 0.01, rounds: int = 15, environment: dict | None = None,
           **fields) -> dict:
    """An ok record for `cell`; keyword `fields` override anything afterwards (graph_breaks=1, ...)."""
    base_eager, base_speedup = PROFILE.get(cell.model, (30.0, 1.5))
    eager_ms = eager_ms or base_eager * (1.0 if cell.phase == "train" else 0.35)
    speedup = speedup or base_speedup
    # This process's compile: its compiled step is off by a run-level factor (run_noise, relative sd).
    compiled_ms = eager_ms / speedup * float(np.exp(rng.normal(0.0, run_noise)))
    eager = eager_ms * np.exp(rng.normal(0.0, noise, rounds))
    compiled = compiled_ms * np.exp(rng.normal(0.0, noise, rounds))
    interval = bootstrap_median(eager / compiled, resamples=1000)
    rec = new_record(cell, environment or env())
    rec.update(
        status="ok", reason="", started_at="2026-01-02T03:04:05Z", wall_s=80.0, steps_per_round=8,
        rounds=rounds, warmup_steps=20, eager_round_ms=eager.tolist(), compiled_round_ms=compiled.tolist(),
        eager_ms=float(statistics.median(eager)), compiled_ms=float(statistics.median(compiled)),
        speedup=interval.median, speedup_lo=interval.lo, speedup_hi=interval.hi,
        compile_s=40.0, compile_warm_s=6.0, compile_cache="fresh", graph_count=1, graph_breaks=0,
        recompiles=0, break_reasons=[], peak_mem_eager_mb=9000.0, peak_mem_compiled_mb=7000.0,
        numerics="pass", numerics_detail={"reference": "fp64", "worst": "loss", "checks": []},
    )
    rec.update(fields)
    return rec


def failed(cell: Cell, reason: str = "CUDA out of memory", status: str = "failed",
           environment: dict | None = None) -> dict:
    rec = new_record(cell, environment or env())
    rec.update(status=status, reason=reason)
    return rec


def run(seed: int, *, cell_list: list[Cell] | None = None, overrides: dict | None = None, **kwargs) -> list[dict]:
    """One independent run: a record per cell. `overrides` maps cell id -> record() keywords, or -> a
    ready record (e.g. failed(...))."""
    rng = np.random.default_rng(seed)
    overrides = overrides or {}
    out = []
    for cell in cell_list or cells():
        extra = overrides.get(cell.id, {})
        out.append(extra if "cell" in extra else record(cell, rng=rng, **{**kwargs, **extra}))
    return out


def runs(n: int, first_seed: int = 1000, **kwargs) -> list[list[dict]]:
    return [run(first_seed + i, **kwargs) for i in range(n)]


def write_run(path, records) -> str:
    for rec in records:
        append_record(path, rec)
    return str(path)
