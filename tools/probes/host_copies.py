"""Is a host-bound step's per-process floor set by where its memory lies? The paired gate's host-bound cells read
their compiled wall step 5-25 % apart between two processes of one tree, for the processes' lives, and the host
clock (the time to issue a step to an idle GPU) moved with it (resnet50 train on 4xH200 ae952505, 2026-11-28:
wall -22.9 %, host -24.7 %): one process issued the same work more slowly. Pinning and ASLR did not take it out
(process_floor.py).

Each of PROCESSES workers builds COPIES models of one host-bound stack (small Linear+ReLU layers), each copy's
parameters and Python objects allocated after a block of junk that shifts them, and rounds alternate over
processes and copies in random order, as the paired engine's workers alternate. A figure is a copy's fastest
round (ms per step). If the copies' floors within a process spread as widely as the processes' do, the process
effect is memory layout, as the device clock's was, and fresh copies within a process would sample it; if the
copies agree and the processes differ, it is process-wide.

    python3 tools/probes/host_copies.py > copies.json      (HOST_DEVICE=cpu where there is no GPU)
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import time
from typing import Callable

LAYERS, WIDTH, STEPS, ROUNDS = 60, 64, 20, 30
PROCESSES = int(os.environ.get("HOST_PROCESSES", "4"))
COPIES = int(os.environ.get("HOST_COPIES", "4"))
DEVICE = os.environ.get("HOST_DEVICE", "cuda")


def worker() -> None:
    import torch

    junk, models = [], []
    for n in range(COPIES):
        junk.append([bytearray(4096 * (n + 1)) for _ in range(64)] + [torch.empty(1024 * (n + 1))])
        layers = [m for _ in range(LAYERS) for m in (torch.nn.Linear(WIDTH, WIDTH), torch.nn.ReLU())]
        models.append(torch.nn.Sequential(*layers).to(DEVICE))
    x = torch.randn(32, WIDTH, device=DEVICE)
    sync = torch.cuda.synchronize if DEVICE == "cuda" else (lambda: None)
    with torch.no_grad():
        for model in models:
            for _ in range(50):
                model(x)
        sync()
        serve(lambda copy: models[copy](x), sync, STEPS)


def serve(
    step: Callable[[int], object],
    sync: Callable[[], object],
    steps: int,
    before: Callable[[], object] | None = None,
) -> None:
    """A worker's side of alternate(): say "ready", then for each copy index read on stdin, take `steps` of that
    copy's steps and answer its ms per step (cell_copies.py's workers serve through this too). `before`, where
    given, runs ahead of each round, untimed."""
    print("ready", flush=True)
    for line in sys.stdin:
        copy = int(line)
        if before is not None:
            before()
            sync()
        t0 = time.perf_counter()
        for _ in range(steps):
            step(copy)
        sync()
        print(f"{(time.perf_counter() - t0) / steps * 1e3:.5f}", flush=True)


def launch(seed: str) -> tuple[list[str], dict[str, str]]:
    """A worker's command prefix and environment for one entry of a seeds list: "r" leaves Python's string hash
    seed random, a number fixes PYTHONHASHSEED to it, and a trailing "R" starts the worker with no address-space
    randomization (setarch -R)."""
    prefix = ["setarch", os.uname().machine, "-R"] if seed.endswith("R") else []
    value = seed.rstrip("R")
    if value != "r" and not value.isdigit():
        raise SystemExit(f"a seed is 'r' or a whole number, either with 'R' after it; got {seed!r}")
    env = dict(os.environ)
    env.pop("PYTHONHASHSEED", None)
    if value != "r":
        env["PYTHONHASHSEED"] = value
    return prefix, env


def alternate(
    script: str,
    processes: int,
    copies: int,
    rounds: int,
    seeds: list[str] | None = None,
    envs: list[dict[str, str]] | None = None,
) -> list[list[list[float]]]:
    """Start `processes` workers of `script` (each says "ready" once its copies are built), then ask their copies
    for rounds in random order, every copy of every process once a pass, `rounds` passes. `seeds`, one a
    process, sets how each starts (launch()), and `envs` adds variables to each one's environment. Returns each process's copies' ms per step, round by round
    (cell_copies.py runs its copies through this too)."""
    rng = random.Random(0)
    procs = []
    for n in range(processes):
        prefix, env = launch(seeds[n] if seeds else "r")
        env.update(envs[n] if envs else {})
        command = [*prefix, sys.executable, script, "worker"]
        procs.append(subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env))
    for p in procs:
        line = p.stdout.readline().strip()
        assert line == "ready", f"a worker said {line!r}"
    ms: list[list[list[float]]] = [[[] for _ in range(copies)] for _ in procs]
    turns = [(p, c) for p in range(processes) for c in range(copies)]
    for _ in range(rounds):
        for p, c in rng.sample(turns, len(turns)):
            procs[p].stdin.write(f"{c}\n")
            procs[p].stdin.flush()
            ms[p][c].append(float(procs[p].stdout.readline()))
    for p in procs:
        p.stdin.close()
        p.wait()
    return ms


def spreads(ms: list[list[list[float]]]) -> dict:
    """Each copy's floor (its fastest round, ms), and spreads in % of the floor: the copies' within each process,
    the processes' (each its copies' median), and what chance gives a floor (each copy's odd against its even
    rounds), said on stderr."""
    floors = [[min(rounds) for rounds in copies] for copies in ms]
    within = [100 * (max(f) / min(f) - 1) for f in floors]
    by_process = [statistics.median(f) for f in floors]
    between = 100 * (max(by_process) / min(by_process) - 1)
    halves = [100 * abs(min(r[0::2]) / min(r[1::2]) - 1) for copies in ms for r in copies]
    for p, f in enumerate(floors):
        print(f"process {p}: copies {' '.join(f'{x:.4f}' for x in f)} ms; spread {within[p]:.2f} %", file=sys.stderr)
    print(
        f"copies within a process: {statistics.median(within):.2f} % (median spread); processes: {between:.2f} %; "
        f"a copy's odd against even rounds: median {statistics.median(halves):.2f} %, max {max(halves):.2f} %",
        file=sys.stderr,
    )
    return {"floors_ms": floors, "within_pct": within, "between_pct": between, "halves_pct": halves}


def components(ms: list[list[list[float]]], label: str = "all processes") -> dict:
    """The floor's spread split by where it arises (sd in % of the floor, a nested analysis of variance): each
    copy's odd rounds and even rounds give two floors of one build (chance), the copies of a process differ by
    their builds (build), and the processes by what each shares across its copies (process). A component
    below what chance explains reads 0; one that these figures cannot tell (build with one copy a process,
    process with one process) is None."""
    import math

    halves = [[[100 * math.log(min(r[0::2])), 100 * math.log(min(r[1::2]))] for r in copies] for copies in ms]
    n_copies = len(halves[0])
    chance_var = statistics.mean((a - b) ** 2 / 2 for copies in halves for a, b in copies)
    copy_means = [[(a + b) / 2 for a, b in copies] for copies in halves]
    # one copy a process: no build term to see, the copy's floor varies by chance alone
    within_var = statistics.mean(statistics.variance(c) for c in copy_means) if n_copies > 1 else chance_var / 2
    build_var = within_var - chance_var / 2
    process_means = [statistics.mean(c) for c in copy_means]
    between_var = statistics.variance(process_means) if len(process_means) > 1 else 0.0
    process_var = between_var - within_var / n_copies
    told = {"chance": True, "build": n_copies > 1, "process": len(process_means) > 1}
    found = {
        k: math.sqrt(max(v, 0.0)) if told[k] else None
        for k, v in (("chance", chance_var), ("build", build_var), ("process", process_var))
    }
    parts = ", ".join(f"{k} {v:.2f} %" if v is not None else f"{k} not told" for k, v in found.items())
    print(f"{label}: a floor's sd over half the rounds, by source: {parts}", file=sys.stderr)
    return found


def drift(ms: list[list[list[float]]], labels: list[str] | None = None, label: str = "all processes") -> dict:
    """Does a process keep its offset over the run? Each process's floor (its copies' mean log floor, less its
    group's mean, by `labels`) over the first half of the passes against the second, and over the odd passes
    against the even. Both pairs of halves share the process; only the odd and even ones share their moments. A
    process effect that stays reads high on both; one that drifts over seconds, high on odd/even alone."""
    import math

    labels = labels or ["all"] * len(ms)

    def floors(pick) -> list[float]:
        raw = [statistics.mean(100 * math.log(min(pick(r))) for r in copies) for copies in ms]
        groups = {g: statistics.mean(x for x, h in zip(raw, labels) if h == g) for g in labels}
        return [x - groups[h] for x, h in zip(raw, labels)]

    def corr(x: list[float], y: list[float]) -> float | None:
        return statistics.correlation(x, y) if len(x) > 2 and len(set(x)) > 1 and len(set(y)) > 1 else None

    found = {
        "time_halves_r": corr(floors(lambda r: r[: len(r) // 2]), floors(lambda r: r[len(r) // 2 :])),
        "odd_even_r": corr(floors(lambda r: r[0::2]), floors(lambda r: r[1::2])),
    }
    parts = ", ".join(f"{k} {'-' if v is None else f'{v:+.2f}'}" for k, v in found.items())
    print(f"{label}: processes' floors against themselves, {parts}", file=sys.stderr)
    return found


def main() -> None:
    ms = alternate(__file__, PROCESSES, COPIES, ROUNDS)
    print(
        json.dumps(
            {"device": DEVICE, **spreads(ms), "components_pct": components(ms), "drift": drift(ms), "rounds": ms}
        )
    )


if __name__ == "__main__":
    worker() if sys.argv[1:] == ["worker"] else main()
