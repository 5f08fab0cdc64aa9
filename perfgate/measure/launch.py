"""Starting and watching the processes that run jobs (perfgate.core.job): a warm cell process, the ranks of a
data-parallel cell, a fresh process compiling from cache artifacts, precompile processes. One way to start
them (`spawn`), one supervision loop (`supervise`) and one way to end them (`kill_groups`). Imports no torch.

Every such process is `python -m perfgate.measure.child DIR [--rank R]`: it reads jobs from its stdin, one JSON
line each, and reports on job n through DIR/events-n.jsonl (progress lines, checkpoints, compiled round times,
its record or result). It runs in a session of its own, so that a kill takes its whole group (inductor's
compile workers too), and it asks Linux to kill it when its parent dies by any means (PR_SET_PDEATHSIG): no
signal that ends pytest leaves a process compiling or timing on the GPU beside the next run (seen on an H100
lease, 2026-11-24).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Callable, Sequence

POLL_S = 0.5
# A stage that runs this long says so again every this many seconds, so a slow max-autotune compile can be
# told from a hang while it runs.
HEARTBEAT_S = 60.0
# The stderr lines of a dead child echoed to this process's stderr (pytest shows them with the failure).
STDERR_TAIL_LINES = 40
CHILD_MODULE = "perfgate.measure.child"
_PERFGATE_ROOT = str(Path(__file__).resolve().parents[2])  # a child must import this copy


def _quiet(_message: str) -> None:
    pass


def import_path() -> list[str]:
    """This process's sys.path, absolute, for a child to import from where this process imports, as
    multiprocessing's spawn does (a test's registry module sits in a directory pytest put on sys.path)."""
    return [os.path.abspath(p) if p else os.getcwd() for p in sys.path]


def first_gpu(device: str, gpus: int) -> tuple[str, dict[str, str]]:
    """(`device` as a child names it, the environment that lists the child's GPU first): "cuda:2" of 4 GPUs ->
    ("cuda:0", {"CUDA_VISIBLE_DEVICES": "2,0,1,3"}); any other device, or one GPU, unchanged and no environment.

    Inductor's cache keys a compiled graph by its device index: a graph compiled on cuda:2 is not found by a
    process that runs the cell on cuda:0, so on several GPUs the precompile served only the cells run on the
    GPU they were compiled on (docs/ci.md). A child that sees its own GPU as cuda:0, whichever GPU that is,
    finds what every other compiled. An empty CUDA_VISIBLE_DEVICES is no GPU (`gpus` 0): left as it is."""
    kind, _, index = device.partition(":")
    if kind != "cuda" or not index.isdigit() or gpus < 2:
        return device, {}
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [v.strip() for v in visible.split(",") if v.strip()] if visible is not None else [str(i) for i in range(gpus)]
    k = int(index)
    if k >= len(ids):
        return device, {}
    return "cuda:0", {"CUDA_VISIBLE_DEVICES": ",".join([ids[k], *ids[:k], *ids[k + 1 :]])}


def child_environ(**extra: str) -> dict[str, str]:
    """This process's environment for a child, with this checkout first on PYTHONPATH (an editable install
    of another checkout must not win) and `extra` variables set."""
    path = os.pathsep.join(filter(None, [_PERFGATE_ROOT, os.environ.get("PYTHONPATH")]))
    return {**os.environ, **extra, "PYTHONPATH": path}


class Events:
    """A child's event file for one job, read as it grows: whole lines only (a line being written waits)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0
        self.last_stage, self.checkpoint, self.record, self.result = "starting the process", None, None, None
        self.started_at: float | None = None  # Unix time the child took the job

    def read(self, progress: Callable[[str], None] = _quiet, record_compiled=None) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.decode("utf-8", errors="replace").splitlines():
            event = json.loads(line)
            if "progress" in event:
                self.last_stage = event["progress"]
                progress(event["progress"])
            elif "compiled_ms" in event:
                if record_compiled is not None:
                    record_compiled(event["compiled_ms"])
            elif "checkpoint" in event:
                self.checkpoint = event["checkpoint"]
            elif "record" in event:
                self.record = event["record"]
            elif "result" in event:
                self.result = event["result"]
            elif "started" in event:
                self.started_at = event["started"]


class Proc:
    """One child process: its Popen, its directory (events, stderr) and what to call it in a reason."""

    def __init__(self, popen: subprocess.Popen, directory: Path, label: str, stderr: Path):
        self.popen, self.directory, self.label, self.stderr = popen, directory, label, stderr
        self.sent = 0  # jobs sent so far; job n reports through events-n.jsonl

    def send(self, job_json: str, last: bool = False) -> Events:
        """Hand the child a job (perfgate.core.job.Job.to_json); `last`: it gets no more (it exits after)."""
        n, self.sent = self.sent, self.sent + 1
        self.popen.stdin.write(json.dumps({"n": n, "job": json.loads(job_json)}) + "\n")
        self.popen.stdin.flush()
        if last:
            self.popen.stdin.close()
        return Events(self.directory / f"events-{n}.jsonl")

    def poll(self) -> int | None:
        return self.popen.poll()

    @property
    def pid(self) -> int:
        return self.popen.pid


