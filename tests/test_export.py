"""`perfgate export` (perfgate.render.export): each format read back by its consumer's own parser where one exists
(csv, pytest-benchmark's `compare`, prometheus_client's OpenMetrics parser), from the committed GPU records in
baselines/runs/; PyTorch's v3 JSON, which has no parser outside its uploader, against its documented shape."""

from __future__ import annotations

import csv
import io
import json
import math
import sys
import warnings
from pathlib import Path

import pytest

from perfgate.cli import main
from perfgate.core.records_file import iter_records
from perfgate.render import export

RUNS = sorted((Path(__file__).resolve().parents[1] / "baselines" / "runs").glob("*.jsonl"))


@pytest.fixture(scope="module")
def records():
    with warnings.catch_warnings():  # some committed files carry a cell twice (their confirm rounds): said, kept
        warnings.simplefilter("ignore")
        return export.latest(record for path in RUNS for record in iter_records(path))


@pytest.fixture(scope="module")
def shown(records):
    return export.standing(records)


@pytest.fixture(scope="module")
def sample(shown):
    """A quarter of the records a dashboard gets, every data-parallel one among them: the v3 and OpenMetrics
    texts of all of them take 1.1 and 1.3 s to write and parse, more than the test command can spare."""
    return [record for i, record in enumerate(shown) if i % 4 == 0 or record["phase"] == "ddp"]


def test_the_committed_runs_hold_every_kind_of_record(records, shown):
    """So a test below that passes over them covers failed cells, old schemas and data-parallel cells."""
    assert len(RUNS) > 100 and len(shown) > 500
    assert {r["status"] for r in records} >= {"ok", "failed"} and len(shown) < len(records)
    assert min(r.get("schema") or 1 for r in records) <= 2 and any(r["phase"] == "ddp" for r in shown)


def test_csv_reads_back_with_every_record_and_its_figures(records):
    rows = list(csv.DictReader(io.StringIO(export.to_csv(records), newline="")))
    assert len(rows) == len(records)
    for row, record in zip(rows, records):
        assert (row["cell"], row["status"], row["run_id"]) == (record["cell"], record["status"], record["run_id"] or "")
        assert row["env_fingerprint"] == record["env"].get("fingerprint", "")
        speedup = record.get("speedup")
        assert (float(row["speedup"]) if row["speedup"] else None) == speedup  # repr round-trips a float


def test_v3_json_has_the_required_fields_and_the_records_figures(sample):
    entries = json.loads(export.to_v3(sample))
    for entry in entries:
        assert entry["benchmark"]["name"] == "perfgate" and entry["model"]["name"] and entry["metric"]["name"]
        assert entry["benchmark"]["mode"] in ("training", "inference")
        values = entry["metric"]["benchmark_values"]
        assert isinstance(values, list) and all(isinstance(v, (int, float)) and math.isfinite(v) for v in values)
    speedups = {
        (e["benchmark"]["extra_info"]["run_id"], e["benchmark"]["extra_info"]["cell"]): e["metric"]["benchmark_values"]
        for e in entries
        if e["metric"]["name"] == "speedup"
    }
    assert speedups == {(r["run_id"], r["cell"]): [r["speedup"]] for r in sample}


