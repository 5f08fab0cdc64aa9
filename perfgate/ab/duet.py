"""The coordinator of a paired cell: a warm worker process per side (perfgate.measure.duet), both holding the
cell compiled and warm on one GPU, their timed rounds alternated in an order drawn at random for each pair.
A drift of the host's speed over seconds to minutes then hits both sides of a pair alike. Imports no torch.

A cell: side A (the base) is prepared first, so its compiles fill the shared inductor cache and B finds its
unchanged graphs there: the same compiled code and autotune picks on both sides. Then looks, each of
WALL_PAIRS wall rounds, HOST_PAIRS host rounds and (on a GPU) one profiled block of DEVICE_ROUNDS per side,
until every rule is decided (perfgate.ab.paired) or LOOKS are spent. A look after a process pair's first
measures only the clocks with a rule still unsure (the host clock, shown and never judged, only in the first).
A cell still unsure, or showing a regression, then gets a second process pair (fresh processes, B prepared
first now that the cache is warm), up to DUETS: a regression must show in both (paired.across_pairs). What is
still unsure after that stays unsure: it never passes.
"""

from __future__ import annotations

import json
import math
import os
import random
import selectors
import signal
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from typing import Callable

from perfgate.ab import paired
from perfgate.ab.sides import Side

PROTOCOL = 1
WORKER_MODULE = "perfgate.measure.duet"
WALL_PAIRS = 12  # wall round pairs a look; a round is ~50 ms of each of eager and compiled
# Host round pairs in a process pair's first look (the host clock is shown, never judged: its lines were
# +-6-23 % under every estimator); a round is 5 single steps of each, its fastest kept. 6 pairs cost 1:22 of
# a warm 12-cell A/A's 12:08 (2xH200 23ebdea2, 2026-11-27); 3 show the same figure at half that.
HOST_PAIRS = 3
DEVICE_ROUNDS = 4  # profiled rounds a side a look, in one profiler session (device time repeats to 0.1 %)
LOOKS = 3  # looks a process pair
DUETS = 2  # process pairs a cell, at most
START_LIMIT_S = 300.0  # a worker's interpreter start and imports
ROUND_LIMIT_S = 300.0  # one request's answer
CLOCKS = ("wall", "host", "device")


class WorkerGone(RuntimeError):
    """A worker died, hung past its limit, or spoke another protocol."""


class Worker:
    """One side's warm process; requests on its stdin, replies read line by line with a deadline."""

    def __init__(self, side: Side, directory: Path, pythonpath: list[str], greet: bool = True, cwd: str = ""):
        directory.mkdir(parents=True, exist_ok=True)
        self.side, self.stderr_path = side, directory / f"{side.name}.stderr"
        env = {**os.environ, **side.env, "PYTHONPATH": os.pathsep.join(pythonpath), "PYTHONUNBUFFERED": "1"}
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

    def expect(self, key: str, limit_s: float, progress: Callable[[str], None] = lambda _m: None) -> dict:
        """The next message carrying `key` (or a {"record"}: the cell ended, failed or finished)."""
        deadline = time.monotonic() + limit_s
        while True:
            message = self._line(deadline)
            if "progress" in message:
                progress(f"[{self.side.name}] {message['progress']}")
            elif key in message or "record" in message:
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
                    self.popen.wait(timeout=30)
                    raise WorkerGone(
                        f"side {self.side.name}'s process ended (exit {self.popen.returncode}){self.last_words()}"
                    )
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


def import_path(side: Side, here_root: str, path: list[str]) -> list[str]:
    """A side's PYTHONPATH: its root first, then this process's path entries that are neither this tree nor
    an installation (site-packages, the standard library): a test's registry directory, say. The side's own
    interpreter brings its own packages."""
    prefixes = {sys.prefix, sys.base_prefix, sys.exec_prefix}
    keep = [side.root]
    for entry in path:
        entry = os.path.abspath(entry or os.getcwd())
        if entry == here_root or "-packages" in entry or any(entry.startswith(p + os.sep) for p in prefixes):
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

    def _new(self, side: Side) -> Worker:
        return Worker(side, self.directory, import_path(side, self.here_root, self.path), greet=False)

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
            overlay = self.directory / "engine-overlay"
            overlay.mkdir(parents=True, exist_ok=True)
            link = overlay / "perfgate"
            if not link.exists():
                link.symlink_to(self.engine)
            # Started in the overlay: `python -m` puts its working directory first on the path, and the side's
            # own root holds its old perfgate.
            path = [str(overlay), *import_path(side, self.here_root, self.path)]
            worker = Worker(side, self.directory, path, cwd=str(overlay))
            self.notes[side.name] = (
                f"side {side.name} predates the paired engine: its zoo and tests ran on this tree's engine"
            )
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


