"""Why does a compiled step's host time depend on the process it runs in (upernet infer, H100, 2026-11-25:
compiled 8.46 ms in pytest's process, 12.13 ms in perfgate's worker; docs/time-to-verdict.md)? One cell's
host clock, measured the same way in several processes of one machine:

  python tools/probes/host_process.py all OUTDIR      runs each mode below and prints a table
  python tools/probes/host_process.py one LABEL OUTDIR  one measurement in this process (the modes call it)

Modes: plain (this interpreter), pytest (a test in pytest's process), child-session (a Popen child in a
session of its own, stdin a pipe, stdout a file: how perfgate.measure.launch starts one), child (the same
without a session of its own), worker (perfgate's warm worker from a plain parent; worker-ctx: the parent
holds a CUDA context first; any suffix, e.g. worker-b, repeats a mode). Each writes OUTDIR/LABEL.json: host
ms of both sides, the process's facts (session, threads, affinity, switch interval) and a cProfile of 20
compiled steps.
"""

from __future__ import annotations

import cProfile
import io
import json
import os
import pstats
import subprocess
import sys
import threading
import time
from pathlib import Path

CELL = ("upernet_convnext_t", "infer", "inductor_default", "amp_bf16")


def facts() -> dict:
    return {
        "pid": os.getpid(),
        "sid": os.getsid(0),
        "pgid": os.getpgid(0),
        "tasks": len(os.listdir(f"/proc/{os.getpid()}/task")),
        "py_threads": [t.name for t in threading.enumerate()],
        "affinity": len(os.sched_getaffinity(0)),
        "switch_interval": sys.getswitchinterval(),
        "nice": os.nice(0),
        "autogroup": Path(f"/proc/{os.getpid()}/autogroup").read_text().strip()
        if Path(f"/proc/{os.getpid()}/autogroup").exists()
        else None,
        "stdin_tty": os.isatty(0),
        "stdout_tty": os.isatty(1),
        "modules": len(sys.modules),
    }


def launchers() -> dict:
    """{launcher class name: count} over the Triton kernels this process has loaded (inductor's autotuners)."""
    import gc

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    counts: dict = {}
    for obj in gc.get_objects():
        try:
            if isinstance(obj, CachingAutotuner):
                for launcher in getattr(obj, "launchers", []) or []:
                    name = type(launcher).__name__ + ":" + str(getattr(launcher, "__qualname__", ""))
                    counts[name] = counts.get(name, 0) + 1
        except ReferenceError:  # a dead weak proxy among the objects
            continue
    return counts


