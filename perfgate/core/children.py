"""What every child process perfgate starts asks of Linux, to die with its parent, and the environment a
measuring child gets unless told otherwise. Imports no torch."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal

# Variables a measuring process gets where neither this process's environment nor a side's own sets them.
# TEARDOWN_CUPTI=1: Kineto detaches CUPTI after each profiler session (perfgate.measure.env.detach_cupti). Given
# here too, not only by the perfgate each side imports, so a base revision whose perfgate predates that detaches
# like this tree's side: one attached side would time a host-bound step 7-15 % slower than the other.
MEASURING_ENV = {"TEARDOWN_CUPTI": "1"}


def measuring_environ(extra: dict[str, str]) -> dict[str, str]:
    """A measuring child's environment: MEASURING_ENV, under this process's environment, under `extra`."""
    return {**MEASURING_ENV, **os.environ, **extra}


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (even by SIGKILL, where no handler runs)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the line above: nobody waits for this job
        os._exit(1)
