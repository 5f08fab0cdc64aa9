"""Both sides' workers on one CPU set while their rounds alternate (PERFGATE_PAIRED_PIN, "shared" unless it
says "off"), so that a round of A and the round of B beside it run on the same cores. Imports no torch.

Why (docs/gate-evidence.md "Process pairs", measured with tools/probes/duet_floor.py): on the H200 machines a CPU's
speed moves on its own over seconds, so a worker whose main thread sits on a slow CPU reads every round slow
for seconds while the other side, on another CPU, does not. Workers that share two CPUs share those spells, and
the median of their paired round ratios (paired.PAIRED_ESTIMATORS) cancels them. The two sides never run at
once (the coordinator asks one, then the other), so sharing two CPUs costs neither any speed.
"""

from __future__ import annotations

import os
from typing import Iterable

PIN_ENV = "PERFGATE_PAIRED_PIN"
PIN_CHOICES = ("shared", "off")  # the first is the default
ROUND_CPUS = 2  # a side's main thread and one for its helpers (the CUDA driver's, autograd's device thread)


def pin_choice() -> str:
    """PIN_ENV's value, "shared" where unset, checked (ValueError naming the valid ones): the plugin checks it
    before any cell."""
    value = os.environ.get(PIN_ENV) or PIN_CHOICES[0]
    if value not in PIN_CHOICES:
        raise ValueError(f"{PIN_ENV}={value!r}: valid values are {', '.join(PIN_CHOICES)}")
    return value


def last_cpus(allowed: Iterable[int]) -> frozenset[int]:
    """The CPUs both sides' rounds run on: the last ROUND_CPUS of `allowed` (this process's, a dealt shard's
    share), away from CPU 0, which often takes a host's device interrupts; none where `allowed` has no more
    than that (pinning would change nothing)."""
    cpus = sorted(allowed)
    return frozenset(cpus[-ROUND_CPUS:]) if len(cpus) > ROUND_CPUS else frozenset()


def rounds_cpus() -> frozenset[int]:
    """The CPUs a process pair's rounds run on: last_cpus of this process's own where PIN_ENV says "shared",
    else none."""
    if pin_choice() != "shared" or not hasattr(os, "sched_getaffinity"):
        return frozenset()
    return last_cpus(os.sched_getaffinity(0))


def _threads(pid: int) -> list[int]:
    try:
        return [int(t) for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:  # the process ended, or no /proc here
        return []


class Pinned:
    """A context: each process of `pids` on `cpus` inside it, its main thread on the lowest of them (so that both
    sides' main threads, which issue their steps, share one CPU's state) and every other thread on all of them;
    and back on the CPUs each thread had when it ends (a thread started inside it, on its main thread's). Where
    `cpus` is empty, the host cannot pin (no sched_setaffinity, no /proc) or a main thread would not move (a
    cgroup's CPU set without them), nothing stays moved and `cpus` reads empty: rounds that were not pinned are
    never judged as if they were."""

    def __init__(self, pids: Iterable[int], cpus: frozenset[int]):
        self.pids, self.saved = list(dict.fromkeys(pids)), {}
        can = bool(cpus) and hasattr(os, "sched_setaffinity") and all(_threads(p) for p in self.pids)
        self.cpus = cpus if can else frozenset()

    def __enter__(self) -> "Pinned":
        for pid in self.pids if self.cpus else ():
            for tid in _threads(pid):
                try:
                    self.saved.setdefault(tid, os.sched_getaffinity(tid))
                    os.sched_setaffinity(tid, {min(self.cpus)} if tid == pid else self.cpus)
                except OSError:  # a thread that ended meanwhile; a main thread's is checked below
                    continue
        if self.cpus and not all(self._on_cpus(pid) for pid in self.pids):
            self.__exit__()
            self.cpus = frozenset()
        return self

    def _on_cpus(self, pid: int) -> bool:
        try:
            return os.sched_getaffinity(pid) == {min(self.cpus)}
        except OSError:
            return False

    def __exit__(self, *_exc) -> None:
        for pid in self.pids if self.cpus else ():
            first = self.saved.get(pid)
            for tid in _threads(pid):
                back = self.saved.get(tid, first)
                if back is None:
                    continue
                try:
                    os.sched_setaffinity(tid, back)
                except OSError:
                    continue
