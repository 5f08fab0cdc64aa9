"""The counts of a step's work (perfgate.core.clocks.COUNTS), eager and compiled, in a pass of their own after the
clocks: never inside timed rounds, and no timing taken here.

A timing of host work moves with the host (a fixed host probe read 1.42-3.40 ms across six processes of one
H100 runner, 2026-11-27); a count does not. Each side runs the same few steps (STEPS: a stream model's first
STEPS batches, the same ones every time) under each counter in turn, because every counter but the last changes
what runs:

- Python calls: every Python function entered, generator and coroutine resumptions included (sys.monitoring's
  PY_START and PY_RESUME on 3.12+, in every thread but those Python's threading module started (step_thread_hook),
  so step work moved onto such a thread is not counted; sys.setprofile's "call" events on 3.10/3.11, in this
  thread alone, so a CUDA backward's Python on autograd's device thread is not counted there). C functions are
  not.
- ATen ops, dynamo cache lookups, GPU kernels and CUDA graph replays: one torch.profiler session (the CPU's
  operators; on CUDA the GPU's activity too). The ATen count is every operator the dispatcher records, nested
  ones included (aten::linear and the aten::addmm it calls), so it follows what actually runs: the compiled
  graph's ops under aot_eager, inductor's extern kernels and fallbacks under inductor. A lookup is dynamo's
  "TorchDynamo Cache Lookup" range: one per compiled frame entered (a graph break adds the resume function's).
  Kernels are the GPU's kernel records (a CUDA graph's replayed kernels included); a replay is a
  cudaGraphLaunch call. The profiler turns on record_function ranges in the compiled wrappers' Python, which
  is why the Python calls are counted in a pass before it.
- Instructions: user-space instructions retired by every thread of the process (perf_event_open's
  PERF_COUNT_HW_INSTRUCTIONS, no hook running), where the kernel offers a hardware counter; the H100 leases
  and the CPU CI box have none (ENOENT), and the record says so.

Python's garbage collector is held off during each pass, so a collection's finalizers never add calls. A
counter that fails leaves its count null and says why in `counts_note`; the cell goes on. Imports torch
(measuring side).
"""

from __future__ import annotations

import ctypes
import errno
import fcntl
import gc
import os
import platform
import struct
import sys
import threading
from typing import Callable

import torch

from perfgate.core.clocks import ATEN_OPS, CUDA_GRAPHS, INSTRUCTIONS, KERNELS, LOOKUPS, PY_CALLS, Count
from perfgate.core.record import error_line
from perfgate.measure.record_builder import StepCounts
from perfgate.measure.steps import sync

# Steps per side and pass: every warm step does the same work, so 2 say what one does, and a count that is not
# a whole number a step shows an odd-sized stray. The stage's time is about twice the plain steps it runs (a
# Python callback per call, a profiler event per op), so it scales with STEPS: with 3 it went over the 5 % of a
# cell it may cost on three warm train cells (docs/measuring.md, "What counting costs"). A stream model counts
# its first STEPS batches, not a whole pass over its stream (the captioner's 8 caption lengths made the stage
# 5.5-7.9 % of its cell, 2aa41d77). Which batches are counted stays fixed, so the counts compare; a length that
# recompiles or breaks the graph is the recompile and graph-break rules' to catch. Records counted over other
# steps are not compared (CountBandRule.other_steps, perfgate.ab.paired_work.uncounted_alike).
STEPS = 2
LOOKUP = "TorchDynamo Cache Lookup"  # dynamo's record_function range around a frame's cache lookup
GRAPH_LAUNCHES = ("cudaGraphLaunch", "cuGraphLaunch")  # runtime and driver API names of a graph replay
SIDES = ("eager", "compiled")


def measure(run) -> StepCounts:
    """Stage "counts": each side's counts over STEPS steps, by record field (run: a
    perfgate.measure.pipeline.CellRun whose sides are warm). Never raises for a counter: its total is None and
    the note says why."""
    run.clock.enter("counts", f"{run.id}: counting a step's work")
    notes: list[str] = []
    totals: dict[str, float | None] = {}
    for side, step in zip(SIDES, (run.eager_step, run.compiled_step)):
        for count, total in count_side(step, STEPS, run.device, notes).items():
            totals[count.field(side)] = total
    return StepCounts(STEPS, totals, "; ".join(dict.fromkeys(notes)))


