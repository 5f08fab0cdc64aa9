"""Records in the formats other tools read (`perfgate export`): CSV, PyTorch's benchmark database "v3" JSON (what
HUD's dashboards read), pytest-benchmark's JSON (its `compare` reads it) and OpenMetrics text (Prometheus). Imports
no torch.

What goes out, and why:
- CSV: every record, failed and skipped ones too (a row says its status and reason), every scalar field of
  perfgate.core.record.FIELDS in table order plus the environment's keys (ENV_KEYS) as `env_<key>`.
- The three dashboard formats: only the records whose figures stand (status ok, not unfit): a failed cell's
  partial figures, or a timing perfgate itself refuses, would read as results on a dashboard. Their figures are
  the record's own (medians, the speedup's interval), never re-estimated here: a dashboard then shows the
  number the gate judged.
- One record per run and cell (`latest`): a gate's confirm round replaces the run's first measurement, as every
  other reader does (perfgate.core.records_file.load_records), while every run's record is kept.
"""

from __future__ import annotations

import csv
import io
import json
import math
import re
from datetime import datetime, timezone
from typing import Iterable

from perfgate.core.clocks import CLOCKS
from perfgate.core.record import FIELDS, RECORD_SCHEMA
from perfgate.core.record_reading import unfinished

FORMATS = ("csv", "v3", "pytest-benchmark", "openmetrics")
SUFFIX = {"csv": ".csv", "v3": ".json", "pytest-benchmark": ".json", "openmetrics": ".txt"}
# The environment's keys a dashboard filters on (perfgate.measure.env.environment), in this order.
ENV_KEYS: tuple[str, ...] = ("fingerprint", "gpu", "gpu_count", "driver", "cuda", "torch", "triton", "transformers")
ENV_KEYS += ("timm", "python", "cpu_model", "cpu_cores", "host", "cupti_teardown")  # the last: how CUPTI was left
SCALARS = tuple(f for f in FIELDS if f.type in (str, int, float))
# Units that say how a cell was run, not what it measured: they go with the benchmark's description, not as metrics.
SETUP_UNITS = ("steps", "rounds", "samples", "ranks")
METRICS = tuple(f for f in SCALARS if f.type in (int, float) and f.unit and f.unit not in SETUP_UNITS)
METRICS = tuple(f for f in METRICS if not f.name.endswith(("_lo", "_hi")))  # an interval goes with its ratio
# The clocks' step times, in OpenMetrics' base unit (seconds), per side.
SIDES = ("eager", "compiled")
STEP_FIELDS = tuple((clock.name, side, getattr(clock, f"{side}_ms")) for clock in CLOCKS for side in SIDES)


def latest(records: Iterable[dict]) -> list[dict]:
    """One record per (run, tier, cell): the later replaces the earlier, except that a cut-off checkpoint never
    hides a finished record. First-seen order."""
    kept: dict[tuple, dict] = {}
    for record in records:
        key = (record.get("run_id"), record.get("tier"), record["cell"])
        if key not in kept or unfinished(kept[key]) or not unfinished(record):
            kept[key] = record
    return list(kept.values())


def standing(records: Iterable[dict]) -> list[dict]:
    """The records whose figures a dashboard may show: ok and fit to be trusted."""
    return [r for r in records if r.get("status") == "ok" and not r.get("unfit")]


def render(records: list[dict], fmt: str) -> str:
    """The records as one file's text in `fmt` (one of FORMATS)."""
    return {"csv": to_csv, "v3": to_v3, "pytest-benchmark": to_pytest_benchmark, "openmetrics": to_openmetrics}[fmt](
        records
    )


def _env(record: dict) -> dict:
    return record.get("env") or {}


def to_csv(records: list[dict]) -> str:
    """One row per record; a null is an empty cell. RFC 4180 (csv's default dialect, CRLF line ends)."""
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow([f.name for f in SCALARS] + [f"env_{key}" for key in ENV_KEYS])
    for record in records:
        row = [record.get(f.name) for f in SCALARS] + [_env(record).get(key) for key in ENV_KEYS]
        writer.writerow(["" if value is None else value for value in row])
    return out.getvalue()


