"""Do the paired engine's own workers spread as cell_copies.py's plain processes do?

cell_copies.py's processes of a host-bound cell read their compiled wall floors about 1 % apart (after the CUPTI
fix), where the engine's A/A process pairs read a median 4-6 % apart (docs/gate-evidence.md "Process pairs"). This probe
starts WORKERS of the engine's own side process (`python -m perfgate.measure.duet`, perfgate.ab.pair_workers),
sends each the same cell as a job (its whole preparation: build, compile from the kept cache, numerics, counts,
warm-up), and then asks each for wall rounds as the coordinator does, every round index over all workers in a
random order: a worker's figure is its fastest compiled round (ms per step). Workers as far apart as the engine's
pairs mean the cause is in what a worker does (its preparation, its process); as close as cell_copies' mean it is
in the session around them (the coordinator, pytest, spare workers starting, the device and host looks).

One entry of DUET_MODES a worker: plain (as the engine starts it); pin (once ready, every thread of it on
DUET_PIN_CPUS, default 2,3, the same CPUs for every pinned worker); omp1 (OMP_NUM_THREADS=1). DUET_DEVICE=cpu takes
the cell's tiny CPU size (a check of the probe here). looks: between every LOOK_PAIRS wall rounds, a host round
and a device block of 3 rounds in fresh layouts (a profiler session), as the engine's looks serve them.
DUET_PREPARE=all prepares the workers after the first at once (default: two at a time, as a process pair does).

    DUET_CELL=resnet50:train DUET_MODES=plain,plain,plain,plain,pin,pin,pin,pin python3 tools/probes/duet_floor.py
"""

from __future__ import annotations

import json
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))  # this tree

from perfgate.ab.duet import wall_shape  # noqa: E402
from perfgate.ab.pair_workers import Worker, import_path  # noqa: E402
from perfgate.ab.sides import Side  # noqa: E402
from perfgate.core import zoo  # noqa: E402
from perfgate.core.job import Job, RunOptions  # noqa: E402
from perfgate.core.matrix import Cell  # noqa: E402

MODEL, PHASE = os.environ.get("DUET_CELL", "resnet50:train").split(":")
MODES = [m for m in os.environ.get("DUET_MODES", "plain,plain,plain,plain,plain,plain").split(",") if m]
MODE_CHOICES = ("plain", "pin", "omp1", "looks")
# A look's wall round pairs (perfgate.ab.duet.WALL_PAIRS): "looks" workers serve host and device rounds between.
LOOK_PAIRS = 12
DEVICE = os.environ.get("DUET_DEVICE", "cuda:0")
ROUNDS = int(os.environ.get("DUET_ROUNDS", "40"))
EAGER_EVERY = 3  # a look steps eager in 4 of its 12 wall round pairs (perfgate.ab.duet.eager_pairs)
CACHE = os.environ.get("DUET_CACHE") or os.path.join(tempfile.gettempdir(), "perfgate-duet-floor-cache")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def job_for() -> Job:
    cpu = DEVICE == "cpu"
    cell = Cell(MODEL, PHASE, "inductor_default", "fp32" if cpu else "amp_bf16", "cpu" if cpu else "gpu", tier="pr")
    options = RunOptions(device=DEVICE, cache_dir=CACHE, registry=zoo.DEFAULT, warm_compile="off")
    return Job(cell=cell, options=options, tf32=True)


def start(mode: str, directory: Path, n: int) -> Worker:
    env = {"OMP_NUM_THREADS": "1"} if mode == "omp1" else {}
    side = Side(name=f"w{n}", root=ROOT, env=env)
    return Worker(side, directory, import_path(side, ROOT, sys.path), cwd=ROOT)


def send_job(worker: Worker, job: Job) -> None:
    worker.send({"job": json.loads(job.to_json()), "peers": []})


def ready_of(worker: Worker) -> dict:
    """The worker's warm state once its cell is prepared; its progress lines to stderr."""
    message = worker.expect("ready", 900, lambda m: print(m, file=sys.stderr))
    if "ready" not in message:
        raise SystemExit(f"{worker.side.name} ended its cell: {message['record'].get('reason')}")
    return message["ready"]


