"""Is a host-bound step's per-process floor set by the CPU its threads run on? Two worker processes of one
host-bound eager GPU step (a stack of small Linear+ReLU layers: module calls and kernel launches) alternate rounds
in random order, as the paired engine's workers do; each worker's figure is its minimum round (ms per step).
Process pairs in modes taken in turn (FLOOR_MODES): `plain` (the scheduler's placement), `same` (every thread of
both workers on one CPU; they never run at once), `split` (each worker's threads on a CPU of its own), `fixed`
(both started with no address-space randomization and one string hash seed). If the
floors of a plain pair differ by several percent and a same pair's do not, the CPU is the process effect.

    python3 tools/probes/process_floor.py [PAIRS_PER_MODE] > floor.json
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import time

LAYERS, WIDTH, STEPS, ROUNDS = 60, 64, 20, 40
DEVICE = os.environ.get("FLOOR_DEVICE", "cuda")  # cpu: to try the probe where there is no GPU


def worker() -> None:
    import torch

    model = torch.nn.Sequential(
        *[m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())]
    ).to(DEVICE)
    x = torch.randn(32, WIDTH, device=DEVICE)
    with torch.no_grad():
        for _ in range(50):
            model(x)
        sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
        sync()
        print("ready", flush=True)
        for _line in sys.stdin:
            t0 = time.perf_counter()
            for _ in range(STEPS):
                model(x)
            sync()
            print(f"{(time.perf_counter() - t0) / STEPS * 1e3:.5f}", flush=True)


def pin(pid: int, cpus: set[int]) -> None:
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            os.sched_setaffinity(int(tid), cpus)
        except (ProcessLookupError, PermissionError):
            pass


def one_pair(mode: str, rng: random.Random) -> dict:
    command, env = [sys.executable, __file__, "worker"], dict(os.environ)
    if mode == "fixed":  # one address-space layout and one string hash for both: no ASLR, PYTHONHASHSEED=0
        command, env = ["setarch", os.uname().machine, "-R", *command], {**env, "PYTHONHASHSEED": "0"}
    procs = [
        subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env) for _ in range(2)
    ]
    for p in procs:
        assert p.stdout.readline().strip() == "ready"
    cpus = sorted(os.sched_getaffinity(0))
    if mode == "same":
        for p in procs:
            pin(p.pid, {cpus[-1]})
    elif mode == "split":
        for p, cpu in zip(procs, cpus[-2:]):
            pin(p.pid, {cpu})
    ms: list[list[float]] = [[], []]
    for _ in range(ROUNDS):
        for i in rng.sample(range(2), 2):
            procs[i].stdin.write("r\n")
            procs[i].stdin.flush()
            ms[i].append(float(procs[i].stdout.readline()))
    for p in procs:
        p.stdin.close()
        p.wait()
    a, b = min(ms[0]), min(ms[1])
    return {"mode": mode, "min_a": a, "min_b": b, "change": b / a - 1, "rounds": ms}


def main() -> None:
    pairs = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    rng = random.Random(0)
    out = []
    for _ in range(pairs):
        for mode in os.environ.get("FLOOR_MODES", "plain same split").split():
            got = one_pair(mode, rng)
            out.append(got)
            print(
                f"{mode:6} A {got['min_a']:.3f} B {got['min_b']:.3f} ms  {got['change'] * 100:+.2f} %", file=sys.stderr
            )
    print(json.dumps(out))


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["worker"] else main()