def test_pytest_benchmark_compare_reads_the_export(shown, tmp_path, monkeypatch, capsys):
    """pytest-benchmark's own `compare` command, in this process: a file it cannot load is only a warning to it,
    so warnings are errors here, and every benchmark must show in its table."""
    from pytest_benchmark.cli import main as compare

    one_run = [r for r in shown if r["run_id"] == shown[0]["run_id"]]
    path = tmp_path / "0001_perfgate.json"
    path.write_text(export.to_pytest_benchmark(one_run))
    monkeypatch.chdir(tmp_path)  # it looks for a conftest.py in the working directory
    monkeypatch.setattr(sys, "argv", ["pytest-benchmark", "compare", str(path), "--columns=min,median,max,rounds"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compare()
    table = capsys.readouterr().out
    for record in one_run:
        for side in ("eager", "compiled"):
            assert f"{record['cell']}[{side}]" in table
    median_ms = json.loads(path.read_text())["benchmarks"][0]["stats"]["median"] * 1e3
    assert median_ms == pytest.approx(one_run[0]["eager_ms"], rel=1e-6)  # the record's median, its rounds' median


def test_openmetrics_parses_with_prometheus_client_and_no_sample_twice(sample):
    parser = pytest.importorskip("prometheus_client.openmetrics.parser")
    text = export.to_openmetrics(sample)
    families = {f.name: f for f in parser.text_string_to_metric_families(text)}
    assert set(families) == {name for name, _, _ in export.FAMILIES}
    samples = [(s.name, tuple(sorted(s.labels.items()))) for f in families.values() for s in f.samples]
    written = [line for line in text.splitlines() if not line.startswith("#")]
    assert len(samples) == len(set(samples)) == len(written)  # the parser keeps one of a repeated sample
    medians = {
        (s.labels["run_id"], s.labels["cell"]): s.value
        for s in families["perfgate_speedup_ratio"].samples
        if s.labels["clock"] == "wall" and s.labels["estimate"] == "median"
    }
    assert medians == {(r["run_id"] or "", r["cell"]): r["speedup"] for r in sample}


def test_the_export_command_writes_a_file_and_refuses_an_empty_one(tmp_path, capsys):
    out = tmp_path / "r.csv"
    assert main(["export", str(RUNS[0]), "--format", "csv", "--output", str(out)]) == 0
    assert out.read_text().startswith("schema,cell,") and f"wrote {out}" in capsys.readouterr().out
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert main(["export", str(empty), "--format", "openmetrics"]) == 2
    assert "cannot export: no records in" in capsys.readouterr().err


FORMATS = ("csv", "v3", "pytest-benchmark", "openmetrics")


def test_a_wheel_in_a_fresh_venv_without_torch_exports_what_this_process_does(tmp_path):
    """The data side as a dashboard box installs it: perfgate's wheel and its declared dependencies in a fresh
    venv, no torch. Its exports must be this process's, byte for byte (each format is read back by its consumer
    above; pytest-benchmark's carries the time of writing, so its benchmarks are counted)."""
    import subprocess
    import venv

    def run(*argv):
        return subprocess.run([str(a) for a in argv], capture_output=True, text=True, timeout=300)

    import shutil

    repo, dist, env = Path(__file__).resolve().parents[1], tmp_path / "dist", tmp_path / "venv"
    # setuptools builds in the source tree (build/, *.egg-info): a copy keeps the checkout as it was.
    source_tree = tmp_path / "src"
    shutil.copytree(repo / "perfgate", source_tree / "perfgate", ignore=shutil.ignore_patterns("__pycache__"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(repo / name, source_tree / name)
    built = run(sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", dist, source_tree)
    assert built.returncode == 0, built.stderr[-2000:]
    venv.create(env, with_pip=False)
    python = env / "bin" / "python"
    installed = run(sys.executable, "-m", "pip", "--python", python, "install", "-q", *dist.glob("*.whl"))
    if installed.returncode:  # the box's package index, not perfgate: say so rather than fail or pass
        pytest.skip(f"pip could not install the wheel's dependencies here: {installed.stderr[-300:]}")
    assert run(python, "-c", "import torch").returncode != 0, "torch is in the fresh venv: not the box this tests"
    source = RUNS[0].with_name("h100-20261122-pr-run1.jsonl")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        records = export.latest(iter_records(source))
    writers = {"csv": export.to_csv, "v3": export.to_v3, "openmetrics": export.to_openmetrics}
    for fmt in FORMATS:
        out = tmp_path / f"export.{fmt}"
        done = run(env / "bin" / "perfgate", "export", source, "--format", fmt, "-o", out)
        assert done.returncode == 0, (fmt, done.stderr[-2000:])
        if fmt in writers:
            shown = records if fmt == "csv" else export.standing(records)
            with open(out, newline="", encoding="utf-8") as written:  # CSV's rows end in \r\n: keep them
                assert written.read() == writers[fmt](shown), fmt
    benchmarks = json.loads((tmp_path / "export.pytest-benchmark").read_text())["benchmarks"]
    assert len(benchmarks) == 2 * len(export.standing(records)) > 0  # eager and compiled of each standing record