def _mode(phase: str) -> str:
    return "inference" if phase == "infer" else "training"  # a data-parallel cell times training steps


def to_v3(records: list[dict]) -> str:
    """PyTorch's benchmark database format (the oss_ci_benchmark_v3 table, github.com/pytorch/pytorch/wiki/
    PyTorch-OSS-benchmark-infra): a JSON list with one entry per (record, metric). The required fields are
    benchmark.name, model.name, metric.name and metric.benchmark_values; the rest is optional context."""
    entries = []
    for record in standing(records):
        env = _env(record)
        benchmark = {
            "name": "perfgate",
            "mode": _mode(record["phase"]),
            "dtype": record["precision"],
            "extra_info": {
                key: record.get(key)
                for key in ("cell", "variant", "tier", "run_id", "started_at", "schema", "process", "remeasure")
            }
            | {f.name: record.get(f.name) for f in SCALARS if f.unit in SETUP_UNITS}
            | {"versions": {key: env.get(key) for key in ("torch", "triton", "transformers", "timm", "cuda")}},
        }
        model = {"name": record["model"], "type": record["phase"], "backend": record["variant"]}
        model["origins"] = ["perfgate"]
        runner = {
            "name": env.get("host"),
            "type": env.get("gpu") or env.get("cpu_model") or "cpu",
            "gpu_info": env.get("gpu"),
            "gpu_count": env.get("gpu_count"),
            "cpu_info": env.get("cpu_model"),
            "cpu_count": env.get("cpu_cores"),
            "extra_info": {"fingerprint": env.get("fingerprint"), "driver": env.get("driver")},
        }
        for field in METRICS:
            value = record.get(field.name)
            if value is None:
                continue
            extra: dict[str, object] = {"unit": field.unit}
            if f"{field.name}_lo" in record:  # a clock's ratio: its 95 % interval
                extra |= {"lo": record.get(f"{field.name}_lo"), "hi": record.get(f"{field.name}_hi")}
            metric = {"name": field.name, "benchmark_values": [value], "extra_info": extra}
            entries.append({"benchmark": benchmark, "model": model, "metric": metric, "runners": [runner]})
    return json.dumps(entries) + "\n"  # compact: each metric repeats its benchmark and runner


def _stats(ms_rounds: list[float]) -> dict:
    """pytest-benchmark's stats of one side's rounds (seconds per step), computed by its own Stats class, so the
    outliers and IQR its table shows are defined as it defines them."""
    from pytest_benchmark.stats import Stats

    stats = Stats()
    for ms in ms_rounds:
        stats.update(ms / 1e3)
    return stats.as_dict() | {"data": list(stats.data), "iterations": 1}


def to_pytest_benchmark(records: list[dict]) -> str:
    """pytest-benchmark's JSON (what --benchmark-json writes): per record two benchmarks, eager and compiled, each
    the wall clock's rounds in seconds per step, grouped by cell; the speedup and its interval in extra_info.
    machine_info is the first record's environment: pytest-benchmark compares files of one machine."""
    from pytest_benchmark import __version__

    benchmarks = []
    for record in standing(records):
        extra = {key: record.get(key) for key in ("speedup", "speedup_lo", "speedup_hi", "device_speedup", "run_id")}
        for side in ("eager", "compiled"):
            rounds = record.get(f"{side}_round_ms") or []
            if not rounds:
                continue
            benchmarks.append(
                {
                    "group": record["cell"],
                    "name": f"{record['cell']}[{side}]",
                    "fullname": f"perfgate::{record['cell']}[{side}]",
                    "params": {"side": side},
                    "param": side,
                    "extra_info": extra | {"steps_per_round": record.get("steps_per_round")},
                    "options": {"timer": "perfgate wall clock", "rounds": len(rounds)},
                    "stats": _stats(rounds),
                }
            )
    env = _env(next(iter(standing(records)), {}))
    document = {
        "machine_info": {"perfgate": env},
        "commit_info": {},
        "benchmarks": benchmarks,
        "datetime": datetime.now(timezone.utc).isoformat(),
        "version": __version__,
    }
    return json.dumps(document, indent=1) + "\n"


