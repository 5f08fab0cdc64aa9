"""The pytest face: one option group (--perf-*), matrix narrowing at collection, a per-cell runner that
streams records and feeds pytest-benchmark, and the gate at the end of the session.

torch is imported only when a cell runs, so the data side's tests collect without it.
"""

from __future__ import annotations

import contextlib
import math
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from perfgate import matrix
from perfgate.matrix import Cell, UnknownNameError, check_names, split_csv

# The zoo, as an import path (ini setting perf_registry): the engine never imports it, but a fresh process
# (--perf-isolate, --perf-warm-compile artifacts) finds a cell's model there by name.
ZOO_REGISTRY = "fixtures:REGISTRY"

ISOLATE = ("gpu", "all", "off")  # --perf-isolate: which cells run in a child process of their own
CELL_KEY = pytest.StashKey[Cell]()
SESSION_KEY = pytest.StashKey["PerfSession"]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("perf_registry", default=ZOO_REGISTRY,
                  help=f"module:attribute of the model registry (name -> ModelSpec), default {ZOO_REGISTRY}")
    group = parser.getgroup("perfgate", "perfgate: torch.compile performance cells")
    group.addoption("--perf-models", help="comma-separated models to run (default: all)")
    group.addoption("--perf-variants", help=f"compile variants: {', '.join(matrix.VARIANTS)}")
    group.addoption("--perf-precisions", help=f"precisions: {', '.join(matrix.PRECISIONS)}")
    group.addoption("--perf-shard", help="run shard I of N (1-based), e.g. 2/4: a deterministic split")
    group.addoption("--perf-results", help="JSON-lines file each cell's record is appended to as it "
                    "finishes (default: .perfgate/results-<UTC time>.jsonl)")
    group.addoption("--perf-cache-dir", help="keep the inductor cache here between runs (default: a "
                    "fresh directory per cell, so compile times are cold)")
    group.addoption("--perf-tf32", choices=("on", "off"), default="on",
                    help="fp32 policy on CUDA: TF32 tensor cores for matmul and convolutions (default on)")
    group.addoption("--perf-warm-compile", choices=matrix.WARM_COMPILE, default="on",
                    help="on: also time the compile again in-process with the on-disk caches warm; artifacts: "
                    "that, and a compile in a fresh process with empty caches handed this cell's "
                    "torch.compiler.save_cache_artifacts() (default on)")
    group.addoption("--perf-min-rounds", type=int, help="interleaved rounds at least (GPU default 15)")
    group.addoption("--perf-max-rounds", type=int, help="interleaved rounds at most (GPU default 40)")
    group.addoption("--perf-round-ms", type=float, help="target length of one round, ms (GPU default 50)")
    group.addoption("--perf-inject", help="test-only planted fault: numerics[:EPS], graph_break, slow[:MS], "
                    "device_slow[:PCT] (of the compiled step's GPU time), host_slow[:PCT] (of its host time)")
    group.addoption("--perf-isolate", choices=ISOLATE, default="gpu",
                    help="run each cell in its own child process under a time limit, so a hung compile, a "
                    "crash or a poisoned CUDA context fails that cell only: gpu (GPU cells, the default), "
                    "all, off")
    group.addoption("--perf-cell-timeout", type=float, metavar="S",
                    help="time limit of an isolated cell, seconds (default: the model's time_limit_s, else "
                    f"{matrix.DEFAULT_TIME_LIMIT_S:g} s, {matrix.AUTOTUNE_TIME_LIMIT_S:g} s for max-autotune)")
    group.addoption("--perf-baseline", help="gate this run against a baseline file or directory")
    group.addoption("--perf-save-baseline", metavar="DIR",
                    help="write this run's records as the baseline of its environment and tier into DIR")
    group.addoption("--perf-report", metavar="DIR", help="write the gate's report.md and report.json here")
    group.addoption("--perf-history", metavar="DB", help="append this run's records to a SQLite history "
                    "(keyed by commit, date, environment and cell) for `perfgate history` and `perfgate report`")
    group.addoption("--perf-profile", metavar="DIR", help="write why-artifacts of every cell run here: "
                    "chrome traces of eager and compiled steps and TORCH_LOGS graph_breaks,recompiles,"
                    "perf_hints (the gate writes them for flagged cells on its own)")


