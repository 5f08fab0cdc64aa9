"""A factory of realistic synthetic result records for the data side's tests.

Each record's rounds are drawn from a seeded numpy rng: eager and compiled ms per step with ~2 % noise per
round, plus a per-run offset on the compiled side (a different compile per process moves the compiled step;
eager stays put, as seen on an H100). Speedup, lo and hi come from perfgate.core.stats.bootstrap_median over the
per-round ratios, so the tests exercise the real statistics.

The device and host clocks (record schema 3) are drawn the same way from a child rng (rng.spawn), so the
wall numbers of a seed are what they were before the clocks existed: GPU-busy ms with 0.3 % noise per round
and 0.2 % per compile (GPU work barely moves), host ms to issue a step with 3 % per round and 1 % per run.
Each clock's true value comes from the model's profile, not from the wall speedup asked for, so a planted
wall loss leaves the device and host clocks alone (and the reverse): each test trips the rule it means to.
"""

from __future__ import annotations

import statistics

import numpy as np

from perfgate.core.matrix import Cell
from perfgate.core.record import bound_of, new_record
from perfgate.core.records_file import append_record
from perfgate.core.stats import bootstrap_median

H100 = "nvidia-h100-80gb-hbm3_torch2.11_cuda13"
A100 = "nvidia-a100-sxm4-80gb_torch2.11_cuda12"

MODELS = ("resnet50", "vit_b16", "gpt2", "bert_base", "segformer_b2")
# (eager ms per step, true speedup) per model; compiled ms = eager / speedup.
PROFILE = {
    "resnet50": (59.6, 2.3),
    "vit_b16": (41.0, 1.45),
    "gpt2": (33.0, 1.6),
    "bert_base": (21.0, 1.3),
    "segformer_b2": (48.0, 1.05),
}
# GPU-busy fraction of the compiled step (device ms / wall ms) per model: resnet50 as measured on an H100
# lease (61 %), the others spread over host- and device-bound. Eager steps are device-bound (97 %).
BUSY = {"resnet50": 0.61, "vit_b16": 0.71, "gpt2": 0.80, "bert_base": 0.93, "segformer_b2": 0.97}
EAGER_BUSY = 0.97
# Host ms to issue one step, as a fraction of the step's wall ms: eager issues well ahead of its device-bound
# kernels; a host-bound compiled step spends nearly its whole wall time issuing.
EAGER_HOST, HOST_BOUND_HOST, DEVICE_BOUND_HOST = 0.45, 0.95, 0.6
XEON = "Intel(R) Xeon(R) Platinum 8480+"
EPYC = "AMD EPYC 9654 96-Core Processor"


def env(fingerprint: str = H100, gpu: str | None = "NVIDIA H100 80GB HBM3", cpu_model: str | None = XEON) -> dict:
    return {
        "fingerprint": fingerprint,
        "gpu": gpu,
        "driver": "580.65",
        "cuda": "13.0",
        "torch": "2.11.0+cu130",
        "triton": "3.5.0",
        "transformers": "5.17.0",
        "timm": "1.0.20",
        "python": "3.11.9",
        "host": "runner-1",
        "tf32": False,
        "cpu_model": cpu_model,
        "cpu_cores": 16,
    }


def med(values) -> float:
    return float(statistics.median(values))


def _ratio_clock(
    rng: np.random.Generator, eager_ms: float, compiled_ms: float, noise: float, run_noise: float, rounds: int
):
    """(eager rounds, compiled rounds, interval of their per-round ratio) for one clock of one run."""
    compiled_ms *= float(np.exp(rng.normal(0.0, run_noise)))
    eager = eager_ms * np.exp(rng.normal(0.0, noise, rounds))
    compiled = compiled_ms * np.exp(rng.normal(0.0, noise, rounds))
    # 300 resamples: the interval's ends settle to ~1 % of its width, plenty here, and a third of the cost.
    return eager, compiled, bootstrap_median(eager / compiled, resamples=300)


HOST_PROBE_MS = 1.7  # ms of the host probe's work on a 2026 server core


