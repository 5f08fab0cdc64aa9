"""The workers of a paired cell's process pair (perfgate.ab.duet coordinates them): one warm process a side
(`python -m perfgate.measure.duet`), spoken to on its stdin and read line by line with a deadline; the pair
started at once, kept from cell to cell, renewed for a second process pair from spares started while nothing
was timed; a side whose perfgate predates the engine started again on this tree's (the overlay). Imports no
torch.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable

from perfgate.ab.sides import Side
from perfgate.core.children import measuring_environ

PROTOCOL = 1  # the worker's (perfgate.measure.duet.PROTOCOL); one of another is refused
WORKER_MODULE = "perfgate.measure.duet"
START_LIMIT_S = 300.0  # a worker's interpreter start and imports
ROUND_LIMIT_S = 300.0  # one request's answer


class WorkerGone(RuntimeError):
    """A worker died, hung past its limit, or spoke another protocol."""


class Worker:
    """One side's warm process; requests on its stdin, replies read line by line with a deadline."""

    def __init__(self, side: Side, directory: Path, pythonpath: list[str], greet: bool = True, cwd: str = ""):
        directory.mkdir(parents=True, exist_ok=True)
        self.side, self.stderr_path = side, directory / f"{side.name}.stderr"
        path = os.pathsep.join(worker_path(side, pythonpath))
        env = measuring_environ({**side.env, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"})
        with self.stderr_path.open("a", encoding="utf-8") as sink:
            self.popen = subprocess.Popen(
                [side.python, "-m", WORKER_MODULE],
                cwd=cwd or side.root,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=sink,
                start_new_session=True,
            )
        self.buffer = b""
        self.finish_asked = False  # "finish" sent for the cell in hand: its record is the next answer
        self.hello: dict = {}
        if greet:
            self.greet()

    def greet(self) -> None:
        """Wait for the worker's hello (its interpreter started and its imports done)."""
        self.hello = self.expect("hello", START_LIMIT_S)

    def send(self, message: dict) -> None:
        self.finish_asked = message.get("op") == "finish" or (self.finish_asked and "job" not in message)
        try:
            self.popen.stdin.write((json.dumps(message) + "\n").encode())
            self.popen.stdin.flush()
        except (BrokenPipeError, OSError) as err:
            raise WorkerGone(f"side {self.side.name}'s process is gone{self.last_words()}") from err

    def expect(
        self, key: str | tuple[str, ...], limit_s: float, progress: Callable[[str], None] = lambda _m: None
    ) -> dict:
        """The next message carrying `key` (or one of several) or a {"record"}: the cell ended, failed or
        finished."""
        deadline = time.monotonic() + limit_s
        keys = (key,) if isinstance(key, str) else key
        while True:
            message = self._line(deadline)
            if "progress" in message:
                progress(f"[{self.side.name}] {message['progress']}")
            elif "record" in message or any(k in message for k in keys):
                return message

    def _line(self, deadline: float) -> dict:
        fd = self.popen.stdout.fileno()
        with selectors.DefaultSelector() as selector:
            selector.register(fd, selectors.EVENT_READ)
            while b"\n" not in self.buffer:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise WorkerGone(f"side {self.side.name} answered nothing for the limit{self.last_words()}")
                if not selector.select(min(left, 5.0)):
                    continue
                chunk = os.read(fd, 1 << 16)
                if not chunk:
                    try:
                        self.popen.wait(timeout=30)
                        ended = f"ended (exit {self.popen.returncode})"
                    except subprocess.TimeoutExpired:  # a hung teardown (CUDA's, say): gone all the same, and
                        ended = "closed its output and did not exit in 30 s"  # this side's failure, not the other's
                    raise WorkerGone(f"side {self.side.name}'s process {ended}{self.last_words()}")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return json.loads(line)

    def last_words(self) -> str:
        lines = [x for x in self.stderr_path.read_text(errors="replace").splitlines() if x.strip()]
        return f"; its last words: {lines[-1][:300]}" if lines else ""

    def close(self) -> None:
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        self.popen.wait()


def worker_path(side: Side, computed: list[str]) -> list[str]:
    """A worker's PYTHONPATH: `computed` (the side's root first, or the overlay and then the root), with the
    side's own PYTHONPATH (--perf-against-env or --perf-b-env PYTHONPATH=...) right after its root. Set whole
    over the variable, `computed` alone dropped it: an upgrade's old release on A's PYTHONPATH would have run
    the new one, an A/A that passes."""
    own = [entry for entry in side.env.get("PYTHONPATH", "").split(os.pathsep) if entry]
    at = computed.index(side.root) + 1 if side.root in computed else min(1, len(computed))
    rest = [entry for entry in computed[at:] if entry not in own]
    return [*computed[:at], *own, *rest]


def import_path(side: Side, here_root: str, path: list[str]) -> list[str]:
    """A side's PYTHONPATH: its root first, then this process's path entries that are neither this tree nor
    an installation (site-packages, the standard library): a test's registry directory, say. The side's own
    interpreter brings its own packages."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    keep, here = [side.root], os.path.realpath(here_root)  # a symlinked checkout is still this tree
    for entry in path:
        entry = os.path.abspath(entry or os.getcwd())
        if (
            os.path.realpath(entry) == here
            or "-packages" in entry
            or any(entry.startswith(p + os.sep) for p in prefixes)
        ):
            continue
        if entry not in keep:
            keep.append(entry)
    return keep


class Duet:
    """The two sides' workers for a session: started on first use (or taken from the spares), renewed for a
    second process pair and after a failed cell, closed at the end. `overlay` puts this tree's engine above a
    side whose own perfgate predates the paired engine (its zoo and tests stay its own)."""

    def __init__(self, a: Side, b: Side, directory: Path, here_root: str, path: list[str], engine: str):
        self.sides, self.directory, self.here_root, self.path, self.engine = (a, b), directory, here_root, path, engine
        self.workers: dict[str, Worker] = {}
        # A standby process a side, started while nothing is timed, that the next fresh process pair takes: a
        # worker's interpreter and imports took ~10-20 s on a GPU runner's host (2 x H200, 2026-11-27), paid
        # before every second process pair (3 of a warm A/A's 12 cells there; every cell of a red run).
        self.spares: dict[str, Worker] = {}
        self.notes: dict[str, str] = {}
        self.first = "a"  # the side prepared first: its compiles fill the shared cache (tools/probes may swap it)

    def worker(self, side: Side) -> Worker:
        return self.start(side)[0]

    def start(self, *sides: Side) -> list[Worker]:
        """The live workers of `sides`: a side's spare where it has one, else started, all at once (started one
        after the other, a fresh process pair cost ~20 s more before its cell began)."""
        fresh: dict[str, Worker] = {}
        try:
            for side in sides:
                live = self.workers.get(side.name)
                if live is None or live.popen.poll() is not None:
                    spare = self.spares.pop(side.name, None)
                    fresh[side.name] = spare if spare is not None and spare.popen.poll() is None else self._new(side)
            for side in sides:
                if side.name in fresh:
                    worker = fresh.pop(side.name)
                    self.workers[side.name] = worker if worker.hello else self._greeted(worker)
        finally:
            for worker in fresh.values():  # a side failed to start: the other's fresh process goes too
                worker.close()
        return [self.workers[side.name] for side in sides]

    def spawn_spares(self) -> None:
        """Start a spare for each side that has none, not waiting for it: its imports overlap an untimed stage
        (a precompile, a cell's preparation). `greet_spares` waits for them before anything is timed."""
        for side in self.sides:
            spare = self.spares.get(side.name)
            if spare is None or spare.popen.poll() is not None:
                self.spares[side.name] = self._new(side)

    def greet_spares(self) -> None:
        """Wait for the spares' hello, so that no import runs beside a timed round; a spare that fails to start
        is dropped (the next process pair starts its own, and its error is raised there)."""
        for name, spare in list(self.spares.items()):
            if spare.hello:
                continue
            try:
                self.spares[name] = self._greeted(spare)
            except WorkerGone:
                spare.close()
                del self.spares[name]

    def _new(self, side: Side, greet: bool = False) -> Worker:
        """A fresh worker of `side`, on this tree's engine where the side was found to predate it."""
        if side.name not in self.notes:
            return Worker(side, self.directory, import_path(side, self.here_root, self.path), greet=greet)
        overlay = self.directory / "engine-overlay"
        overlay.mkdir(parents=True, exist_ok=True)
        link = overlay / "perfgate"
        if not link.exists():
            link.symlink_to(self.engine)
        # Started in the overlay: `python -m` puts its working directory first on the path, and the side's own
        # root holds its old perfgate.
        path = [str(overlay), *import_path(side, self.here_root, self.path)]
        return Worker(side, self.directory, path, greet=greet, cwd=str(overlay))

    def _greeted(self, worker: Worker) -> Worker:
        """`worker` once it said hello in this engine's protocol; a side whose perfgate predates the paired
        engine is started again on this tree's engine (the overlay)."""
        side = worker.side
        try:
            worker.greet()
        except WorkerGone as err:
            if "No module named" not in str(err) and "perfgate.measure.duet" not in str(err):
                worker.close()  # hung past its limit, perhaps: it must not outlive the error
                raise
            self.notes[side.name] = (
                f"side {side.name} predates the paired engine: its zoo and tests ran on this tree's engine"
            )
            try:
                worker = self._new(side, greet=True)  # and its spares start there too
            except WorkerGone:
                del self.notes[side.name]
                raise
        if worker.hello.get("hello", {}).get("protocol") != PROTOCOL:
            worker.close()
            raise WorkerGone(f"side {side.name} speaks protocol {worker.hello}; this engine speaks {PROTOCOL}")
        return worker

    def renew(self) -> None:
        """End the process pair in hand; the next `start` takes the spares."""
        for worker in self.workers.values():
            worker.close()
        self.workers = {}

    def close(self) -> None:
        self.renew()
        for spare in self.spares.values():
            spare.close()
        self.spares = {}


def steps_sides(worker: Worker) -> bool:
    """Whether the worker's engine steps only the wall sides a request names (its hello says so)."""
    return bool(hello_of(worker).get("wall_sides"))


def holds(duet: Duet) -> bool:
    """Whether both sides' engines can hold a job's first compiled call for its turn (their hello says "holds")."""
    return all(hello_of(worker).get("holds") for worker in duet.start(*duet.sides))


def layouts_of(duet: Duet, variant: str) -> bool:
    """Whether a process pair's device rounds take fresh memory layouts (perfgate.measure.layout): both sides'
    engines can (their hello says "relayout"; a base older than that keeps one layout a process, and so must B),
    and the compiled step replays no CUDA graph, whose private memory pool no layout moves."""
    from perfgate.core.matrix import VARIANTS

    graphs = variant in VARIANTS and VARIANTS[variant].cuda_graphs
    return not graphs and all(hello_of(duet.worker(side)).get("relayout") for side in duet.sides)


def hello_of(worker: Worker) -> dict:
    """What the worker's engine said it can do when it started ({} from a test's stand-in)."""
    return (getattr(worker, "hello", None) or {}).get("hello", {})


def finish(worker: Worker, progress: Callable[[str], None], solo: bool = False) -> dict:
    """The worker's record of its cell, asking for it unless already asked. What a side does after its rounds
    (counts, the host probe, FLOPs, the record) is timed against nothing of the other side's, so where both
    sides prepared at once they also finish at once (~25 s of the warm tier's minute of finishing, 23ebdea2).
    Not so where the cache was cold: B then times a warm compile, which A's counting pass would slow."""
    if not worker.finish_asked:
        worker.send({"op": "finish", "solo": solo})
    return worker.expect("record", START_LIMIT_S + ROUND_LIMIT_S, progress)["record"]
