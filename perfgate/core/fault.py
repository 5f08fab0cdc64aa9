"""Test-only planted faults, to prove each check can fail: `--perf-inject KIND[:ARG]`, named and checked here
(plain data: a job carries one, perfgate.core.job); perfgate.measure.faults plants them.

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
"""

from __future__ import annotations

import math
from dataclasses import dataclass

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


# The faults that measure before they plant (perfgate.measure.faults.slowed: device_slow and host_slow size
# themselves on the cell's own warm step, and a GPU spin's cycle rate is timed for slow and device_slow), and the
# prefix of their shadows (Fault.shadow), which no --perf-inject names.
MEASURING = ("slow", "device_slow", "host_slow")
SHADOW = "shadow_"


@dataclass(frozen=True)
class Fault:
    kind: str
    arg: float

    def shadow(self) -> Fault | None:
        """What the other side of a planted pair runs: for a fault that measures before it plants (device_slow
        with a profiler session and a spin's calibration, host_slow with timed steps, slow with the spin's), the
        same measuring and no plant, so that the two processes' histories match but for the planted work; None
        for any other fault. An engine that predates shadows plants nothing for the unknown kind."""
        return Fault(SHADOW + self.kind, self.arg) if self.kind in MEASURING else None


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