def pin(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except OSError:
            continue


def main() -> None:
    bad = [m for m in MODES if m not in MODE_CHOICES]
    if bad:
        raise SystemExit(f"DUET_MODES: {bad[0]!r} is not one of {', '.join(MODE_CHOICES)}")
    started = time.monotonic()
    directory = Path(tempfile.mkdtemp(prefix="duet-floor-"))
    workers = [start(m, directory, n) for n, m in enumerate(MODES)]
    jobs = [job_for() for _ in MODES]
    at_once = len(MODES) if os.environ.get("DUET_PREPARE") == "all" else 2
    # The first fills the cache alone; the rest load it, `at_once` at a time.
    groups = [range(1)] + [range(k, min(k + at_once, len(workers))) for k in range(1, len(workers), at_once)]
    readies = []
    for group in groups:
        for n in group:
            send_job(workers[n], jobs[n])
        readies += [ready_of(workers[n]) for n in group]
    prepared_s = time.monotonic() - started
    cpus = {int(c) for c in os.environ.get("DUET_PIN_CPUS", "2,3").split(",")}
    for worker, mode in zip(workers, MODES):
        if mode == "pin":
            pin(worker.popen.pid, cpus)
    steps, _ = wall_shape(readies[0], jobs[0])
    rng = random.Random(0)
    compiled: list[list[float]] = [[] for _ in workers]
    eager: list[list[float]] = [[] for _ in workers]
    on_cpu: list[list[int]] = [[] for _ in workers]  # the CPU each worker's main thread was last on, a round
    before = [sched(w.popen.pid) for w in workers]
    for i in range(ROUNDS):
        if i and i % LOOK_PAIRS == 0:
            for n in rng.sample(range(len(workers)), len(workers)):
                if MODES[n] == "looks":
                    workers[n].send({"op": "host"})
                    workers[n].expect("host", 300)
                    if DEVICE != "cpu":
                        workers[n].send({"op": "device", "rounds": 3, "relayout": True})
                        workers[n].expect("device", 300)
        sides = ["eager", "compiled"] if i % EAGER_EVERY == 0 else ["compiled"]
        for n in rng.sample(range(len(workers)), len(workers)):
            first = rng.choice(("eager", "compiled"))
            workers[n].send({"op": "wall", "steps": steps, "first": first, "sides": sides})
            got = workers[n].expect("wall", 300)["wall"]
            compiled[n].append(got["compiled"])
            if "eager" in got:
                eager[n].append(got["eager"])
            on_cpu[n].append(last_cpu(workers[n].popen.pid))
    after = [sched(w.popen.pid) for w in workers]
    for worker in workers:
        worker.close()
    found = summary(compiled, eager, steps, prepared_s, time.monotonic() - started)
    # Where the main threads ran and how long they waited for a CPU over the rounds: a slow worker on one
    # CPU, or one that queued, would say the host's cores, not the process.
    found["main_thread"] = [
        {"cpus": c, "ran_s": (a[0] - b[0]) / 1e9, "queued_s": (a[1] - b[1]) / 1e9, "slices": a[2] - b[2]}
        for c, b, a in zip(on_cpu, before, after)
    ]
    found["siblings"] = siblings()
    print(json.dumps(found))


def sched(pid: int) -> list[int]:
    """The main thread's ns on a CPU, ns waiting on a run queue, and timeslices (/proc/PID/schedstat)."""
    return [int(x) for x in open(f"/proc/{pid}/schedstat").read().split()]


def last_cpu(pid: int) -> int:
    """The CPU the main thread last ran on (/proc/PID/stat field 39)."""
    return int(open(f"/proc/{pid}/stat").read().rpartition(")")[2].split()[36])


def siblings() -> list[str]:
    """Each CPU's hardware-thread siblings, as the kernel lists them."""
    out = []
    for cpu in sorted(Path("/sys/devices/system/cpu").glob("cpu[0-9]*"), key=lambda p: int(p.name[3:])):
        try:
            out.append((cpu / "topology" / "thread_siblings_list").read_text().strip())
        except OSError:
            out.append("")
    return out


def summary(compiled: list[list[float]], eager: list[list[float]], steps: int, prepared_s: float, wall_s: float):
    floors = [min(r) for r in compiled]
    halves = [(min(r[0::2]), min(r[1::2])) for r in compiled]
    chance = statistics.median(100 * abs(a / b - 1) for a, b in halves)  # odd against even rounds of one worker
    fastest = min(floors)
    for n, (mode, floor) in enumerate(zip(MODES, floors)):
        print(f"w{n} {mode:8s} floor {floor:.3f} ms (+{100 * (floor / fastest - 1):.2f} %)", file=sys.stderr)
    by_mode = {}
    for mode in dict.fromkeys(MODES):
        own = [f for m, f in zip(MODES, floors) if m == mode]
        by_mode[mode] = {"spread_pct": 100 * (max(own) / min(own) - 1), "median_floor_ms": statistics.median(own)}
    print(f"spread {100 * (max(floors) / fastest - 1):.2f} %, odd/even chance {chance:.2f} %", file=sys.stderr)
    return {
        "cell": f"{MODEL}-{PHASE}-inductor_default on {DEVICE}",
        "modes": MODES,
        "steps_a_round": steps,
        "prepared_s": round(prepared_s, 1),
        "wall_s": round(wall_s, 1),
        "floors_ms": floors,
        "spread_pct": 100 * (max(floors) / fastest - 1),
        "odd_even_median_pct": chance,
        "by_mode": by_mode,
        "compiled_ms": compiled,
        "eager_ms": eager,
    }


if __name__ == "__main__":
    main()