def pytest_configure(config: pytest.Config) -> None:
    try:
        selection = _selection(config)
    except (UnknownNameError, ValueError) as err:
        raise pytest.UsageError(str(err)) from None
    config.stash[SESSION_KEY] = PerfSession(config, selection)


def _selection(config: pytest.Config) -> dict:
    from perfgate import faults

    opt = config.getoption
    models = split_csv(opt("--perf-models"))
    if models is not None:  # the zoo is the face's to know, never the engine's
        check_names("model", models, registry(config))
    variants = split_csv(opt("--perf-variants"))
    precisions = split_csv(opt("--perf-precisions"))
    shard = parse_shard(opt("--perf-shard"))
    faults.parse(opt("--perf-inject"))
    check_timing(opt("--perf-min-rounds"), opt("--perf-max-rounds"), opt("--perf-round-ms"))
    limit = opt("--perf-cell-timeout")
    if limit is not None and not (math.isfinite(limit) and limit > 0):
        raise ValueError(f"--perf-cell-timeout={limit}: the time limit must be a finite number of seconds > 0")
    return {
        "model": models,
        "variant": check_names("variant", variants, matrix.VARIANTS) if variants else None,
        "precision": check_names("precision", precisions, matrix.PRECISIONS) if precisions else None,
        "shard": shard,
    }


def registry(config: pytest.Config) -> dict:
    """The model registry the ini setting perf_registry names."""
    import importlib

    module, _, attribute = config.getini("perf_registry").partition(":")
    return getattr(importlib.import_module(module), attribute)


def check_timing(min_rounds: int | None, max_rounds: int | None, round_ms: float | None) -> None:
    """Refuse timing options that cannot mean what they say (0 or negative rounds would give a zero-width
    interval that the gate reads as no noise; nan or inf ms cannot size a round)."""
    for name, value in (("--perf-min-rounds", min_rounds), ("--perf-max-rounds", max_rounds)):
        if value is not None and value < 1:
            raise ValueError(f"{name}={value}: rounds must be 1 or more")
    if min_rounds is not None and max_rounds is not None and min_rounds > max_rounds:
        raise ValueError(f"--perf-min-rounds={min_rounds} is more than --perf-max-rounds={max_rounds}")
    if round_ms is not None and not (math.isfinite(round_ms) and round_ms > 0):
        raise ValueError(f"--perf-round-ms={round_ms}: the round length must be a finite number of ms > 0")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not (n >= 1 and 1 <= i <= n):
        raise ValueError(f"--perf-shard={text!r}: expected I/N with 1 <= I <= N, e.g. 1/4")
    return i, n


def cells(registry, phase: str) -> list:
    """pytest.param for every cell of `phase`: GPU cells over the whole matrix, CPU cells over each model's
    cpu_variants in fp32, with markers and known-issue marks from the model's record."""
    params = []
    for spec in registry.values():
        for variant in (v for v in matrix.VARIANTS.values() if spec.runs(v, phase)):
            for precision in matrix.PRECISIONS:
                params.append(_param(spec, Cell(spec.name, phase, variant.name, precision, "gpu",
                                                matrix.tier_of(variant.name, precision))))
        if phase in spec.cpu_phases:
            for variant in spec.cpu_variants:
                params.append(_param(spec, Cell(spec.name, phase, variant, "fp32", "cpu", "nightly")))
    return params


def _param(spec, cell: Cell):
    marks = [getattr(pytest.mark, cell.device_kind)]
    if cell.device_kind == "gpu":
        marks.append(getattr(pytest.mark, cell.tier))
    issue = spec.known_issue(cell)
    if issue is not None:
        marks.append(pytest.mark.skip(reason=issue.reason) if issue.action == "skip"
                     else pytest.mark.xfail(reason=issue.reason, strict=False))
    return pytest.param(cell, marks=marks, id=cell.param_id)


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    perf = config.stash[SESSION_KEY]
    keep, drop = [], []
    for item in items:
        cell = _cell_of(item)
        if cell is None:
            keep.append(item)
            continue
        perf.collected += 1
        item.stash[CELL_KEY] = cell
        (keep if perf.selects(cell) else drop).append(item)
    shard = perf.selection["shard"]
    if shard is not None:
        keep, off_shard = _shard(keep, *shard)
        drop += off_shard
    perf.offered = sorted({item.stash[CELL_KEY] for item in keep if CELL_KEY in item.stash}, key=str)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _skip_gpu_cells_without_cuda(items)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Say why no cell is left when the --perf-* options and -m/-k together select none (pytest alone
    says "313 deselected" and exits 5)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None or any(CELL_KEY in item.stash for item in session.items):
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and perf.collected:
        reporter.write_line(f"perfgate: no cell selected: {_why_none(perf, session.config)}", yellow=True)