def measured(label: str, rounds, step, device) -> dict:
    """One process's result: the host clock's medians from `rounds`, a cProfile of 20 more single steps of
    `step` (the compiled side), the launchers and the process's facts."""
    median = lambda xs: sorted(xs)[len(xs) // 2]  # noqa: E731
    return {
        "label": label,
        "eager_host_ms": round(median(rounds.eager_ms), 3),
        "compiled_host_ms": round(median(rounds.compiled_ms), 3),
        "host_speedup": round(median(rounds.ratios), 3),
        **profile_steps(step, device),
        "facts": facts(),
    }


def profile_steps(step, device) -> dict:
    from perfgate.measure import clocks

    profiler = cProfile.Profile()
    profiler.enable()
    single = [clocks.issue_ms(step, 0, device) for _ in range(20)]
    profiler.disable()
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(25)
    return {"compiled_single_ms": [round(x, 3) for x in single], "cprofile": text.getvalue(), "launchers": launchers()}


def instrument() -> None:
    """In perfgate's worker (through sitecustomize): after the cell's host clock, profile 20 compiled steps."""
    from perfgate.measure import clocks

    real = clocks.host_rounds

    def host_rounds(eager, compiled, device, *args, **kwargs):
        rounds = real(eager, compiled, device, *args, **kwargs)
        result = measured(f"inside-{os.getpid()}", rounds, compiled, device)
        (Path(os.environ["HOST_PROCESS_OUT"]) / f"{result['label']}.json").write_text(json.dumps(result, indent=1))
        return rounds

    clocks.host_rounds = host_rounds


def one(label: str, outdir: Path) -> dict:
    if label.startswith("early"):  # as perfgate.measure.child does before its first job
        import importlib

        importlib.import_module("torch._inductor.compile_fx")
    if label.startswith("deathsig"):
        from perfgate.measure.launch import die_with_parent

        die_with_parent()
    import torch

    from fixtures import REGISTRY
    from perfgate.core.matrix import Cell
    from perfgate.measure import clocks
    from perfgate.measure.devices import start_cell
    from perfgate.measure.steps import Side, build_model, cell_batches, compiled_side, initial_state

    spec = REGISTRY[CELL[0]]
    on_cpu = os.environ.get("PROBE_CPU") == "1"  # a dry run of the probe on a box without a GPU
    cell = Cell(*CELL, device_kind="cpu" if on_cpu else "gpu")
    device = start_cell("cpu" if on_cpu else "cuda:0", True)
    size = spec.size(cell)
    state = initial_state(spec, size, 0)
    _, batches, _ = cell_batches(spec, cell, size, 0, device)
    eager = Side(spec, build_model(spec, size, state, device), cell.phase, cell.precision, device)
    compiled = compiled_side(spec, cell, size, state, device, None)
    eager_step, compiled_step = (lambda i: eager.step(batches[0])), (lambda i: compiled.step(batches[0]))
    for _ in range(30):
        eager_step(0), compiled_step(0)
    rounds = clocks.host_rounds(eager_step, compiled_step, device, rounds=21, min_rounds=21)
    result = measured(label, rounds, compiled_step, device)
    (outdir / f"{label}.json").write_text(json.dumps(result, indent=1))
    return result


def test_in_pytest():  # the "pytest" modes: collected when this file is named on pytest's command line
    out = Path(os.environ["HOST_PROCESS_OUT"])
    if os.environ.get("HOST_PROCESS_SPAWN") == "1":  # a child of pytest's process, as perfgate starts one
        env = {**os.environ, "TORCHINDUCTOR_CACHE_DIR": str(out / "ic-pytest-child")}
        with (out / "pytest-child.stdout").open("w") as sink:
            proc = subprocess.Popen(
                [sys.executable, __file__, "one", "pytest-child", str(out)],
                env=env,
                stdin=subprocess.PIPE,
                stdout=sink,
                stderr=sink,
                text=True,
                start_new_session=True,
            )
            while proc.poll() is None:
                time.sleep(0.5)
    else:
        one("pytest", out)


def worker(outdir: Path, label: str = "worker") -> None:
    """The cell through perfgate's own warm worker (perfgate.measure.isolate), from this plain process; a label
    with "ctx" in it first gives this parent a CUDA context of its own, as pytest's process might have while
    its isolated worker measures (BJ, 2026-11-26: it made no difference, and the device name pytest's session
    asks torch.cuda for creates no context)."""
    if "ctx" in label and os.environ.get("PROBE_CPU") != "1":
        import torch

        torch.cuda.get_device_name(0)
        torch.zeros(1, device="cuda:0")
    from perfgate.core.matrix import Cell
    from perfgate.measure.isolate import CellProcess
    from perfgate.core.job import Job, RunOptions

    on_cpu = os.environ.get("PROBE_CPU") == "1"
    options = RunOptions(device="cpu" if on_cpu else "cuda:0", warm_compile="off", registry="fixtures:REGISTRY")
    job = Job(
        cell=Cell(*CELL, device_kind="cpu" if on_cpu else "gpu"),
        options=options,
        tf32=True,
        limit_s=400,
        sys_path=tuple(sys.path),
    )
    w = CellProcess(options.registry)
    try:
        record = w.run(job, print)
    finally:
        w.close()
    keys = ("eager_host_ms", "compiled_host_ms", "host_speedup", "speedup", "compiled_ms", "status", "reason")
    result = {"label": label, **{k: record.get(k) for k in keys}, "facts": {}}
    (outdir / f"{label}.json").write_text(json.dumps(result, indent=1))


def write_hook(outdir: Path) -> Path:
    """OUTDIR/hook/sitecustomize.py: a process with it on PYTHONPATH profiles its cell's compiled steps after
    the host clock (instrument), into OUTDIR/inside-PID.json."""
    hook = outdir / "hook"
    hook.mkdir(parents=True, exist_ok=True)
    (hook / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).parent)!r})\nimport host_process\nhost_process.instrument()\n"
    )
    return hook


