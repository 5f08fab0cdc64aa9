"""`perfgate ab`: the selected cells under two environments, A and B, in separate pytest processes that
alternate on one machine (A-1, B-1, A-2, B-2, ...), then B judged against A (perfgate.ab.process_verdict). Imports
no torch: each side's own interpreter runs its pytest (perfgate.ab.process_env says what a side is).

Everything lands in one directory as it happens, so a killed run keeps what it measured and
`perfgate ab --resume DIR` carries on with the processes not yet complete:

    manifest.json           the sides, the common pytest args, each process's state (rewritten atomically:
                            perfgate.ab.process_manifest writes, reads and checks it)
    results/A-1.jsonl ...   each process's records, streamed by the plugin as each cell finishes
    logs/A-1.log ...        each process's stdout and stderr
    cache/A, cache/B        each side's inductor cache (--perf-cache-dir), kept apart: empty at the start, so
                            a side's first process compiles cold (the verdict's compile time) and the rest
                            reuse it (3-10 s instead of 25-70 s a model on an H100); with --precompile N
                            (default 4) the first process compiles its cells N at once before timing them
    results/A-1.precompile.json   that precompile's first call of each cell (the verdict's compile time)
    worktrees/A             a side's git revision of this repository, where it names one
    report.md, report.json  the verdict

A process is `done` when its pytest ran to the end (exit 0, or 1: a cell failed, and its record says why),
`crashed` when it ended otherwise (its records count as they are: a cell it lost is a failure of that side),
and `interrupted` when this run was stopped while it ran; `--resume` re-runs interrupted and pending ones,
keeping an interrupted process's partial file beside as *.interrupted-N.jsonl.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Sequence

from perfgate.ab import process_env, process_report
from perfgate.ab.process_env import ABEnvironment, ABError
from perfgate.ab.process_manifest import (
    COMPLETE,
    check_processes,
    load_manifest,
    now_text,
    prepare,
    process_turns,
    resume_problem,
    save_manifest,
)
from perfgate.ab.process_rows import AB_SIDES, ABReport, Process
from perfgate.ab.process_verdict import judge_ab
from perfgate.core import exits
from perfgate.core.job import REFERENCE_CACHE
from perfgate.core.output import OutputError
from perfgate.core.records_file import RecordFileError, load_records, precompile_path

DEFAULT_PROCESSES = 3  # Student's q at df 2 (2 a side) is 22.3: a verdict needs 3 a side (docs/ab.md)
# A side's first process compiles its cells this many at once before timing them (--perf-precompile): the PR
# tier's 12 compiles took 2:52 so on an H100 (docs/time-to-verdict.md), one after another ~3x that.
DEFAULT_PRECOMPILE = 4
STOP_WAIT_S = 30  # how long a stopped run waits for its pytest to end before killing it


def default_out(kind: str = "ab") -> Path:
    return Path(".perfgate") / f"{kind}-{_dt.datetime.now(_dt.timezone.utc).strftime('%Y%m%dT%H%M%SZ')}"


# ---------------------------------------------------------------------------------------------- running


def command(manifest: dict, out: Path, run: dict) -> list[str]:
    side = manifest["sides"][run["side"]]
    # A side's later processes skip the numerics check its first complete process made (they cost their
    # timing, not the reference and the judge again); a run from before this key judged in every process.
    numerics = [] if run.get("judges_numerics", True) else ["--perf-numerics=off"]
    # Its first process also compiles the side's cells several at once before timing them (a run from before
    # this key compiled each cell in its own turn).
    precompile = [f"--perf-precompile={run['precompile']}"] if run.get("precompile") else []
    # Each side's pytest starts in its own tree, where the default reference cache is a folder of its own (and a
    # bisect probe's worktree goes with the probe): one where the run started serves both sides and every probe,
    # each reference keyed by everything it depends on (perfgate.measure.reference). A user's own is kept.
    given = [*manifest["common_args"], *side["args"]]
    own = any(arg.partition("=")[0] == "--perf-reference-cache" for arg in given)
    references = (
        [] if own or "cwd" not in manifest else [f"--perf-reference-cache={Path(manifest['cwd']) / REFERENCE_CACHE}"]
    )
    return [
        side["python"],
        "-m",
        "pytest",
        *manifest["common_args"],
        *side["args"],
        f"--perf-results={(out / run['results']).resolve()}",
        f"--perf-cache-dir={(out / 'cache' / run['side']).resolve()}",
        *numerics,
        *precompile,
        *references,
    ]


def _set_aside(out: Path, run: dict) -> None:
    """Keep an interrupted process's partial records (what it measured), out of the verdict's way."""
    results = out / run["results"]
    for n in range(1, 1000):
        kept = results.with_name(f"{results.stem}.interrupted-{n}.jsonl")
        if not kept.exists():
            break
    for path in _results_files(out, run):
        path.rename(kept if path == results else kept.with_name(f"{kept.stem}.{path.name}"))
    precompile_path(results).unlink(missing_ok=True)  # its re-run precompiles into an emptied cache again


def _results_files(out: Path, run: dict) -> list[Path]:
    """A process's results: its file and, under xdist, one per worker (<stem>.gwN.jsonl)."""
    results = out / run["results"]
    return sorted(
        p
        for p in results.parent.glob(f"{results.stem}*.jsonl")
        if p == results or (p.name.startswith(f"{results.stem}.gw") and "interrupted" not in p.name)
    )


