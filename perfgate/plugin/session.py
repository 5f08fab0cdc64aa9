"""A pytest session's perf state and each cell's record: the results file and run id, the fp32 policy, each
device's environment and the records written (a skipped cell's too); a cell measured, or measured again for
the gate (perfgate.plugin.session_end), and progress lines. PerfSession's other parts: where and how a cell
runs (perfgate.plugin.session_runner), and the plan and precompile before the first (perfgate.plugin.session_plan).
torch is imported only when a cell runs.
"""

from __future__ import annotations

import contextlib
import sys
import uuid
from datetime import datetime, timezone
from pathlib import Path

import pytest

from perfgate.core.matrix import Cell
from perfgate.core.record import nothing_measured
from perfgate.measure import record_builder
from perfgate.plan.costs import cell_seconds, gpus_held
from perfgate.plugin.selection import Selection
from perfgate.plugin.session_plan import SessionPlan
from perfgate.plugin.session_runner import CellRunner


class PerfSession(CellRunner, SessionPlan):
    """Session state: options, the results file, each device's environment, the records written. Where a cell
    runs is CellRunner's part (perfgate.plugin.session_runner), the plan before the first SessionPlan's."""

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
        # The node ids of this process's failed tests that are no cell (a unit test beside the perf suite): a
        # session where one failed is 1 even where perfgate's own engine broke every failed cell.
        self.other_failures: set[str] = set()
        self.unwritten: list[str] = []  # cells whose record could not be appended to the results file
        self.ran: dict[str, tuple] = {}  # cell id -> (spec, cell), for the gate's confirm round
        self._envs: dict[str, dict] = {}
        self.summary: list[str] = []  # what the gate and baseline steps say at the end
        self.collected = 0  # cells collected, and those the --perf-* options kept: to say why none ran
        self.offered: list[Cell] = []
        self.cell_process = None  # the warm process isolated cells run in (perfgate.measure.isolate)
        self.precompile_s = 0.0  # seconds the session spent precompiling before its first cell
        # The paired cells whose launch-config picks the kept cache holds as an earlier run's cell timed them
        # (SessionPlan.find_picked): their two sides prepare at once. Keys: the cells' markers' keys.
        self.picked: set[str] = set()
        self.keys: dict[str, str] = {}
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
            record = self.pairing.run(self.job(spec, cell, options, remeasure), self.say, picked=cell.id in self.picked)
            self.keep_picks(cell, record)
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
            record_builder.in_session(record, self.run_id, unfit, remeasure, issue.reason if issue else "")
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

    def measure(self, cell: Cell, benchmark=None) -> dict:
        """Run one cell of the perf_registry zoo, stream its record, feed pytest-benchmark, and fail the test
        if the cell failed."""
        from perfgate.core import zoo
        from perfgate.plugin.bench_sink import BenchmarkSink

        spec = zoo.load(self.registry)[cell.model]
        sink = BenchmarkSink(benchmark, cell)
        record = self._run(spec, cell)
        self.ran[cell.id] = (spec, cell)
        self.keep_cost(record)
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

    def paired_verdict(self, records: list[dict], baseline: bool = True):
        """The paired verdict over this run's records (None unless --perf-against), its lines in the summary;
        `baseline`: whether a baseline judges the cells measured unpaired."""
        if self.pairing is None:
            return None
        from perfgate.ab.verdict import PairedVerdict

        self.paired = verdict = PairedVerdict.of(records, baseline)
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