def run_all(outdir: Path) -> None:
    outdir.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "HOST_PROCESS_OUT": str(outdir), "PYTHONPATH": os.getcwd()}
    me = [sys.executable, __file__, "one"]
    timings = {}

    def timed(label, fn):
        t0 = time.time()
        fn()
        timings[label] = round(time.time() - t0, 1)

    modes = os.environ.get("MODES", "plain pytest child-session child").split()

    def fresh(label):  # each mode compiles from an empty inductor cache, as a cell with no kept cache does
        return {**env, "TORCHINDUCTOR_CACHE_DIR": str(outdir / f"ic-{label}")}

    for label in modes:
        if label in ("plain", "early", "deathsig"):
            timed(label, lambda label=label: subprocess.run([*me, label, str(outdir)], env=fresh(label), check=False))
        elif label in ("pytest", "pytest-child"):
            pytest = [
                sys.executable,
                "-m",
                "pytest",
                __file__,
                "-q",
                "-p",
                "no:randomly",
                "-s",
                "-p",
                "no:cacheprovider",
            ]
            spawn = {"HOST_PROCESS_SPAWN": "1" if label == "pytest-child" else "0"}
            timed(
                label,
                lambda label=label, spawn=spawn, pytest=pytest: subprocess.run(pytest, env={**fresh(label), **spawn}),
            )
        elif label.startswith("worker"):  # worker, worker-ctx, worker-b...: the worker imports sitecustomize
            hook = write_hook(outdir)  # from hook/, which instruments its host clock
            worker_env = {**fresh(label), "PYTHONPATH": f"{hook}{os.pathsep}{os.getcwd()}"}
            timed(
                label,
                lambda worker_env=worker_env, label=label: subprocess.run(
                    [sys.executable, __file__, "worker", str(outdir), label], env=worker_env
                ),
            )
    for label, session in (("child-session", True), ("child", False)):
        if label not in modes:
            continue
        with (outdir / f"{label}.stdout").open("w") as sink:

            def spawn(label=label, session=session, sink=sink):
                proc = subprocess.Popen(
                    [*me, label, str(outdir)],
                    env=fresh(label),
                    stdin=subprocess.PIPE,
                    stdout=sink,
                    stderr=sink,
                    text=True,
                    start_new_session=session,
                )
                while proc.poll() is None:  # perfgate's parent polls twice a second
                    time.sleep(0.5)

            timed(label, spawn)
    print(f"{'mode':<14} {'eager':>8} {'compiled':>9} {'speedup':>8}  s    facts")
    for label in modes:
        path = outdir / f"{label}.json"
        if not path.exists():
            print(f"{label:<14} missing")
            continue
        r = json.loads(path.read_text())
        f = r["facts"]
        if not f or r["compiled_host_ms"] is None:
            print(f"{label:<14} {timings.get(label)} {r}")
            continue
        print(
            f"{label:<14} {r['eager_host_ms']:>8} {r['compiled_host_ms']:>9} {r['host_speedup']:>8} "
            f"{timings.get(label)}  sid==pid {f['sid'] == f['pid']} tasks {f['tasks']} threads {f['py_threads']} "
            f"affinity {f['affinity']} autogroup {f['autogroup']} stdin_tty {f['stdin_tty']} modules {f['modules']}"
        )


if __name__ == "__main__":
    if sys.argv[1] == "all":
        run_all(Path(sys.argv[2]))
    elif sys.argv[1] == "hook":
        print(write_hook(Path(sys.argv[2])))
    elif sys.argv[1] == "worker":
        worker(Path(sys.argv[2]), *sys.argv[3:4])
    else:
        one(sys.argv[2], Path(sys.argv[3]))
