"""Test-only planted faults, to prove each check can fail: `--perf-inject KIND[:ARG]`.

    numerics[:EPS]     scale what the compiled task returns by (1 + EPS), default 0.05: a miscompile
    graph_break        a graph break before every repeated block of the compiled model
    slow[:MS]          MS milliseconds (default 1) of extra device work after every compiled step
    device_slow[:PCT]  extra device work after every compiled step of PCT % (default 3) of that step's own
                       GPU busy time (measured once, unfaulted, after warm-up): only the device clock moves
                       by design, and the wall clock only where the step is device-bound
    host_slow[:PCT]    a host busy-wait before every compiled step of PCT % (default 15) of the time the host
                       takes to issue it (measured likewise): an overhead regression (more guards, more
                       Python); the device clock must not move
    hang[:S]           the compile stalls for S seconds (default 3600): a hung compile, for the time limit
    crash              the process dies of SIGSEGV while compiling: a crash, for per-cell isolation

The percentage faults calibrate on the cell itself, so one command plants the same relative loss in
every cell (docs/gate-power.md's GPU proof). On the CPU there is no device clock: device_slow then adds
PCT % of the host time as a sleep.
"""

from __future__ import annotations

import math
import os
import signal
import time
from dataclasses import dataclass
from typing import Callable

import torch

from perfgate.measure.clocks import MARK_MAX_NS

KINDS = {
    "numerics": 0.05,
    "graph_break": 0.0,
    "slow": 1.0,
    "device_slow": 3.0,
    "host_slow": 15.0,
    "hang": 3600.0,
    "crash": 0.0,
}
# The largest argument each fault takes: past it the fault plants no loss a gate must find, it stops the run
# (host_slow:1e308 busy-waited for ever).
MAX_ARG = {"numerics": 100.0, "slow": 10_000.0, "device_slow": 1000.0, "host_slow": 1000.0, "hang": 86_400.0}
# The shortest GPU spin a device_slow or slow fault plants a step: twice the longest spin the device clock takes
# for one of its round markers, the same kernel (40 us).
MIN_SPIN_MS = 2 * MARK_MAX_NS / 1e6


@dataclass(frozen=True)
class Fault:
    kind: str
    arg: float


def parse(text: str | None) -> Fault | None:
    if not text:
        return None
    kind, _, arg = text.partition(":")
    if kind not in KINDS:
        raise ValueError(f"unknown fault {kind!r} in --perf-inject={text!r}; valid: {', '.join(KINDS)}")
    try:
        value = float(arg) if arg else KINDS[kind]
    except ValueError:
        raise ValueError(f"--perf-inject={text!r}: {arg!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"--perf-inject={text!r}: {arg!r} must be a finite number >= 0")
    if value > MAX_ARG.get(kind, math.inf):
        raise ValueError(f"--perf-inject={text!r}: {kind}'s argument must be at most {MAX_ARG[kind]:g}")
    return Fault(kind, value)


def at_compile(fault: Fault | None) -> None:
    """Where a compile starts: stall (hang) or die (crash), as a stuck or crashing compiler would."""
    if fault is None:
        return
    if fault.kind == "hang":
        time.sleep(fault.arg)
    elif fault.kind == "crash":
        os.kill(os.getpid(), signal.SIGSEGV)


def wrap_task(task, spec, fault: Fault | None):
    """Plant numerics or graph-break faults in the compiled side's task (never the eager side's)."""
    if fault is None:
        return task
    if fault.kind == "numerics":
        inner = task.fn
        task.fn = lambda model, batch: inner(model, batch) * (1.0 + fault.arg)
    elif fault.kind == "graph_break":
        for block in spec.blocks(task.model):
            block.register_forward_pre_hook(_graph_break)
    return task


def _graph_break(_module, _args):
    torch._dynamo.graph_break()


def slowed(step, fault: Fault | None, device: torch.device, calibrate: Callable[[str], float] | None = None):
    """The compiled step with a planted slowdown the gate must catch. `calibrate(clock)` returns the
    unfaulted step's "device" or "host" ms, for the percentage faults."""
    if fault is None or fault.kind not in ("slow", "device_slow", "host_slow"):
        return step
    if fault.kind == "host_slow":
        return _host_slowed(step, fault.arg / 100 * calibrate("host"))
    ms = fault.arg
    if fault.kind == "device_slow":
        ms = fault.arg / 100 * calibrate("device" if device.type == "cuda" else "host")
    if device.type != "cuda":

        def slow_cpu_step(i):
            step(i)
            time.sleep(ms / 1e3)

        return slow_cpu_step
    if ms < MIN_SPIN_MS:
        raise ValueError(
            f"{fault.kind}:{fault.arg:g} plants {ms * 1e3:.1f} us a step, under the {MIN_SPIN_MS * 1e3:.0f} us "
            "the device clock tells from its own round markers (the same kernel); plant a larger one"
        )
    cycles = int(ms * _cycles_per_ms())

    def slow_cuda_step(i):
        step(i)
        torch.cuda._sleep(cycles)

    return slow_cuda_step


def _host_slowed(step, ms: float):
    def busy_waiting_step(i):
        # A busy-wait, not a sleep: the host is working (as it would in extra guards), not yielding.
        until = time.perf_counter() + ms / 1e3
        while time.perf_counter() < until:
            pass
        return step(i)

    return busy_waiting_step


def _cycles_per_ms() -> float:
    """Calibrate torch.cuda._sleep (a spin of N clock cycles) against CUDA events."""
    cycles = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # first launch pays module load
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)
