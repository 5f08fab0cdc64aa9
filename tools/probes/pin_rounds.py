"""A pytest plugin for the probe of a per-process host effect (`-p tools.probes.pin_rounds`): during each look of
the paired engine, every thread of both sides' workers runs on one CPU, the last this process may use.

Why: in the A/As on 2xH200 23ebdea2 (2026-11-27) a host-bound cell's compiled wall minimum read 24 % apart between
the two workers of one process pair and 2.6 % in the next (segformer_b2 train). If a worker's floor is set by the
CPU its threads landed on, both sides on one CPU read alike; the two never run at once (their rounds alternate).
Affinities are restored after each look, so preparing, counting and finishing run as before.
Run it with PERFGATE_PAIRED_PIN=off (pin_ab.sh does): the engine's own pinning, the default since 2026-11-29,
would otherwise move the main threads again inside each look.
"""

import os

from perfgate.ab import duet

_look_once = duet._look_once


def _threads(pid: int) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(f"/proc/{pid}/task")]
    except FileNotFoundError:
        return []


def _pinned(pair, *args, **kwargs):
    cpu = max(os.sched_getaffinity(0))
    before = {}
    for worker in pair.workers.values():
        for tid in _threads(worker.popen.pid):
            try:
                before.setdefault(tid, os.sched_getaffinity(tid))
                os.sched_setaffinity(tid, {cpu})
            except (ProcessLookupError, PermissionError):
                pass
    try:
        return _look_once(pair, *args, **kwargs)
    finally:
        for tid, cpus in before.items():
            try:
                os.sched_setaffinity(tid, cpus)
            except (ProcessLookupError, PermissionError):
                pass


duet._look_once = _pinned