def steps_per_round(ready: dict, target_ms: float, max_steps: int) -> int:
    step_ms = max(min(ready["eager_ms"], ready["compiled_ms"]), 1e-3)
    stream = ready.get("stream", 1)
    steps = max(1, min(max_steps, math.ceil(target_ms / step_ms)))
    return stream * math.ceil(steps / stream)


def measure(
    duet: Duet, job_b, progress: Callable[[str], None], seed: int = 0, warm: bool = False
) -> tuple[dict, dict | None, dict]:
    """(B's record, A's record or None, the paired summary) of one cell. Never raises for what a side does:
    a side that fails is a failed record (B) or an unsure comparison that names why (A). `warm`: the shared
    cache holds this cell's compiles already (--perf-precompile), so the two sides may prepare at once."""
    a, b = duet.sides
    # A plants no fault and keeps no warm compile (after its rounds), but otherwise runs what B runs, numerics
    # included: in an A/A on an H100 (2026-11-27), an A that skipped the fp64 reference and the numerics steps
    # issued gpt2 infer's compiled step in 3.7 ms where B took 5.0 ms, every round; the wall and device clocks
    # agreed within 0.2-0.8 %. The two processes' histories must match for their host clocks to.
    job_a = replace(
        job_b,
        options=replace(job_b.options, fault=None, warm_compile="off"),
        results_path=None,
        sys_path=(),
    )
    job_b = replace(job_b, sys_path=())
    rng = random.Random(f"{seed}:{job_b.cell.id}")
    rounds = {clock: {s: {"eager": [], "compiled": []} for s in "ab"} for clock in CLOCKS}
    summary = {"against": a.describe(), "estimator": paired.DEFAULT_ESTIMATOR, "duets": 0, "looks": 0}
    # Where a paired cell's seconds go, per process pair: both sides to their warm state, their looks, their
    # records. The gate's time target is a sum of these (docs/gate.md "What it costs").
    seconds: dict[str, list[float]] = {"prepare": [], "looks": [], "finish": []}
    by_clock = dict.fromkeys(CLOCKS, 0.0)  # the looks' seconds by the clock their rounds served
    started = time.monotonic()
    lap = _lap()
    record_a = record_b = steps = None
    confidence = paired.look_confidence(LOOKS * DUETS)
    comparisons: list[paired.Comparison] = []
    for _ in range(DUETS):
        summary["duets"] += 1
        for clock in CLOCKS:
            for s in "ab":
                for side in ("eager", "compiled"):
                    rounds[clock][s][side].append([])
        first = duet.first if summary["duets"] == 1 else _other(duet.first)
        # A planted fault (--perf-inject) sizes itself on the cell's own step time after warm-up: that wants the
        # machine to itself, so B's preparation never overlaps A's then.
        together = (warm or summary["duets"] > 1) and job_b.options.fault is None
        lap()
        try:
            record_a, record_b, ready = _prepare(duet, job_a, job_b, progress, first, together)
        except WorkerGone as err:
            duet.renew()
            summary["error"] = str(err)
            break
        finally:
            seconds["prepare"].append(lap())
        if ready is None:  # a side failed before its rounds: nothing paired to judge
            failed_a = record_a is not None and record_a["status"] != "ok"
            summary["error"] = f"side A failed: {record_a['reason']}" if failed_a else "side B failed"
            break
        steps = steps_per_round(ready["b"], job_b.options.plan.target_round_ms, job_b.options.plan.max_steps_per_round)
        try:
            for look in range(LOOKS):
                summary["looks"] += 1
                wanted = set(CLOCKS) if look == 0 else _unsure_clocks(comparisons)
                _look_once(duet, rounds, steps, rng, ready, wanted, by_clock)
                comparisons = _judge(rounds, confidence, job_b.cell.device_kind)
                if _decided(comparisons):
                    break
            seconds["looks"].append(lap())
            if together:  # both finish at once: see _finish
                for side in (a, b):
                    duet.worker(side).send({"op": "finish", "solo": False})
            record_a, record_b = (_finish(duet.worker(side), progress) for side in (a, b))
            seconds["finish"].append(lap())
        except WorkerGone as err:
            summary["error"] = str(err)
            if f"side {a.name}" in str(err):  # A gone: B's rounds are still its own record (a hung B is not asked)
                record_b = _salvage(duet, b, progress) or record_b
            duet.renew()
            break
        if paired.final(comparisons, summary["duets"]) or summary["duets"] == DUETS:
            break  # the workers stay for the next cell: renewed after the last pair, they cost ~20 s to start again
        duet.renew()  # a fresh process pair for the next duet
        why = "a regression is measured again" if _decided(comparisons) else "still unsure"
        progress(f"{job_b.cell.id}: {why}, with a fresh process pair")
    counted = paired.counts(record_a, record_b) if _both_ok(record_a, record_b) and "error" not in summary else []
    summary.update(
        outcome="unsure"
        if "error" in summary
        else paired.worst([c.outcome for c in comparisons] + [c["outcome"] for c in counted]),
        counts=counted,
        steps_per_round=steps,
        rules=[c.as_json() for c in comparisons],
        rounds=rounds,
        note=duet.notes.get("A", ""),
        seconds={
            **{k: [round(x, 2) for x in v] for k, v in seconds.items()},
            **{f"{clock}_rounds": round(s, 2) for clock, s in by_clock.items()},
            "total": round(time.monotonic() - started, 2),
        },
    )
    if record_b is None:
        from perfgate.core.record import new_record

        record_b = new_record(job_b.cell, {}, job_b.run_id, process="worker")
        record_b.update(status="failed", reason=summary.get("error", "side B never reported"))
    return record_b, record_a, summary