def _label(value) -> str:
    """An OpenMetrics label value: backslash, double quote and newline escaped."""
    return str("" if value is None else value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _number(value: float) -> str:
    return repr(float(value)) if math.isfinite(value) else ("NaN" if math.isnan(value) else "+Inf")


# OpenMetrics families: (name, unit, help). Names carry their unit as the spec asks (a `# UNIT` must be a suffix).
FAMILIES = (
    ("perfgate_step_seconds", "seconds", "median seconds per step of one side, by clock (wall, device, host, compute)"),
    ("perfgate_speedup_ratio", "ratio", "eager / compiled, by clock; estimate: median and its 95 % interval (lo, hi)"),
    ("perfgate_compile_seconds", "seconds", "first compiled call (cold) and the same compile with warm caches"),
    ("perfgate_peak_memory_bytes", "bytes", "peak device memory of warm steps, by side"),
    ("perfgate_graph_breaks", "", "graph breaks of the compiled step"),
    ("perfgate_recompiles", "", "recompiles during the timed steps"),
    ("perfgate_record_schema", "", f"the record schema a cell was written with (this perfgate writes {RECORD_SCHEMA})"),
)


def _samples(record: dict):
    """(family, extra labels, value) of one record, nulls left out."""
    for clock_name, side, field in STEP_FIELDS:
        if record.get(field) is not None:
            yield "perfgate_step_seconds", {"clock": clock_name, "side": side}, record[field] / 1e3
    for clock in CLOCKS:
        for estimate, suffix in (("median", ""), ("lo", "_lo"), ("hi", "_hi")):
            if record.get(clock.ratio + suffix) is not None:
                labels = {"clock": clock.name, "estimate": estimate}
                yield "perfgate_speedup_ratio", labels, record[clock.ratio + suffix]
    for kind, field in (("cold", "compile_s"), ("warm", "compile_warm_s")):
        if record.get(field) is not None:
            yield "perfgate_compile_seconds", {"cache": kind}, record[field]
    for side in ("eager", "compiled"):
        if record.get(f"peak_mem_{side}_mb") is not None:
            yield "perfgate_peak_memory_bytes", {"side": side}, record[f"peak_mem_{side}_mb"] * 2**20
    for name in ("graph_breaks", "recompiles"):
        if record.get(name) is not None:
            yield f"perfgate_{name}", {}, record[name]
    yield "perfgate_record_schema", {}, record.get("schema") or 1


def to_openmetrics(records: list[dict]) -> str:
    """OpenMetrics text: gauges labelled by cell, its parts, the environment's fingerprint and the run, ending in
    `# EOF`. No timestamps: a textfile collector or a pushgateway stamps its own scrape."""
    rows: dict[str, list[str]] = {name: [] for name, _, _ in FAMILIES}
    for record in standing(records):
        labels = {key: record.get(key) for key in ("cell", "model", "phase", "variant", "precision", "tier", "run_id")}
        labels["fingerprint"] = _env(record).get("fingerprint")
        for family, extra, value in _samples(record):
            text = ",".join(f'{key}="{_label(val)}"' for key, val in (labels | extra).items())
            rows[family].append(f"{family}{{{text}}} {_number(value)}")
    lines = []
    for name, unit, help_text in FAMILIES:
        lines += [f"# TYPE {name} gauge", f"# HELP {name} {help_text}"] + ([f"# UNIT {name} {unit}"] if unit else [])
        lines += rows[name]
    return "\n".join(lines + ["# EOF"]) + "\n"


def default_name(source: str, fmt: str) -> str:
    """results.jsonl -> results.csv, results.v3.json, results.pytest-benchmark.json, results.openmetrics.txt."""
    stem = re.sub(r"\.jsonl$", "", source)
    return f"{stem}{SUFFIX[fmt]}" if fmt == "csv" else f"{stem}.{fmt}{SUFFIX[fmt]}"