def _why_none(perf: "PerfSession", config: pytest.Config) -> str:
    options = ", ".join(f"--perf-{key}s {','.join(value)}" for key, value in perf.selection.items()
                        if key != "shard" and value is not None) or "no --perf-* selection"
    if not perf.offered:
        return f"{options} matches none of the {perf.collected} cells collected"
    kinds = sorted({cell.device_kind for cell in perf.offered})
    variants = sorted({cell.variant for cell in perf.offered})
    filters = " ".join(f"{flag} {value!r}" for flag, value in (("-m", config.option.markexpr),
                                                               ("-k", config.option.keyword)) if value)
    return (f"{options} matches {len(perf.offered)} cell(s), all {'/'.join(kinds)} cells (variants "
            f"{', '.join(variants)}), and {filters or 'the shard'} removed every one of them; CPU cells run "
            f"fp32 with each model's cpu_variants, GPU cells the whole matrix")


def _cell_of(item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("cell") if callspec else None
    return value if isinstance(value, Cell) else None


def _shard(items: list, index: int, count: int) -> tuple[list, list]:
    """Deal cells round-robin in sorted id order: every shard gets a similar mix of models, and the split
    does not depend on collection order. Items that are not cells stay in shard 1."""
    cell_ids = sorted({item.stash[CELL_KEY].id for item in items if CELL_KEY in item.stash})
    mine = {cid for n, cid in enumerate(cell_ids) if n % count == index - 1}
    keep, drop = [], []
    for item in items:
        cell = item.stash.get(CELL_KEY, None)
        ours = cell.id in mine if cell is not None else index == 1
        (keep if ours else drop).append(item)
    return keep, drop


def _skip_gpu_cells_without_cuda(items: list) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    reason = f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})"
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def perf(pytestconfig: pytest.Config) -> "PerfSession":
    return pytestconfig.stash[SESSION_KEY]


