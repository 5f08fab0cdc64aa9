"""A pytest session's perf state and each cell's run: the results file and run id, the run options read from
the --perf-* options (the fp32 policy among them), each device's environment and the records written; a
cell run in this process or in its own (perfgate.measure.isolate), a cell measured again for the gate
(perfgate.plugin.session_end), and progress lines.
torch is imported only when a cell runs.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from perfgate.core import matrix
from perfgate.core.matrix import Cell
from perfgate.core.record import nothing_measured
from perfgate.plan.costs import cell_seconds, gpus_held
from perfgate.plugin.selection import Selection


class PerfSession:
    """Session state: options, the results file, each device's environment, the records written."""

    def __init__(self, config: pytest.Config, selection: Selection):
        self.config, self.selection = config, selection
        stamp = datetime.now(timezone.utc).strftime("%Y%m%dT%H%M%SZ")
        # The worker id from xdist's own config, not PYTEST_XDIST_WORKER: that variable leaks into any
        # pytest a worker starts in a subprocess, which is no worker.
        workerinput = getattr(config, "workerinput", None)
        self.worker = workerinput["workerid"] if workerinput else None
        self.workers = workerinput.get("workercount", 1) if workerinput else 1
        self.finished: dict[str, dict] = {}  # cell id -> its finished line and costs, for the xdist controller
        self.progress = None  # a perfgate.plan.costs.Progress over the planned cells (plan())
        self.costs_known = 0  # of the planned cells, how many the costs history knows
        self.relay = None  # on an xdist controller: the perfgate.plugin.workers.ProgressRelay counting for it
        self.expected: dict[str, float] = {}  # cell id -> expected wall seconds
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
        self.registry = config.getini("perf_registry")  # the zoo's import path, "module:attribute"
        # The fp32 policy of CUDA cells (TF32 tensor cores or full fp32), set as each cell starts.
        self.tf32 = config.getoption("--perf-tf32") == "on"
        self.records: list[dict] = []
        self.skips: list[tuple[Cell, str]] = []  # (cell, reason) of the selected cells pytest skipped
        self.unwritten: list[str] = []  # cells whose record could not be appended to the results file
        self.ran: dict[str, tuple] = {}  # cell id -> (spec, cell), for the gate's confirm round
        self._envs: dict[str, dict] = {}
        self.summary: list[str] = []  # what the gate and baseline steps say at the end
        self.collected = 0  # cells collected, and those the --perf-* options kept: to say why none ran
        self.offered: list[Cell] = []
        self.cell_process = None  # the warm process isolated cells run in (perfgate.measure.isolate)
        self.precompile_s = 0.0  # seconds the session spent precompiling before its first cell
        # Cells whose compiles the kept cache holds: a paired cell's two sides then prepare at once.
        self.precompiled: set[str] = set()
        self.pairing = None  # --perf-against: the paired engine's state (perfgate.plugin.against.Pairing)
        self.paired = None  # the paired verdict, once judged (perfgate.ab.verdict.PairedVerdict)

    def start_relay(self, workers: int):
        """On the xdist controller: the plugin that prints the finished-cell lines `workers` workers send."""
        from perfgate.plugin.workers import ProgressRelay

        self.relay = ProgressRelay(self.say, workers)
        return self.relay

    def relayed(self, cell_id: str) -> tuple | None:
        """On an xdist worker: the user property carrying a finished cell's line to the controller, once."""
        if not self.worker or cell_id not in self.finished:
            return None
        from perfgate.plugin.workers import ProgressRelay

        return ProgressRelay.KEY, self.finished.pop(cell_id)

    def closing_lines(self) -> list[str]:
        """The terminal summary's lines: where the records went, the cells' times, what the session end said."""
        lines = []
        if self.records:
            lines.append(f"records: {self.results_path}")
            progress = self.relay.progress if self.relay is not None and self.relay.progress else self.progress
            if progress is not None and progress.done:
                lines.append(progress.summary())
            from perfgate.render.stage_account import run_line

            stages = run_line(self.records, self.precompile_s)
            if stages:
                lines.append(stages)
        nothing = nothing_measured(self.records) if self.records else None
        if nothing and not any("nothing was measured" in line for line in self.summary):  # the gate said it
            # The README's first command on a CPU box: pytest said only "12 skipped" and exited 0.
            lines.append(f"perfgate: {nothing}")
        return lines + self.summary

    def _run(self, spec, cell: Cell, record_compiled=None, profile_dir: str | None = None, remeasure: str = "") -> dict:
        import dataclasses

        from perfgate.core.validate import checked
        from perfgate.measure.devices import for_cell
        from perfgate.plugin.workers import finished_line

        options = self.options(cell, for_cell(cell.device_kind, self.worker))
        if profile_dir:
            options = dataclasses.replace(options, profile_dir=profile_dir)
        if self.measures_paired(cell):
            record = self.pairing.run(
                self.job(spec, cell, options, remeasure), self.say, warm=cell.id in self.precompiled
            )
        elif why := self.unpaired_elsewhere(cell):
            pytest.skip(why)
        elif self.isolates(cell):
            record = self._run_isolated(spec, cell, options, record_compiled, remeasure)
        else:
            record = self._run_here(spec, cell, options, record_compiled, remeasure)
        if record.get("env"):  # a cell run in another process: its device's environment, as one run here leaves it
            self._envs.setdefault(options.device, record["env"])
        # NaN, inf or missing figures on an ok record: the cell failed, whatever run_cell thought.
        unfit = "; ".join(filter(None, (self.unfit(cell), record.get("unfit"))))  # the cell's own: neighbours
        issue = spec.known_issue(cell)
        record = checked(
            {
                **record,
                "run_id": self.run_id,
                "unfit": unfit,
                "remeasure": remeasure,
                "known_issue": issue.reason if issue else "",
            }
        )
        self.finished[cell.id] = {
            "line": finished_line(record),
            "cell": cell.id,
            "wall_s": record["wall_s"],
            "expected_s": self.expected.get(cell.id, 0.0),
            "planned": len(self.expected),
            "planned_s": sum(self.expected.values()),
            "gpus": gpus_held(record),
        }
        self.append(record)
        self.records.append(record)
        return record

    def note_skip(self, cell: Cell, reason: str) -> None:
        """A selected cell pytest skipped (no CUDA device, too few GPUs, the model's known issue): its record
        is written at the session's end (write_skips), when the environment of its device kind is known."""
        self.skips.append((cell, reason))

    def write_skips(self) -> None:
        """Append a skipped record per skipped cell, so every face sees what was asked and not measured. Its
        environment is that of a cell measured on the same kind of device in this process, else none (no
        baseline is then its own, and the gate cannot pass it)."""
        from perfgate.core.record import skipped_record

        now = datetime.now(timezone.utc).isoformat(timespec="seconds")
        for cell, reason in self.skips:
            kind = "gpu" if cell.device_kind == "gpu" else "cpu"
            env = next((e for device, e in self._envs.items() if device.startswith("cuda") == (kind == "gpu")), {})
            record = skipped_record(cell, env, self.run_id, reason, now)
            self.append(record)
            self.records.append(record)
        self.skips = []

    def append(self, record: dict) -> None:
        """Append a record to the results file. One that cannot be written (a disk that filled mid-run) fails
        no cell and stops nothing: the session says so at its end and exits 2, never 1 (no regression)."""
        from perfgate.core.records_file import append_record

        try:
            append_record(self.results_path, record)
        except OSError as err:
            if not self.unwritten:
                self.summary.append(
                    f"perfgate: could not write records to {self.results_path} (exit 2): "
                    f"{err.strerror or err}; the cells' lines above say what they measured"
                )
            self.unwritten.append(record["cell"])

    def _run_here(self, spec, cell: Cell, options, record_compiled, remeasure: str = "") -> dict:
        from perfgate.measure.cell import run_cell
        from perfgate.measure.devices import start_cell

        def checkpoint(partial: dict) -> None:  # superseded by the final record (a later one wins)
            self.append({**partial, "run_id": self.run_id, "remeasure": remeasure})

        device = start_cell(options.device, self.tf32)
        return run_cell(spec, cell, options, self.environment(device), self.say, record_compiled, checkpoint)

    def unfit(self, cell: Cell) -> str:
        """Why this worker's timings cannot be trusted (xdist workers sharing the machine), or ""."""
        if self.workers <= 1:
            return ""
        if cell.phase == "ddp":
            return (
                f"a data-parallel cell's ranks take {cell.world} GPUs, shared with the other "
                f"{self.workers - 1} xdist worker(s)' cells: run ddp cells without -n"
            )
        import torch

        from perfgate.plugin.workers import unfit_reason

        gpus = torch.cuda.device_count() if cell.device_kind == "gpu" else 0
        return unfit_reason(cell.device_kind, self.workers, gpus)

    def measures_paired(self, cell: Cell) -> bool:
        """Whether `cell` is measured beside the base (--perf-against): every cell but a data-parallel one,
        whose ranks hold the GPUs the two sides would share."""
        return self.pairing is not None and cell.phase != "ddp"

    def unpaired_elsewhere(self, cell: Cell) -> str:
        """Why `cell` cannot run here, or "": a cell the pairing leaves out (data-parallel) runs in this session,
        on this tree and interpreter, which are not side B's where --perf-b-* name another: its record would
        be B's with A's code in it."""
        if self.pairing is None or self.measures_paired(cell) or not self.pairing.b_elsewhere:
            return ""
        return (
            f"{cell.id}: a data-parallel cell is not paired, and side B is not this session's tree, interpreter "
            "or environment (--perf-b-*): measure it with perfgate ab --processes N"
        )

    def isolates(self, cell: Cell) -> bool:
        """Whether `cell` runs in this session's isolated child: never a paired cell, which runs in its two
        sides' workers, each a process of its own with its own time limits (perfgate.ab.pair_workers)."""
        if self.measures_paired(cell):
            return False
        choice = self.config.getoption("--perf-isolate")
        return choice == "all" or (choice == "gpu" and cell.device_kind == "gpu")

    def time_limit_s(self, spec, cell: Cell) -> float:
        """--perf-cell-timeout, else the model's own limit, else the variant's default."""
        return (
            self.config.getoption("--perf-cell-timeout")
            or spec.time_limit_s
            or matrix.VARIANTS[cell.variant].time_limit_s
        )

    def job(self, spec, cell: Cell, options, remeasure: str = ""):
        """The cell as one serializable job, for a process other than this one."""
        from perfgate.core.job import Job
        from perfgate.measure.launch import import_path

        return Job(
            cell=cell,
            options=options,
            tf32=self.tf32,
            results_path=str(self.results_path),
            run_id=self.run_id,
            limit_s=self.time_limit_s(spec, cell),
            sys_path=tuple(import_path()),
            remeasure=remeasure,
        )

    def _run_isolated(self, spec, cell: Cell, options, record_compiled, remeasure: str = "") -> dict:
        job = self.job(spec, cell, options, remeasure)
        return self.isolated_process().run(job, self.say, record_compiled)

    def isolated_process(self):
        """The warm process of this session's isolated cells, made on first use."""
        if self.cell_process is None:
            from perfgate.measure.isolate import CellProcess

            self.cell_process = CellProcess()
        return self.cell_process

    def close(self) -> None:
        """End the warm cell process, if one runs."""
        if self.cell_process is not None:
            self.cell_process.close()
            self.cell_process = None
        if self.pairing is not None:
            self.pairing.close()

    def environment(self, device) -> dict:
        """The environment of `device` (a torch.device), taken once per device and session."""
        from perfgate.measure.env import environment

        key = str(device)
        if key not in self._envs:
            self._envs[key] = environment(device, self.tf32)
        return self._envs[key]

    def options(self, cell: Cell, device: str):
        from perfgate.core.fault import parse as parse_fault
        from perfgate.core.job import RunOptions
        from perfgate.core.timing_plan import CPU_PLAN, GPU_PLAN
        from perfgate.measure import reference

        opt = self.config.getoption
        overrides = {
            "min_rounds": opt("--perf-min-rounds"),
            "max_rounds": opt("--perf-max-rounds"),
            "target_round_ms": opt("--perf-round-ms"),
        }
        plan = (GPU_PLAN if cell.device_kind == "gpu" else CPU_PLAN).replace(
            **{key: value for key, value in overrides.items() if value is not None}
        )
        references = opt("--perf-reference-cache") or reference.DEFAULT_DIR
        return RunOptions(
            device=device,
            plan=plan,
            warm_compile=opt("--perf-warm-compile"),
            cache_dir=opt("--perf-cache-dir"),
            reference_dir=None if references == "off" else references,
            numerics=opt("--perf-numerics") == "on",
            fault=parse_fault(opt("--perf-inject")),
            profile_dir=opt("--perf-profile"),
            registry=self.registry,
        )

    def expected_costs(self, cells: list[Cell]) -> dict[str, float]:
        """Expected wall seconds per cell: the --perf-costs (else --perf-history) database's median where the
        cell ran, else a prior per variant (perfgate.plan.costs). Every shard of a split run must read the same."""
        from perfgate.plan import costs
        from perfgate.store import history

        db = self.config.getoption("--perf-costs") or self.config.getoption("--perf-history")
        known = costs.known_costs(history.records(db)) if db and Path(db).is_file() else {}
        self.costs_known = sum(1 for cell in cells if known.get(cell.id))
        return costs.expected_s(cells, known)

    def plan(self, cells: list[Cell]) -> str:
        """The cells this process will run, for k/N and the ETA on each finished cell; returns the line that
        says what they are expected to cost, before the first starts."""
        from perfgate.plan.costs import PAIRED_OVER_OWN, Progress, hms

        self.expected = self.expected_costs(cells)
        paired = {cell.id for cell in cells if self.measures_paired(cell)}
        for cell_id in paired:  # measured beside its base: both sides' seconds, and second process pairs
            self.expected[cell_id] *= PAIRED_OVER_OWN
        self.progress = Progress(len(cells), sum(self.expected.values()))
        if any(self.isolates(cell) for cell in cells) and not self.config.option.collectonly:
            self.isolated_process().prestart()  # its imports overlap what comes before the first cell
        gpus = sum(1 for cell in cells if cell.device_kind == "gpu")
        how = f"{len(paired)} of them beside their base (paired)" if paired else "in one process"
        return (
            f"perfgate: {len(cells)} cell(s) planned ({gpus} on a GPU), about "
            f"{hms(sum(self.expected.values()))} expected {how}: {self.costs_known} from the "
            f"costs history, {len(cells) - self.costs_known} from priors per variant (perfgate.plan.costs)"
        )

    def precompile(self, cells: list[Cell]) -> str:
        """--perf-precompile N: fill --perf-cache-dir with the planned cells' compiles in N processes at once,
        dealt by expected cost, before the first cell is timed (plan() first); returns the line that says how
        it went. Each line (a cell's first-call seconds, or why it did not compile) goes to
        <results>.precompile.json."""
        import time

        import torch

        from perfgate.core import zoo
        from perfgate.core.records_file import precompile_path
        from perfgate.measure import precompile, precompiled, reference
        from perfgate.plan.costs import hms, precompile_shares

        workers = self.config.getoption("--perf-precompile")
        devices = precompile.cuda_devices()
        todo = {cell.id: cell for cell in cells if precompile.wanted(cell, bool(devices))}
        if not todo:
            return "perfgate: --perf-precompile: no selected cell compiles with inductor; nothing to do"
        started = time.monotonic()
        cache_dir = self.config.getoption("--perf-cache-dir")
        gpu = torch.cuda.get_device_name(devices[0]) if devices else None
        keys = {cell_id: precompiled.key(cell, self.tf32, gpu, self.registry) for cell_id, cell in todo.items()}
        cells_left, held = precompiled.split(todo.values(), cache_dir, keys)
        already = f"; {len(held)} already in the cache from an earlier precompile" if held else ""
        self.precompiled = {cell.id for cell in held}
        if not cells_left:
            self.precompile_s = time.monotonic() - started
            return (
                f"perfgate: --perf-precompile: all {len(held)} cell(s) already in the cache from an earlier precompile"
            )
        shares = precompile_shares(cells_left, self.expected, workers)
        registry = zoo.load(self.registry)
        limit = max(sum(self.time_limit_s(registry[c.model], c) for c in share) for share in shares if share)
        references = self.config.getoption("--perf-reference-cache") or reference.DEFAULT_DIR
        results = precompile.run(
            shares,
            cache_dir=cache_dir,
            registry=self.registry,
            devices=devices,
            tf32=self.tf32,
            limit_s=limit,
            reference_dir=None if references == "off" else references,
            out=precompile_path(self.results_path),
        )
        precompiled.mark(results, cache_dir, keys)
        self.precompiled |= {r["cell"] for r in results if r["status"] == "ok"}
        self.precompile_s = time.monotonic() - started
        failed = [
            r["cell"] + (f" (stopped after {hms(r['stopped_after_s'])})" if "stopped_after_s" in r else "")
            for r in results
            if r["status"] != "ok"
        ]
        return (
            f"perfgate: precompiled {len(results) - len(failed)} of {len(results)} cell(s) in "
            f"{hms(time.monotonic() - started)} with {len([s for s in shares if s])} process(es)"
            + (f"; not compiled: {', '.join(failed)}" if failed else "")
            + already
        )

    def measure(self, cell: Cell, benchmark=None) -> dict:
        """Run one cell of the perf_registry zoo, stream its record, feed pytest-benchmark, and fail the test
        if the cell failed."""
        from perfgate.core import zoo
        from perfgate.plugin.bench_sink import BenchmarkSink

        spec = zoo.load(self.registry)[cell.model]
        sink = BenchmarkSink(benchmark, cell)
        record = self._run(spec, cell)
        self.ran[cell.id] = (spec, cell)
        if self.progress is not None and self.worker is None:  # under xdist the controller counts
            done = self.progress.finish(
                cell.id, cell_seconds(record), self.expected.get(cell.id, 0.0), gpus_held(record)
            )
            self.say(f"{done}: {self.finished[cell.id]['line']}")
        sink.feed(record)  # from the record, so pytest-benchmark holds the rounds perfgate judged
        if record["status"] != "ok":
            pytest.fail(f"{cell.id}: {record['reason']}", pytrace=False)
        return record

    def measure_again(self, cell_id: str, why_dir: str, remeasure: str) -> dict:
        """A cell this session ran, measured again in this process (a fresh compile), profiled into `why_dir`:
        the gate's confirm round, or a flagged cell's why-artifacts (`remeasure` says which)."""
        return self._run(*self.ran[cell_id], profile_dir=why_dir, remeasure=remeasure)

    def paired_verdict(self, records: list[dict]):
        """The paired verdict over this run's records (None unless --perf-against), its lines in the summary."""
        if self.pairing is None:
            return None
        from perfgate.ab.verdict import PairedVerdict

        self.paired = verdict = PairedVerdict.of(records)
        self.summary += verdict.lines()
        return verdict

    def say(self, message: str) -> None:
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
