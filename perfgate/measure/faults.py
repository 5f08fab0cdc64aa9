"""Planting the test-only faults that perfgate.core.fault names and checks (`--perf-inject KIND[:ARG]`): at the
compile, in the compiled task, and around the compiled step. The percentage faults calibrate on the cell itself,
so one command plants the same relative loss in every cell (docs/gate-power.md's GPU proof). On the CPU there
is no device clock: device_slow then adds PCT % of the host time as a sleep.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Callable

import torch

from perfgate.core.fault import MEASURING, SHADOW, Fault
from perfgate.measure.clocks import MARK_MAX_NS

# The shortest GPU spin a device_slow or slow fault plants a step: twice the longest spin the device clock takes
# for one of its round markers, the same kernel (40 us).
MIN_SPIN_MS = 2 * MARK_MAX_NS / 1e6


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
    unfaulted step's "device" or "host" ms, for the percentage faults. A fault's shadow (Fault.shadow, the other
    side of a planted pair) calibrates as the fault does and returns the step as it was."""
    kind = fault.kind.removeprefix(SHADOW) if fault is not None else None
    if fault is None or kind not in MEASURING:
        return step
    shadow = kind != fault.kind  # measure as the fault does, plant nothing (Fault.shadow)
    if kind == "host_slow":
        host_ms = fault.arg / 100 * calibrate("host")
        return step if shadow else _host_slowed(step, host_ms)
    ms = fault.arg
    if kind == "device_slow":
        ms = fault.arg / 100 * calibrate("device" if device.type == "cuda" else "host")
    if device.type != "cuda":
        if shadow:
            return step

        def slow_cpu_step(i):
            step(i)
            time.sleep(ms / 1e3)

        return slow_cpu_step
    if ms < MIN_SPIN_MS and not shadow:  # a shadow plants nothing, however short its own step would size it
        raise ValueError(
            f"{fault.kind}:{fault.arg:g} plants {ms * 1e3:.1f} us a step, under the {MIN_SPIN_MS * 1e3:.0f} us "
            "the device clock tells from its own round markers (the same kernel); plant a larger one"
        )
    cycles = int(ms * cycles_per_ms())
    if shadow:
        return step

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


def cycles_per_ms() -> float:
    """Calibrate torch.cuda._sleep (a spin of N clock cycles) against CUDA events."""
    cycles = 10_000_000
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda._sleep(cycles)  # first launch pays module load
    start.record()
    torch.cuda._sleep(cycles)
    end.record()
    end.synchronize()
    return cycles / start.elapsed_time(end)