def _cache_is_cold(manifest: dict, out: Path, side: str) -> bool:
    """Empty a side's cache while none of its processes has completed (a re-run of an interrupted first
    process must compile cold again); then say whether it is empty."""
    cache = out / "cache" / side
    if not any(r["side"] == side and r["state"] in COMPLETE for r in manifest["runs"]):
        shutil.rmtree(cache, ignore_errors=True)
    cache.mkdir(parents=True, exist_ok=True)
    return not any(cache.iterdir())


class _Stopped(KeyboardInterrupt):
    """SIGTERM (a CI job cancelled, `timeout`): stop as Ctrl-C does, marking the running process interrupted."""


class _Stopper:
    """The SIGTERM handler while processes run: raises _Stopped, except while a child is being started (a
    raise inside Popen would leave that child running with nothing to stop it), when it waits until
    `check` is called with the child in hand. (Blocking the signal instead is inherited by the child.)"""

    def __init__(self):
        self.starting = False
        self.pending = False

    def __call__(self, signum, frame):
        if self.starting:
            self.pending = True
            return
        raise _Stopped(f"signal {signum}")

    @contextlib.contextmanager
    def starting_child(self):
        self.starting = True
        try:
            yield
        finally:
            self.starting = False

    def check(self) -> None:
        if self.pending:
            self.pending = False
            raise _Stopped("SIGTERM while starting a process")


def run_one(
    manifest: dict, out: Path, run: dict, progress: Callable[[str], None], stopper: _Stopper | None = None
) -> None:
    """Run one process to its end, keeping the manifest current; re-raises when this run is stopped."""
    if run["state"] in ("running", "interrupted") or _results_files(out, run):
        _set_aside(out, run)
    first = not any(r["side"] == run["side"] and r["state"] in COMPLETE for r in manifest["runs"])
    run.update(
        state="running",
        rc=None,
        cold=_cache_is_cold(manifest, out, run["side"]),
        judges_numerics=first,
        precompile=manifest.get("precompile", 0) if first else 0,
        started=now_text(),
        finished=None,
    )
    save_manifest(out, manifest)
    started, child = time.monotonic(), None
    try:
        with stopper.starting_child() if stopper else contextlib.nullcontext():
            child = _start(manifest, out, run)
        if stopper:
            stopper.check()
        rc = child.wait()
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (_Stopped)
        if child is not None:
            _stop(child)
        run.update(state="interrupted", finished=now_text())
        save_manifest(out, manifest)
        raise
    run.update(state="done" if rc in (0, 1) else "crashed", rc=rc, finished=now_text())
    save_manifest(out, manifest)
    progress(
        f"{run['name']} {run['state']} (exit {rc}) in {time.monotonic() - started:.0f} s: "
        f"{_count_records(out, run)} record(s); log {out / run['log']}"
    )


def _start(manifest: dict, out: Path, run: dict) -> subprocess.Popen:
    """The process's pytest, its output to its log."""
    side = manifest["sides"][run["side"]]
    (out / "logs").mkdir(parents=True, exist_ok=True)
    with open(out / run["log"], "w", encoding="utf-8") as log:
        return subprocess.Popen(
            command(manifest, out, run),
            cwd=side["root"],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=process_env.side_environ(ABEnvironment.from_json(side), Path(side["import_root"])),
        )


def _stop(child: subprocess.Popen) -> None:
    child.terminate()
    try:
        child.wait(timeout=STOP_WAIT_S)
    except subprocess.TimeoutExpired:
        child.kill()
        child.wait()


def _count_records(out: Path, run: dict) -> int:
    try:
        return len(load_records(_results_files(out, run)))
    except RecordFileError:
        return 0


