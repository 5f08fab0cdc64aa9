"""A paired cell's process pair to its warm state (perfgate.ab.duet.measure calls `prepare`): the two sides' jobs
sent, in one of three ways (HOW), and what is left where a side fails before its rounds. Imports no torch.

    sequential  one side after the other, `first` first: its compiles fill the shared inductor cache and its
                first call times the kernels' launch-config picks with the GPU to itself; the other loads them.
                A base whose engine cannot hold a job, or a planted fault (--perf-inject), which sizes itself on
                the cell's own step, takes this way.
    staggered   at once, but for each side's first compiled call, which takes its turn with the other held
                (perfgate.measure.duet's holds): a cold first pair.
    together    wholly at once: the cache holds the cell's compiles and its picks already (an earlier run's cell
                between the same sides, marked in the cache; a second process pair).
"""

from __future__ import annotations

import json
import os
import time
from typing import Callable

from perfgate.ab.pair_workers import Duet, Worker, WorkerGone, finish, holds

HOW = ("sequential", "staggered", "together")
# "sequential": a cold first pair one side after the other, as before staggered prepares, so that one machine can
# time the two ways (tools/probes/paired_chain.sh aa_cold_seq); unset or "staggered": the default.
PREPARE_ENV = "PERFGATE_PAIRED_PREPARE"
PREPARE_CHOICES = ("staggered", "sequential")


def prepare_choice() -> str:
    """PREPARE_ENV's value, checked (ValueError naming the valid ones): the plugin checks it before any cell."""
    value = os.environ.get(PREPARE_ENV) or PREPARE_CHOICES[0]
    if value not in PREPARE_CHOICES:
        raise ValueError(f"{PREPARE_ENV}={value!r}: valid values are {', '.join(PREPARE_CHOICES)}")
    return value


def how_of(duet: Duet, cached: bool, fault: bool) -> str:
    """How a process pair prepares (HOW): with a planted fault, which sizes itself on the cell's own step after
    warm-up and wants the machine to itself, one side after the other; where the shared cache holds the cell's
    compiles and launch-config picks (`cached`: an earlier run's, or a later pair), together; else staggered,
    where both engines can hold a job and PREPARE_ENV leaves it so."""
    if fault:
        return "sequential"
    if cached:
        return "together"
    return "staggered" if prepare_choice() == "staggered" and holds(duet) else "sequential"


def prepare(
    duet: Duet, job_a, job_b, progress, first: str = "a", how: str = "sequential"
) -> tuple[dict | None, dict | None, dict | None]:
    """Both sides to their warm state, `how` (HOW): (None, None, {"a": ready, "b": ready}); or, where a side
    failed before its rounds, (A's record or None, B's record, None) with the other side timed alone, so this
    tree's cell keeps a record of its own whichever side failed."""
    if how not in HOW:
        raise ValueError(f"how {how!r}; valid: {', '.join(HOW)}")
    workers = dict(zip("ab", duet.start(*duet.sides)))
    duet.spawn_spares()  # the next process pair's, importing while this one prepares
    jobs = {"a": job_a, "b": job_b}

    def send(name: str, peers: list[int], hold: bool = False) -> None:
        # The other side holds the GPU by design: its process is no neighbour that makes a cell unfit.
        message = {"job": json.loads(jobs[name].to_json()), "peers": peers}
        workers[name].send({**message, "hold": True} if hold else message)

    def answer(name: str, keys: tuple[str, ...] = ("ready",), limit_s: float | None = None) -> dict:
        return workers[name].expect(keys, jobs[name].limit_s if limit_s is None else limit_s, progress)

    order, answers = (first, other(first)), {}
    at_once = how != "sequential"
    for name in order if at_once else ():
        send(name, [workers[other(name)].popen.pid], hold=how == "staggered")
    if how == "staggered":
        answers = _staggered(workers, order, answer, {name: jobs[name].limit_s for name in order})
    for name in order if how != "staggered" else ():
        if not at_once:
            send(name, [workers[other(name)].popen.pid])
        answers[name] = answer(name)
        if not at_once and "record" in answers[name]:
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
        records[name] = finish(workers[name], progress, solo=True)
    duet.renew()
    return records["a"], records["b"], None


def _staggered(
    workers: dict[str, Worker], order: tuple[str, str], answer: Callable[..., dict], limit_s: dict[str, float]
) -> dict[str, dict]:
    """The sides, sent their jobs with holds (perfgate.measure.duet), to their warm state: they build, compute
    the reference and warm up eager at once; then each side's first compiled call, in `order`, with the other
    held (a kernel's launch configs are timed at its first call, and two sides timing them beside each other
    picked apart: docs/gate-evidence.md "Process pairs"); then both at once again, but for a stream model, whose later
    shapes compile in its warm-up: it holds no more and goes to its warm state in its turn. {side: its "ready",
    or its record where it failed}. Each side's `limit_s` runs from now, the seconds it was held not counted."""
    deadline = {name: time.monotonic() + limit_s[name] for name in order}
    held_since: dict[str, float] = {}

    def wait(name: str, keys: tuple[str, ...] = ("hold", "ready")) -> dict:
        message = answer(name, keys, max(1.0, deadline[name] - time.monotonic()))
        held_since[name] = time.monotonic()
        return message

    def go(name: str) -> None:
        deadline[name] += time.monotonic() - held_since[name]
        workers[name].send({"op": "go"})

    at = {name: wait(name) for name in order}  # each held before its first compiled call, or ended
    for name in order:  # one side's first compiled call at a time, the other held (or ended)
        if "hold" in at[name]:
            go(name)
            at[name] = wait(name)  # held after that call, or ready (a stream model), or ended
    held = [name for name in order if "hold" in at[name]]
    for name in held:  # both on at once
        go(name)
    for name in held:
        at[name] = wait(name, ("ready",))
    return at


def alone(duet: Duet, job_b, progress) -> dict | None:
    """B's record of the cell from a fresh worker of B's alone (the last pair ended), timed as a solo cell; None
    where that worker is gone too."""
    try:
        (worker,) = duet.start(duet.sides[1])
        worker.send({"job": json.loads(job_b.to_json()), "peers": []})
        answer = worker.expect("ready", job_b.limit_s, progress)
        return answer["record"] if "record" in answer else finish(worker, progress, solo=True)
    except WorkerGone:
        return None
    finally:
        duet.renew()


def other(side: str) -> str:
    return "b" if side == "a" else "a"