def spawn(directory: Path, label: str, rank: int | None = None, **environ: str) -> Proc:
    """Start `python -m perfgate.measure.child DIR` in a session of its own, its stdout and stderr to a file in
    `directory`, with `environ` set for it."""
    directory.mkdir(parents=True, exist_ok=True)
    name = label.replace(" ", "-")
    stderr = directory / f"{name}.stderr"
    argv = [sys.executable, "-m", CHILD_MODULE, str(directory)] + ([] if rank is None else ["--rank", str(rank)])
    with stderr.open("w", encoding="utf-8") as sink:  # a file, not a pipe: a chatty child never blocks on it
        popen = subprocess.Popen(
            argv,
            env=child_environ(**environ),
            stdin=subprocess.PIPE,
            stdout=sink,
            stderr=sink,
            text=True,
            start_new_session=True,
        )
    return Proc(popen, directory, label, stderr)


def supervise(
    procs: Sequence[Proc],
    *,
    limit_s: float,
    events: Events | None = None,
    cell_id: str = "",
    progress: Callable[[str], None] = _quiet,
    record_compiled=None,
    checkpoint: Callable[[dict], None] | None = None,
    finished: Callable[[], bool] | None = None,
    deaths_fail: bool = True,
    started: float | None = None,
) -> str | None:
    """Watch `procs` until `finished()` (default: every one ended), relaying the reporting child's `events`
    (progress lines, compiled round times, checkpoints) and saying so every HEARTBEAT_S while a stage runs
    long. Returns why it failed: a child that died (when `deaths_fail`), every child gone without finishing,
    or the time limit (measured from `started`, default now); None when finished. Never kills anything
    itself, except on an interrupt (Ctrl-C, or SIGTERM turned into one), when every child's group goes."""
    finished = finished or (lambda: all(p.poll() is not None for p in procs))
    events = events or Events(Path(os.devnull))
    start = time.monotonic() if started is None else started
    stage_seen, stage_since, told, kept = events.last_stage, start, start, None
    try:
        with sigterm_interrupts():
            while True:
                events.read(progress, record_compiled)
                if checkpoint is not None and events.checkpoint is not None and events.checkpoint is not kept:
                    kept = events.checkpoint
                    checkpoint(kept)
                if finished():
                    return None
                stage = stage_of(events.last_stage, cell_id)
                dead = [p for p in procs if p.poll() not in (None, 0)] if deaths_fail else []
                if dead:
                    return f"{dead[0].label} died ({death(dead[0].poll())}) while {stage}{last_words(dead[0])}"
                if all(p.poll() is not None for p in procs):
                    # What they wrote just before exiting: read above, their last lines may not have been there
                    # yet (a 4-rank CPU cell under load lost its record so, 2026-11-27).
                    events.read(progress, record_compiled)
                    if finished():
                        return None
                    return f"{procs[0].label} ended while {stage}, with nothing to report{last_words(procs[0])}"
                now = time.monotonic()
                if now - start >= limit_s:
                    return f"timed out after {limit_s:g} s while {stage}"
                if events.last_stage != stage_seen:
                    stage_seen, stage_since, told = events.last_stage, now, now
                elif now - told >= HEARTBEAT_S:
                    told = now
                    progress(
                        f"{cell_id}: still {stage} after {now - stage_since:.0f} s (cell limit {limit_s:g} s, "
                        f"{now - start:.0f} s used)"
                    )
                time.sleep(POLL_S)
    except BaseException:  # Ctrl-C, a CI step's timeout: leave no child compiling or timing
        kill_groups(*procs)
        raise


def last_words(proc: Proc) -> str:
    """ "; its last words: ..." from a dead child's stderr, also echoed to this process's stderr (pytest shows
    it beside the failed test)."""
    tail = stderr_tail(proc.stderr)
    print("\n".join(tail), file=sys.stderr)
    return f"; its last words: {tail[-1][:300]}" if tail else ""


def stage_of(message: str, cell_id: str) -> str:
    """ "compiling (inductor_default)" from the progress line "<cell id>: compiling (inductor_default)"."""
    return message[len(cell_id) + 2 :] if cell_id and message.startswith(f"{cell_id}: ") else message


def death(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def stderr_tail(path: Path) -> list[str]:
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-STDERR_TAIL_LINES:]


def kill_groups(*procs) -> None:
    """Each child's whole process group (its own session: inductor's compile workers too), if it still runs;
    every group is killed before any is waited for. An interrupted precompile of 3 GPU children took ~21 s
    to end on an H100 (2026-11-24), ~2 s on a CPU box: a killed process that held a GPU context ends only
    once the driver has freed it, and killing each child after the last one ended would add those waits up."""
    popens = [getattr(p, "popen", p) for p in procs]
    for child in popens:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
    for child in popens:
        child.wait()
        with contextlib.suppress(OSError, AttributeError):
            child.stdin and child.stdin.close()


class Terminated(KeyboardInterrupt):
    """SIGTERM while children run: an interrupt, so their groups are killed on the way out and pytest ends
    the session as after Ctrl-C (what was measured is already in the results file)."""


@contextlib.contextmanager
def sigterm_interrupts():
    """SIGTERM raises Terminated here, where the default would end this process with its children orphaned.
    Only in the main thread with the default handler in place: a handler someone set is theirs."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return

    def interrupt(_signum, _frame):
        raise Terminated("SIGTERM")

    signal.signal(signal.SIGTERM, interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