def count_side(step: Callable[[int], object], steps: int, device: torch.device, notes: list[str]) -> dict:
    """{Count: total over `steps` steps of `step(i)`, or None}, each counter's failure appended to `notes`."""
    totals: dict[Count, float | None] = {}
    for counter, counts in (
        (python_calls, (PY_CALLS,)),
        (profiled, (ATEN_OPS, LOOKUPS, KERNELS, CUDA_GRAPHS)),
        (instructions, (INSTRUCTIONS,)),
    ):
        try:
            found = held_gc(counter, step, steps, device, notes)
        except Exception as err:  # noqa: BLE001 - a counter that fails must not fail the cell
            notes.append(f"{counts[0].label}: {error_line(err)}")
            found = {}
        totals.update({count: found.get(count) for count in counts})
    if device.type != "cuda":
        notes.append("no CUDA device: no kernels or CUDA graphs to count")
    return totals


def held_gc(counter, *args):
    """`counter(*args)` with Python's garbage collector off (as it was found after)."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        return counter(*args)
    finally:
        if enabled:
            gc.enable()


# ---------------------------------------------------------------------------------------------- Python calls


def python_calls(step: Callable[[int], object], steps: int, device: torch.device, notes=None) -> dict:
    """{PY_CALLS: Python functions entered in `steps` steps}: the hook is on for the steps' calls alone, so the
    count is a whole multiple of the steps where each step does the same work."""
    calls = [0]

    def profiled_event(_frame, event: str, _arg) -> None:
        if event == "call":
            calls[0] += 1

    hook = step_thread_hook(calls) if sys.version_info >= (3, 12) else profiled_event
    unseen_by_dynamo(hook)
    (_monitored if sys.version_info >= (3, 12) else _profiled)(hook, step, steps)
    sync(device)
    return {PY_CALLS: calls[0]}


def step_thread_hook(calls: list[int]) -> Callable[..., None]:
    """sys.monitoring's callback (code, offset): one more call in `calls`, unless a thread that Python's threading
    module started, other than this one, made it. sys.monitoring sees every thread, which a step needs (a CUDA
    backward runs its Python hooks on autograd's device thread, started in C++, unknown to `threading` or known as
    a dummy), but a Python thread of its own is no step's work. One runs in every compiled process: tqdm's
    monitor ("tqdm_monitor"), started by the compile's progress bar, wakes every 10 s and made 43 Python calls
    each time, every time (tools/probes/thread_calls.py, CPU box, torch 2.14.1, 2026-11-28); inductor's
    compile-pool timer ("subproc_worker_timer") may wake once too, 60 s after the last compile. Before this
    filter, one process in 4 to 12 read 13-41 more calls in one counted step (2xH200 57657f7c, H100s a1670055
    and 06ce1001); with it, 14 cells in 3 processes each read none (4xH200 349f3a2e, 2026-11-28)."""
    get_ident = threading.get_ident
    own = get_ident()
    started = getattr(threading, "_active", {})  # ident -> Thread, for threads `threading` knows (a private name)
    dummy = getattr(threading, "_DummyThread", ())

    def entered(*_args) -> None:
        ident = get_ident()
        if ident != own:
            thread = started.get(ident)
            if thread is not None and not isinstance(thread, dummy):
                return
        calls[0] += 1

    return entered


def unseen_by_dynamo(fn: Callable) -> None:
    """Dynamo's frame hook would take a Python callback run inside a compiled region for a new frame to convert
    (counters["frames"] + 1: a recompile to introspect.compile_counts); marked skipped, it never sees it."""
    try:
        from torch._dynamo.eval_frame import skip_code
    except ImportError:  # a torch without it: the frame is converted once, and skipped from then on
        return
    skip_code(fn.__code__)


def _profiled(hook, step: Callable[[int], object], steps: int) -> None:
    previous = sys.getprofile()
    sys.setprofile(hook)
    try:
        for i in range(steps):
            step(i)
    finally:
        sys.setprofile(previous)


def _monitored(hook, step: Callable[[int], object], steps: int) -> None:
    monitoring = sys.monitoring
    free = [t for t in (monitoring.PROFILER_ID, 3, 4) if monitoring.get_tool(t) is None]
    if not free:
        raise RuntimeError("sys.monitoring's profiler tool ids (2, 3, 4) are all taken")
    tool, events = free[0], monitoring.events.PY_START | monitoring.events.PY_RESUME
    monitoring.use_tool_id(tool, "perfgate counts")
    try:
        for event in (monitoring.events.PY_START, monitoring.events.PY_RESUME):
            monitoring.register_callback(tool, event, hook)
        monitoring.set_events(tool, events)
        for i in range(steps):
            step(i)
    finally:
        monitoring.set_events(tool, 0)
        for event in (monitoring.events.PY_START, monitoring.events.PY_RESUME):
            monitoring.register_callback(tool, event, None)
        monitoring.free_tool_id(tool)


# ---------------------------------------------------------------------------------------------- the profiler


def profiled(step: Callable[[int], object], steps: int, device: torch.device, notes=None) -> dict:
    """{ATEN_OPS, LOOKUPS, KERNELS, CUDA_GRAPHS: how many ran in `steps` steps}, from one profiler session;
    kernels and graph replays None off CUDA."""
    from torch.profiler import ProfilerActivity

    from perfgate.measure.clocks import profiler

    cuda = device.type == "cuda"
    activities = [ProfilerActivity.CPU, *([ProfilerActivity.CUDA] if cuda else [])]
    sync(device)
    with profiler(activities) as prof:
        for i in range(steps):
            step(i)
        sync(device)  # every kernel done, so the profiler has its record
    found = {ATEN_OPS: 0, LOOKUPS: 0, KERNELS: 0 if cuda else None, CUDA_GRAPHS: 0 if cuda else None}
    for event in prof.profiler.kineto_results.events():
        name, kind = event.name(), _activity(event)
        if name.startswith("aten::") and kind in ("cpu_op", ""):
            found[ATEN_OPS] += 1
        elif name == LOOKUP:
            found[LOOKUPS] += 1
        elif cuda and kind == "kernel":
            found[KERNELS] += 1
        elif cuda and name.startswith(GRAPH_LAUNCHES):
            found[CUDA_GRAPHS] += 1
    return found


def _activity(event) -> str:
    """kineto's kind of an event ("cpu_op", "kernel", "cuda_runtime", ...); "" for a torch without the method
    (its CPU and GPU events then tell apart by device)."""
    if hasattr(event, "activity_type"):
        return event.activity_type()
    return "kernel" if event.device_type() == torch.autograd.DeviceType.CUDA else ""


# ---------------------------------------------------------------------------------------------- instructions

# perf_event_open(2): the syscall's number per machine, and the attr fields this counter sets.
PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}
PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS = 0, 1
ATTR_SIZE = 64  # PERF_ATTR_SIZE_VER0: type, size, config, sample_period, sample_type, read_format, flags, ...
DISABLED, EXCLUDE_KERNEL, EXCLUDE_HV = 1 << 0, 1 << 5, 1 << 6  # attr flag bits: start stopped, user space only
PERF_FLAG_FD_CLOEXEC = 1 << 3
IOC_ENABLE, IOC_DISABLE, IOC_RESET = 0x2400, 0x2401, 0x2403  # _IO('$', 0), _IO('$', 1), _IO('$', 3)


def instructions(step: Callable[[int], object], steps: int, device: torch.device, notes: list[str]) -> dict:
    """{INSTRUCTIONS: user-space instructions every thread of this process retired issuing `steps` steps}, or
    None with the reason in `notes` (ENOENT: no hardware counter, a VM without a virtual PMU). The counters stop
    before the closing synchronize, whose spin on the GPU would count the GPU's time; a wait inside a step (an
    .item()) still spins, and counts."""
    try:
        fds = open_counters()
    except OSError as err:
        notes.append(f"instructions: perf_event_open {errno.errorcode.get(err.errno, err.errno)} ({err.strerror})")
        return {INSTRUCTIONS: None}
    try:
        sync(device)
        for fd in fds:
            fcntl.ioctl(fd, IOC_RESET, 0)
            fcntl.ioctl(fd, IOC_ENABLE, 0)
        for i in range(steps):
            step(i)
        for fd in fds:
            fcntl.ioctl(fd, IOC_DISABLE, 0)
        sync(device)
        return {INSTRUCTIONS: sum(struct.unpack("Q", os.read(fd, 8))[0] for fd in fds)}
    finally:
        for fd in fds:
            os.close(fd)


def open_counters() -> list[int]:
    """One stopped instruction counter per thread of this process (threads started later are not counted);
    OSError where the kernel offers none. A thread that ended meanwhile is left out."""
    number = PERF_EVENT_OPEN.get(platform.machine())
    if number is None:
        raise OSError(errno.ENOSYS, f"no perf_event_open syscall number known for {platform.machine()}")
    libc = ctypes.CDLL(None, use_errno=True)
    attr = struct.pack(
        "IIQQQQQ",
        PERF_TYPE_HARDWARE,
        ATTR_SIZE,
        PERF_COUNT_HW_INSTRUCTIONS,
        0,
        0,
        0,
        DISABLED | EXCLUDE_KERNEL | EXCLUDE_HV,
    ).ljust(ATTR_SIZE, b"\0")
    fds: list[int] = []
    for tid in sorted(int(t) for t in os.listdir("/proc/self/task")):
        fd = libc.syscall(number, ctypes.c_char_p(attr), tid, -1, -1, PERF_FLAG_FD_CLOEXEC)
        if fd >= 0:
            fds.append(fd)
            continue
        code = ctypes.get_errno()
        if code != errno.ESRCH:
            for opened in fds:
                os.close(opened)
            raise OSError(code, os.strerror(code))
    return fds