def _prepare(
    duet: Duet, job_a, job_b, progress, first: str = "a", together: bool = False
) -> tuple[dict | None, dict | None, dict | None]:
    """Both sides to their warm state: (None, None, {"a": ready, "b": ready}); or, where a side failed before its
    rounds, (A's record or None, B's record, None) with the other side timed alone, so this tree's cell keeps a
    record of its own whichever side failed. One after the other, `first` first (A's compiles fill the shared
    cache), or `together` where the cache already holds the cell's compiles (a precompiled cell, a second
    pair): the two sides then build, load and warm up at once, which only their untimed stages see."""
    workers = dict(zip("ab", duet.start(*duet.sides)))
    duet.spawn_spares()  # the next process pair's, importing while this one prepares
    jobs = {"a": job_a, "b": job_b}

    def send(name: str, peers: list[int]) -> None:
        # The other side holds the GPU by design: its process is no neighbour that makes a cell unfit.
        workers[name].send({"job": json.loads(jobs[name].to_json()), "peers": peers})

    def answer(name: str) -> dict:
        return workers[name].expect("ready", jobs[name].limit_s, progress)

    order, answers = (first, _other(first)), {}
    for name in order if together else ():
        send(name, [workers[_other(name)].popen.pid])
    for name in order:
        if not together:
            send(name, [workers[_other(name)].popen.pid])
        answers[name] = answer(name)
        if not together and "record" in answers[name]:
            break
    failed = {name for name, message in answers.items() if "record" in message}
    if not failed:
        duet.greet_spares()  # before the first timed round
        return None, None, {name: message["ready"] for name, message in answers.items()}
    records: dict[str, dict | None] = {name: answers[name]["record"] for name in failed}
    for name in {"a", "b"} - failed:
        if name not in answers and name == "a":  # B failed before A started: there is no base record
            records["a"] = None
            continue
        if name not in answers:  # the base failed first: this tree's cell still runs, alone
            send("b", [])
            answers["b"] = answer("b")
            if "record" in answers["b"]:
                records["b"] = answers["b"]["record"]
                continue
        records[name] = _finish(workers[name], progress, solo=True)
    duet.renew()
    return records["a"], records["b"], None