def clocks(
    cell: Cell,
    rng: np.random.Generator,
    wall_eager_ms: float,
    wall_compiled_ms: float,
    *,
    device_speedup: float | None = None,
    host_growth: float = 1.0,
    device_noise: float = 0.003,
    device_run_noise: float = 0.002,
    host_noise: float = 0.03,
    host_run_noise: float = 0.01,
    rounds: int = 15,
) -> dict:
    """The device and host fields of a record. `device_speedup`: the true device ratio (default from the
    profile); `host_growth`: compiled host ms relative to eager's, times this (1.2 = 20 % more)."""
    profile_eager, profile_speedup = PROFILE.get(cell.model, (30.0, 1.5))
    busy = BUSY.get(cell.model, 0.9)
    eager_ms = profile_eager * (1.0 if cell.phase == "train" else 0.35)
    device_speedup = device_speedup or profile_speedup * EAGER_BUSY / busy
    eager_dev, compiled_dev, dev = _ratio_clock(
        rng, eager_ms * EAGER_BUSY, eager_ms * EAGER_BUSY / device_speedup, device_noise, device_run_noise, rounds
    )
    issue = HOST_BOUND_HOST if bound_of(busy) == "host" else DEVICE_BOUND_HOST
    eager_host, compiled_host, host = _ratio_clock(
        rng, eager_ms * EAGER_HOST, eager_ms / profile_speedup * issue * host_growth, host_noise, host_run_noise, rounds
    )
    busy_eager = min(med(eager_dev) / wall_eager_ms, 1.0)
    busy_compiled = min(med(compiled_dev) / wall_compiled_ms, 1.0)
    return dict(
        eager_device_round_ms=eager_dev.tolist(),
        compiled_device_round_ms=compiled_dev.tolist(),
        eager_device_ms=med(eager_dev),
        compiled_device_ms=med(compiled_dev),
        device_speedup=dev.median,
        device_speedup_lo=dev.lo,
        device_speedup_hi=dev.hi,
        eager_host_round_ms=eager_host.tolist(),
        compiled_host_round_ms=compiled_host.tolist(),
        eager_host_ms=med(eager_host),
        compiled_host_ms=med(compiled_host),
        host_speedup=host.median,
        host_speedup_lo=host.lo,
        host_speedup_hi=host.hi,
        busy_eager=busy_eager,
        busy_compiled=busy_compiled,
        bound_eager=bound_of(busy_eager),
        bound=bound_of(busy_compiled),
        clocks_note="",
        host_probe_ms=HOST_PROBE_MS,  # a steady host: its probe's ms (perfgate.measure.host_speed)
        host_probe_cpu_ms=HOST_PROBE_MS,
    )


def cells(models=MODELS, phases=("train", "infer"), tier: str = "pr") -> list[Cell]:
    """The PR slice: every model x phase, inductor_default, amp_bf16 (10 cells for the default models)."""
    return [Cell(m, p, "inductor_default", "amp_bf16", "gpu", tier) for m in models for p in phases]


CLOCK_KEYWORDS = ("device_speedup", "host_growth", "device_noise", "device_run_noise", "host_noise", "host_run_noise")


def record(
    cell: Cell,
    *,
    rng: np.random.Generator,
    speedup: float | None = None,
    eager_ms: float | None = None,
    noise: float = 0.02,
    run_noise: float = 0.01,
    rounds: int = 15,
    environment: dict | None = None,
    with_clocks: bool = True,
    **fields,
) -> dict:
    """An ok record for `cell`; CLOCK_KEYWORDS go to `clocks`, other keyword `fields` override anything
    afterwards (graph_breaks=1, ...; busy_compiled=0.95 sets `bound` to match unless bound is given).
    with_clocks=False leaves the device and host fields null (half the cost: for wall-only tallies)."""
    clock_kwargs = {k: fields.pop(k) for k in CLOCK_KEYWORDS if k in fields}
    clock_rng = rng.spawn(1)[0]  # spawning draws nothing from rng: a seed's wall numbers stay as they were
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
        status="ok",
        reason="",
        started_at="2026-01-02T03:04:05Z",
        wall_s=80.0,
        steps_per_round=8,
        rounds=rounds,
        warmup_steps=20,
        eager_round_ms=eager.tolist(),
        compiled_round_ms=compiled.tolist(),
        eager_ms=float(statistics.median(eager)),
        compiled_ms=float(statistics.median(compiled)),
        speedup=interval.median,
        speedup_lo=interval.lo,
        speedup_hi=interval.hi,
        compile_s=40.0,
        compile_warm_s=6.0,
        compile_cache="fresh",
        graph_count=1,
        graph_breaks=0,
        recompiles=0,
        break_reasons=[],
        peak_mem_eager_mb=9000.0,
        peak_mem_compiled_mb=7000.0,
        numerics="pass",
        numerics_detail={"reference": "fp64", "worst": "loss", "checks": []},
    )
    if with_clocks:
        rec.update(clocks(cell, clock_rng, rec["eager_ms"], rec["compiled_ms"], rounds=rounds, **clock_kwargs))
    rec.update(fields)
    if "busy_compiled" in fields and "bound" not in fields:
        rec["bound"] = bound_of(rec["busy_compiled"])
    return rec


DEVICE_FIELDS = (
    "eager_device_ms",
    "compiled_device_ms",
    "device_speedup",
    "device_speedup_lo",
    "device_speedup_hi",
    "busy_eager",
    "busy_compiled",
    "bound_eager",
    "bound",
)


def without_device(rec: dict, note: str = "no CUDA device: no device clock") -> dict:
    """`rec` as the measuring side writes it when the device clock is lost (a profiler error) or absent
    (the CPU tier): device and busy fields null, the rounds empty, clocks_note saying why."""
    return {
        **rec,
        **dict.fromkeys(DEVICE_FIELDS),
        "eager_device_round_ms": [],
        "compiled_device_round_ms": [],
        "clocks_note": note,
    }


CLOCK_FIELDS = DEVICE_FIELDS + (
    "eager_device_round_ms",
    "compiled_device_round_ms",
    "eager_host_ms",
    "compiled_host_ms",
    "eager_host_round_ms",
    "compiled_host_round_ms",
    "host_speedup",
    "host_speedup_lo",
    "host_speedup_hi",
    "clocks_note",
)


def before_clocks(rec: dict) -> dict:
    """`rec` as a schema-2 record (before the device and host clocks): none of their fields."""
    return {k: v for k, v in rec.items() if k not in CLOCK_FIELDS} | {"schema": 2}


def failed(
    cell: Cell, reason: str = "CUDA out of memory", status: str = "failed", environment: dict | None = None
) -> dict:
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
