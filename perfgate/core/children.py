"""What every child process perfgate starts asks of Linux: to die with its parent. Imports no torch."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (even by SIGKILL, where no handler runs)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the line above: nobody waits for this job
        os._exit(1)