def _lap() -> Callable[[], float]:
    """A stopwatch: each call returns the seconds since the previous one (the first, since its creation)."""
    last = [time.monotonic()]

    def lap() -> float:
        now = time.monotonic()
        out, last[0] = now - last[0], now
        return out

    return lap


def _both_ok(record_a: dict | None, record_b: dict | None) -> bool:
    return all(r is not None and r.get("status") == "ok" for r in (record_a, record_b))


def _other(side: str) -> str:
    return "b" if side == "a" else "a"


def _salvage(duet: Duet, side: Side, progress) -> dict | None:
    """The record of `side`'s cell from the rounds it served, where its worker still runs; else None."""
    worker = duet.workers.get(side.name)
    if worker is None or worker.popen.poll() is not None:
        return None
    try:
        return _finish(worker, progress)
    except WorkerGone:
        return None


def _ask(worker: Worker, request: dict, key: str) -> dict | None:
    worker.send(request)
    message = worker.expect(key, ROUND_LIMIT_S)
    if key not in message:
        raise WorkerGone(f"side {worker.side.name} ended its cell mid-rounds: {message['record'].get('reason')}")
    return message[key]


def _look_once(duet: Duet, rounds: dict, steps: int, rng: random.Random, ready: dict, wanted: set, spent: dict) -> None:
    """One look: the round pairs of each clock in `wanted`, their seconds added to `spent` by clock."""
    workers = {"a": duet.worker(duet.sides[0]), "b": duet.worker(duet.sides[1])}

    def pair(clock: str, request: dict) -> None:
        t0 = time.monotonic()
        for s in rng.sample("ab", 2):
            got = _ask(workers[s], request, clock)
            if got is None:
                continue
            for side in ("eager", "compiled"):
                values = got[side] if isinstance(got[side], list) else [got[side]]
                rounds[clock][s][side][-1].extend(values)
        spent[clock] += time.monotonic() - t0

    for _ in range(WALL_PAIRS if "wall" in wanted else 0):
        pair("wall", {"op": "wall", "steps": steps, "first": rng.choice(("eager", "compiled"))})
    for _ in range(HOST_PAIRS if "host" in wanted else 0):
        pair("host", {"op": "host"})
    if "device" in wanted and ready["a"].get("device_clock") and ready["b"].get("device_clock"):
        pair("device", {"op": "device", "rounds": DEVICE_ROUNDS})


def _finish(worker: Worker, progress, solo: bool = False) -> dict:
    """The worker's record of its cell, asking for it unless already asked. What a side does after its rounds
    (counts, the host probe, FLOPs, the record) is timed against nothing of the other side's, so where both
    sides prepared at once they also finish at once (~25 s of the warm tier's minute of finishing, 23ebdea2).
    Not so where the cache was cold: B then times a warm compile, which A's counting pass would slow."""
    if not worker.finish_asked:
        worker.send({"op": "finish", "solo": solo})
    return worker.expect("record", START_LIMIT_S + ROUND_LIMIT_S, progress)["record"]


def _unsure_clocks(comparisons: list[paired.Comparison]) -> set[str]:
    return {c.rule.clock.name for c in comparisons if c.outcome == "unsure"}


def _decided(comparisons: list[paired.Comparison]) -> bool:
    """A process pair's looks end once one rule shows a regression (more rounds of this pair cannot undo it:
    each look keeps its error rate; another pair may), or when no rule is unsure."""
    outcomes = {c.outcome for c in comparisons}
    return "regression" in outcomes or "unsure" not in outcomes


def _judge(rounds: dict, confidence: float, device_kind: str) -> list[paired.Comparison]:
    out = []
    for rule in paired.rules_for(device_kind):
        data = rounds[rule.clock.name]
        a, b = data["a"][rule.side], data["b"][rule.side]
        if sum(len(x) for x in a) and sum(len(x) for x in b):
            out.append(paired.across_pairs(a, b, rule, confidence))
    return out