class PerfSession:
    """Session state: options, the results file, each device's environment, the records written."""

    def __init__(self, config: pytest.Config, selection: dict):
        self.config, self.selection = config, selection
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # The worker id from xdist's own config, not PYTEST_XDIST_WORKER: that variable leaks into any
        # pytest a worker starts in a subprocess, which is no worker.
        workerinput = getattr(config, "workerinput", None)
        self.worker = workerinput["workerid"] if workerinput else None
        default = Path(".perfgate") / f"results-{stamp}.jsonl"
        self.results_path = Path(config.getoption("--perf-results") or default)
        if self.worker:  # each xdist worker streams to its own file; the controller merges them
            self.results_path = self.results_path.with_name(f"{self.results_path.stem}.{self.worker}.jsonl")
        # One id per session, shared by its xdist workers (the controller's testrunuid), so a baseline
        # counts a run once however many worker files it was streamed to.
        if workerinput:
            self.run_id = workerinput["testrunuid"]
        else:
            self.run_id = getattr(config.option, "testrunuid", None) or uuid.uuid4().hex
            if hasattr(config.option, "testrunuid"):  # xdist hands the controller's id to its workers
                config.option.testrunuid = self.run_id
        self.records: list[dict] = []
        self.ran: dict[str, tuple] = {}  # cell id -> (spec, cell), for the gate's confirm round
        self._envs: dict[str, dict] = {}
        self.summary: list[str] = []  # what the gate and baseline steps say at the end
        self.collected = 0  # cells collected, and those the --perf-* options kept: to say why none ran
        self.offered: list[Cell] = []

    def selects(self, cell: Cell) -> bool:
        return all(self.selection[key] is None or getattr(cell, key) in self.selection[key]
                   for key in ("model", "variant", "precision"))

    def _run(self, spec, cell: Cell, record_compiled=None, profile_dir: str | None = None) -> dict:
        import dataclasses

        from perfgate.record import append_record
        from perfgate.validate import checked

        device = self.device(cell)
        options = self.options(cell, device)
        if profile_dir:
            options = dataclasses.replace(options, profile_dir=profile_dir)
        if self.isolates(cell):
            record = self._run_isolated(spec, cell, options, record_compiled)
        else:
            record = self._run_here(spec, cell, options, device, record_compiled)
        # NaN, inf or missing figures on an ok record: the cell failed, whatever run_cell thought.
        record = checked({**record, "run_id": self.run_id})
        append_record(self.results_path, record)
        self.records.append(record)
        return record

    def _run_here(self, spec, cell: Cell, options, device, record_compiled) -> dict:
        from perfgate.cell import run_cell
        from perfgate.record import append_record

        def checkpoint(partial: dict) -> None:  # superseded by the final record (a later one wins)
            append_record(self.results_path, {**partial, "run_id": self.run_id})

        return run_cell(spec, cell, options, self.environment(device), self._progress, record_compiled,
                        checkpoint)

    def isolates(self, cell: Cell) -> bool:
        choice = self.config.getoption("--perf-isolate")
        return choice == "all" or (choice == "gpu" and cell.device_kind == "gpu")

    def time_limit_s(self, spec, cell: Cell) -> float:
        """--perf-cell-timeout, else the model's own limit, else the variant's default."""
        return (self.config.getoption("--perf-cell-timeout") or spec.time_limit_s
                or matrix.VARIANTS[cell.variant].time_limit_s)

    def _run_isolated(self, spec, cell: Cell, options, record_compiled) -> dict:
        from perfgate import isolate

        tf32 = self.config.getoption("--perf-tf32") == "on"
        job = isolate.job_for(cell, options, tf32, self.results_path, self.run_id)
        record = isolate.run_isolated(cell, job, self.time_limit_s(spec, cell), self._progress, record_compiled)
        if record.get("env"):  # what pytest-benchmark's machine_info shows, as an in-process cell leaves it
            self._envs.setdefault(options.device, record["env"])
        return record

    def device(self, cell: Cell):
        import torch

        if cell.device_kind == "cpu":
            return torch.device("cpu")
        # One xdist worker per visible GPU: gw0 -> cuda:0, gw1 -> cuda:1, ...
        return torch.device("cuda", int((self.worker or "gw0").lstrip("gw") or 0) % torch.cuda.device_count())

    def environment(self, device) -> dict:
        from perfgate.env import environment
        from perfgate.steps import set_tf32

        tf32 = self.config.getoption("--perf-tf32") == "on"
        if device.type == "cuda":
            import torch

            torch.cuda.set_device(device)
            set_tf32(tf32)
        key = str(device)
        if key not in self._envs:
            self._envs[key] = environment(device, tf32)
        return self._envs[key]

    def options(self, cell: Cell, device):
        from perfgate import faults
        from perfgate.cell import RunOptions
        from perfgate.timing import CPU_PLAN, GPU_PLAN

        opt = self.config.getoption
        overrides = {"min_rounds": opt("--perf-min-rounds"), "max_rounds": opt("--perf-max-rounds"),
                     "target_round_ms": opt("--perf-round-ms")}
        plan = (GPU_PLAN if cell.device_kind == "gpu" else CPU_PLAN).replace(
            **{key: value for key, value in overrides.items() if value is not None})
        return RunOptions(device=str(device), plan=plan, warm_compile=opt("--perf-warm-compile"),
                          cache_dir=opt("--perf-cache-dir"), fault=faults.parse(opt("--perf-inject")),
                          profile_dir=opt("--perf-profile"), registry=self.config.getini("perf_registry"))

    def measure(self, spec, cell: Cell, benchmark=None) -> dict:
        """Run one cell, stream its record, feed pytest-benchmark, and fail the test if the cell failed."""
        sink = _BenchmarkSink(benchmark, cell)
        record = self._run(spec, cell, sink.add)
        self.ran[cell.id] = (spec, cell)
        sink.annotate(record)
        if record["status"] != "ok":
            pytest.fail(f"{cell.id}: {record['reason']}", pytrace=False)
        return record

    def gate(self, records: list[dict], baseline):
        """Gate this run. Cells whose speedup tripped are measured again in this process (a fresh compile)
        and stay regressions only if they trip twice. Reports go to the terminal and --perf-report."""
        from perfgate.cli import write_reports
        from perfgate.gate import gate_run

        report_dir = self.config.getoption("--perf-report")
        why_dir = str(Path(report_dir or ".perfgate") / "why")
        profiled: dict[str, dict] = {}

        def remeasure(cell_ids: list[str]) -> list[dict]:
            """The confirm round, profiled: a cell that trips twice comes with its why-artifacts."""
            for cell_id in cell_ids:
                if cell_id in self.ran:  # under xdist the controller ran nothing: no confirm round
                    self._progress(f"{cell_id}: a speedup rule tripped; measuring again to confirm")
                    profiled[cell_id] = self._run(*self.ran[cell_id], profile_dir=why_dir)
            return list(profiled.values())

        outcome = gate_run(records, baseline, remeasure)
        for cell_id in _flagged(outcome) - set(profiled):
            if cell_id in self.ran:  # flagged by another rule: profile it for the reader, gate unchanged
                self._progress(f"{cell_id}: flagged; writing why-artifacts")
                profiled[cell_id] = self._run(*self.ran[cell_id], profile_dir=why_dir)
        self.summary += [f"why-artifacts for {cid}: {rec['why']['dir']}" for cid, rec in profiled.items()
                         if rec.get("why")]
        paths = (Path(report_dir) / "report.md", Path(report_dir) / "report.json") if report_dir else (None, None)
        if outcome.errors:
            self.summary += [f"perfgate: cannot compare (exit 2): {error}" for error in outcome.errors]
        else:
            self.summary += write_reports(outcome, *paths).splitlines()
        return outcome

    def _progress(self, message: str) -> None:
        """One line as each phase of a cell starts, so a 40-minute run is never silent. Cells run inside a
        test, where pytest captures fd 1 and 2 (the reporter's stdout included) and drops a passing test's
        capture: no line ever showed, -q or not, unless capture is suspended while writing. Flushed at once,
        so a run killed by `timeout` with stdout block-buffered to a file keeps the lines it printed."""
        line = f"[perfgate] {message}"
        manager = self.config.pluginmanager
        reporter, capture = manager.get_plugin("terminalreporter"), manager.get_plugin("capturemanager")
        with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
            if reporter is not None:
                reporter.write_line(line)
                reporter.flush()
            else:
                print(line, file=sys.stderr, flush=True)