def run_pending(manifest: dict, out: Path, progress: Callable[[str], None]) -> None:
    """Every process not complete, in the planned order."""
    todo = [r for r in manifest["runs"] if r["state"] not in COMPLETE]
    stopper = _Stopper()
    previous = signal.signal(signal.SIGTERM, stopper)
    try:
        for n, run in enumerate(todo, 1):
            progress(f"{run['name']} ({n}/{len(todo)}) starting: {manifest['sides'][run['side']]['python']}")
            run_one(manifest, out, run, progress, stopper)
    finally:
        signal.signal(signal.SIGTERM, previous)


# ---------------------------------------------------------------------------------------------- verdict


def complete_processes(manifest: dict, out: Path) -> list[Process]:
    processes = []
    for run in manifest["runs"]:
        if run["state"] not in COMPLETE:
            continue
        try:
            records = load_records(_results_files(out, run))
        except RecordFileError as err:  # a file the plugin wrote and cannot be read: nothing to judge it by
            raise ABError(f"process {run['name']}: {err}") from None
        cold = bool(run["cold"])
        processes.append(Process(run["side"], run["rep"], tuple(records), cold, _precompiled(out, run) if cold else {}))
    return processes


def _precompiled(out: Path, run: dict) -> dict[str, float]:
    """A process's precompile: cell id -> its first call, s (the cells it compiled; none without one)."""
    try:
        lines = json.loads(precompile_path(out / run["results"]).read_text(encoding="utf-8"))
    except (OSError, ValueError):  # no precompile ran (a missing file), or a broken one: no figure from it
        return {}
    return {
        line["cell"]: line["first_call_s"]
        for line in lines
        if isinstance(line, dict) and line.get("status") == "ok" and "first_call_s" in line
    }


def verdict(manifest: dict, out: Path, rules: Sequence | None = None) -> ABReport:
    """The run judged by `rules` (default: process_rules.ab_rules(); perfgate bisect passes its own thresholds)."""
    descriptions = {label: ABEnvironment.from_json(side).describe() for label, side in manifest["sides"].items()}
    report = judge_ab(complete_processes(manifest, out), rules=rules, descriptions=descriptions)
    for run in manifest["runs"]:
        if run["state"] == "crashed":
            report.notes.append(
                f"process {run['name']} crashed (exit {run['rc']}); its lost cells count as "
                f"failures of side {run['side']}: see {out / run['log']}"
            )
        elif run["state"] not in COMPLETE:
            report.notes.append(f"process {run['name']} is {run['state']}: perfgate ab --resume {out} runs it")
    return report


def run_ab(
    out: Path,
    progress: Callable[[str], None],
    *,
    sides: Sequence[ABEnvironment] = (),
    common: Sequence[str] = (),
    processes: int | None = None,
    resume: bool = False,
    cwd: Path | None = None,
    rules: Sequence | None = None,
    precompile: int = 0,
) -> ABReport:
    """A new A/B run in `out` (or, with resume, the one there, extended to `processes` a side when given),
    run to its end and judged."""
    check_processes(processes)
    if resume:
        manifest = load_manifest(out)
        problem = resume_problem(manifest)
        if problem:
            raise ABError(
                f"{out / 'manifest.json'}: cannot resume here: {problem}; `perfgate ab --judge {out}` judges it"
            )
        if processes is not None and processes != manifest["processes"]:
            manifest["runs"] = process_turns(max(processes, manifest["processes"]), manifest["runs"])
            manifest["processes"] = max(processes, manifest["processes"])
            save_manifest(out, manifest)
    else:
        manifest = prepare(
            out,
            sides,
            common,
            DEFAULT_PROCESSES if processes is None else processes,
            (cwd or Path.cwd()).resolve(),
            precompile,
        )
    for label in AB_SIDES:
        side = manifest["sides"][label]
        progress(
            f"side {label}: {ABEnvironment.from_json(side).describe()} (torch {side['versions'].get('torch')}, "
            f"{side['tests']} test(s))"
        )
    run_pending(manifest, out, progress)
    return verdict(manifest, out, rules)


def report_and_exit(
    command: str,
    out: Path,
    judged: Callable[[], ABReport],
    markdown: str | None,
    json_path: str | None,
    html: str | None,
) -> int:
    """The end of `perfgate ab`: the verdict `judged()` returns, its reports written (and
    its Markdown printed), and its exit code; 2 where the run cannot compare or was stopped, saying so and,
    when stopped, where its records are and how to carry on."""
    try:
        report = judged()
        sys.stdout.write(process_report.write(report, out, markdown, json_path, html))
    except (ABError, OutputError) as err:
        print(f"perfgate {command}: cannot compare: {err}", file=sys.stderr)
        return exits.UNUSABLE
    except KeyboardInterrupt:
        print(
            f"perfgate {command}: stopped; what was measured is in {out}: perfgate ab --resume {out} carries on",
            file=sys.stderr,
        )
        return exits.UNUSABLE
    return report.exit_code
