"""The end of a perf session, on the controller: read this run's records back from the results files, then
append them to the history, save them as a baseline and gate them, as the options ask. Imports no torch.

Each step runs whatever the one before it did (a history that cannot be written never stops the gate).
Exit status: 1 a regression, 2 unusable input (records, baseline), 3 a crash in perfgate (never 1).
"""

from __future__ import annotations

import re
import traceback
from typing import TYPE_CHECKING, Sequence

import pytest

from perfgate.core import exits
from perfgate.core.output import OutputError
from perfgate.core.records_file import RecordFileError, load_records
from perfgate.judge.baseline import BaselineError, save_baselines
from perfgate.store import history
from perfgate.store.history import HistoryError

if TYPE_CHECKING:  # annotations only: the plugin imports this module, never the reverse
    from perfgate.plugin.session import PerfSession


def finish(session, perf: PerfSession) -> None:
    """History, baseline and gate over this session's records, each step as asked by the options."""
    config = session.config
    save_dir, baseline = config.getoption("--perf-save-baseline"), config.getoption("--perf-baseline")
    history_db = config.getoption("--perf-history")
    if config.option.collectonly:  # nothing ran, so nothing is judged: a precompile step takes the gate's options too
        return
    if not (save_dir or baseline or history_db or perf.pairing is not None):
        return
    records = _step(session, perf, "read this run's records", lambda: _session_records(perf))
    if records is None:
        return
    if history_db and records:  # the controller alone writes: one writer for SQLite
        _step(session, perf, "append to the history", lambda: _append_history(perf, records, history_db))
    if save_dir:
        _step(session, perf, "write the baseline", lambda: _save_baseline(perf, records, save_dir))
    if baseline:
        interrupted = int(session.exitstatus) == int(pytest.ExitCode.INTERRUPTED)
        outcome = _step(session, perf, "gate the run", lambda: _gate(perf, records, baseline, interrupted))
        if outcome is not None:
            _exit_with(session, outcome.exit_code, perf.paired, records, perf.other_failures)
    elif perf.pairing is not None:  # paired without a baseline: the clocks alone are judged
        verdict = perf.paired_verdict(records, baseline=False)
        report_dir = config.getoption("--perf-report")
        if report_dir:
            _step(session, perf, "write the paired report", lambda: verdict.write_reports(report_dir))
        if not verdict.cells and not verdict.unjudged:  # every cell skipped (no CUDA for this torch, say): no pass
            perf.summary.append("perfgate paired: no cell was compared beside the base: nothing judged (exit 2)")
        _exit_with(session, exits.PASS if verdict.cells else exits.UNUSABLE, verdict, records, perf.other_failures)


def _gate(perf: PerfSession, records: list[dict], baseline, interrupted: bool):
    """Gate this run, in steps taken in turn: judge the records against the baseline; measure the cells a
    speedup rule tripped again, in this process with a fresh compile, and judge once more (the confirm
    round: a regression stands only where the same clock trips twice); profile every other flagged cell for
    the reader (why-artifacts, the gate unchanged); write the reports. A paired record's clocks are the paired
    verdict's, so the baseline judges the rest of it, and only a paired session's unpaired cells (data-parallel)
    can trip a speedup rule and be measured again; no why-artifacts there. An `interrupted` run (Ctrl-C,
    SIGTERM from a CI step's limit) measures nothing more: it is judged on what it measured, and pytest's own
    exit status (2) says it was cut short."""
    from pathlib import Path

    from perfgate.judge.gate import gate_run
    from perfgate.render.report_files import write_reports

    report_dir = perf.config.getoption("--perf-report")
    why_dir = str(Path(report_dir or ".perfgate") / "why")
    outcome = gate_run(records, baseline)  # a paired record's clocks are the pairing's (gate.baseline_rules_for)
    profiled: dict[str, dict] = {}
    if not interrupted:  # a paired session's tripped speedup rules are its unpaired (data-parallel) cells'
        _confirm_round(perf, outcome, why_dir, profiled)
    measures_again = not interrupted and perf.pairing is None
    if interrupted:
        perf.summary.append(
            "perfgate: the run was interrupted: no confirm round and no why-artifacts; a "
            "tripped speedup rule stands unconfirmed"
        )
    flagged = {finding.cell for report in outcome.reports for finding in report.regressions}
    for cell_id in flagged - set(profiled) if measures_again else ():
        if cell_id in perf.ran:  # flagged by another rule: profile it for the reader, gate unchanged
            perf.say(f"{cell_id}: flagged; writing why-artifacts")
            profiled[cell_id] = perf.measure_again(cell_id, why_dir, "why-artifacts")
    perf.summary += [f"why-artifacts for {cid}: {rec['why']['dir']}" for cid, rec in profiled.items() if rec.get("why")]
    paths = (Path(report_dir) / "report.md", Path(report_dir) / "report.json") if report_dir else (None, None)
    paired = perf.paired_verdict(records)
    if outcome.errors:
        perf.summary += [f"perfgate: cannot compare (exit {outcome.exit_code}): {error}" for error in outcome.errors]
        write_reports(outcome, *paths, paired=paired)  # the PR comment says why nothing was judged
    else:
        perf.summary += write_reports(outcome, *paths, paired=paired).splitlines()
    return outcome