def _flagged(outcome) -> set[str]:
    return {finding.cell for report in outcome.reports for finding in report.regressions}


class _BenchmarkSink:
    """Hands each compiled round's device-timed ms per step to pytest-benchmark, so its JSON, --benchmark-save
    and --benchmark-compare hold the same numbers as perfgate's record (not a host-clock re-measurement)."""

    def __init__(self, benchmark, cell: Cell):
        self.benchmark = benchmark if benchmark is not None and not benchmark.disabled else None
        self.stats = None
        if self.benchmark is not None:
            self.benchmark.group = f"{cell.model}-{cell.phase}"
            # Claim the fixture as pedantic() would, so it neither warns "not used" nor can be used twice.
            self.benchmark._mode = "perfgate device-timed rounds"  # noqa: SLF001

    def add(self, ms_per_step: float) -> None:
        if self.benchmark is None:
            return
        if self.stats is None:
            self.stats = self.benchmark._make_stats(1)  # noqa: SLF001 - the fixture's own stats entry
        self.stats.update(ms_per_step / 1e3)

    def annotate(self, record: dict) -> None:
        if self.benchmark is None:
            return
        keys = ("status", "reason", "eager_ms", "compiled_ms", "speedup", "speedup_lo", "speedup_hi",
                "compile_s", "compile_warm_s", "compile_artifacts_s", "graph_breaks", "recompiles", "numerics",
                "peak_mem_eager_mb", "peak_mem_compiled_mb", "steps_per_round")
        self.benchmark.extra_info.update({key: record[key] for key in keys})


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    perf = config.stash.get(SESSION_KEY, None)
    if perf is not None and perf._envs:
        machine_info["perfgate"] = next(iter(perf._envs.values()))


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Save a baseline and/or gate the run, once, on the controller (xdist workers only stream records)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is not None and not hasattr(session.config, "workerinput"):
        from perfgate.session_end import finish

        finish(session, perf)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    perf = config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    if perf.records:
        terminalreporter.write_sep("-", "perfgate")
        terminalreporter.write_line(f"records: {perf.results_path}")
    for line in perf.summary:
        terminalreporter.write_line(line)