def _confirm_round(perf: PerfSession, outcome, why_dir: str, profiled: dict[str, dict]) -> None:
    """The cells a speedup rule tripped, measured again (into `profiled`) and each report judged once more
    with them (gate.confirm), in place."""
    from perfgate.core.records_file import CONFIRM
    from perfgate.judge.gate import confirm, speedup_suspects

    for i, report in enumerate(outcome.reports):
        suspects = speedup_suspects(report)
        if not suspects:
            continue
        again = []
        for cell_id in suspects:
            if cell_id in perf.ran:  # under xdist the controller ran nothing: no confirm round
                perf.say(f"{cell_id}: a speedup rule tripped; measuring again to confirm")
                profiled[cell_id] = perf.measure_again(cell_id, why_dir, CONFIRM)
                again.append(profiled[cell_id])
        outcome.reports[i] = confirm(report, again)


def _exit_with(session, gate_exit: int, paired, records: Sequence[dict] = (), other_failures=()) -> None:
    """The session's exit status with the gate's and the paired verdict's: a regression shown by either is 1,
    whatever else the session saw, and so is a session whose own status is 1 (a cell failed: this tree's cell
    crashed or its numerics failed, which no later unsure may soften into a rerun), unless every failed cell of
    `records` is one perfgate's own paired engine failed to run, and no test but cells failed (`other_failures`,
    their node ids): that is a crash in perfgate, 3, never a verdict.
    Else the worst of them (2: unsure or unusable, never a pass)."""
    from perfgate.ab.verdict import combined_exit
    from perfgate.core.record_reading import engine_failed, unfinished

    code = gate_exit if paired is None else combined_exit(gate_exit, paired)
    # A stop is no cell's failure, nor is a known issue's (pytest xfails it)
    failed = [r for r in records if r.get("status") == "failed" and not unfinished(r) and not r.get("known_issue")]
    ours = bool(failed) and all(engine_failed(r) for r in failed) and not other_failures
    status = int(session.exitstatus)
    if code == exits.REGRESSION or (status == int(pytest.ExitCode.TESTS_FAILED) and not ours):
        session.exitstatus = exits.REGRESSION
    else:
        session.exitstatus = max(code, exits.BUG) if ours else max(status, code)


def _step(session, perf: PerfSession, what: str, action):
    """Run one session-end step; unusable input exits 2, a crash 3, and neither stops the next step."""
    try:
        return action()
    except (RecordFileError, BaselineError, HistoryError, OutputError) as err:
        perf.summary.append(f"perfgate: could not {what} (exit 2): {err}")
        session.exitstatus = max(int(session.exitstatus), exits.UNUSABLE)
    except Exception as err:  # noqa: BLE001 - a bug in perfgate: say so, keep going, exit 3 (never 1)
        perf.summary += traceback.format_exc().rstrip().splitlines()
        perf.summary.append(
            f"perfgate: internal error while trying to {what} (exit 3): "
            f"{type(err).__name__}: {err}; every record measured is in {perf.results_path}"
        )
        session.exitstatus = max(int(session.exitstatus), exits.BUG)
    return None


def _session_records(perf: PerfSession) -> list[dict]:
    # This session's file and its xdist workers' (<stem>.gwN.jsonl), not whatever else shares the stem
    # (a stray <stem>-crashed.jsonl beside it once stopped the session end with a traceback).
    stem = perf.results_path.stem
    ours = re.compile(rf"{re.escape(stem)}(\.gw\d+)?\.jsonl")
    files = sorted(path for path in perf.results_path.parent.glob(f"{stem}*.jsonl") if ours.fullmatch(path.name))
    return [r for r in load_records(files) if r.get("run_id") == perf.run_id]


def _append_history(perf: PerfSession, records: list[dict], db: str) -> None:
    added = history.append(db, records, commit=history.current_commit())
    perf.summary.append(f"history: {added} record(s) appended to {db}")


def _save_baseline(perf: PerfSession, records: list[dict], directory: str) -> None:
    perf.summary += [f"baseline written: {path}" for path in save_baselines([records], directory)]
