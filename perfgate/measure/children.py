"""What a parent needs to watch a child process that measures (an isolated cell, a data-parallel cell's ranks):
the child's event file read as it grows, the stage it last announced, how it died and its last stderr lines;
and, in the child, dying with the parent. Imports no torch.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import signal
import sys
from pathlib import Path
from typing import Callable

POLL_S = 0.5
# A stage that runs this long says so again every this many seconds, so a slow max-autotune compile can be
# told from a hang while it runs.
HEARTBEAT_S = 60.0
# The stderr lines of a dead child echoed to this process's stderr (pytest shows them with the failure).
STDERR_TAIL_LINES = 40
_PERFGATE_ROOT = str(Path(__file__).resolve().parents[2])  # a child must import this copy


def import_path() -> list[str]:
    """This process's sys.path, absolute, for a child to import from where this process imports, as
    multiprocessing's spawn does (a test's registry module sits in a directory pytest put on sys.path)."""
    return [os.path.abspath(p) if p else os.getcwd() for p in sys.path]


def child_environ(**extra: str) -> dict[str, str]:
    """This process's environment for a child, with this checkout first on PYTHONPATH (an editable install
    of another checkout must not win) and `extra` variables set."""
    path = os.pathsep.join(filter(None, [_PERFGATE_ROOT, os.environ.get("PYTHONPATH")]))
    return {**os.environ, **extra, "PYTHONPATH": path}


class Events:
    """The child's event file, read as it grows: whole lines only (a line being written waits)."""

    def __init__(self, path: Path):
        self.path, self.offset = path, 0
        self.last_stage, self.checkpoint, self.record = "starting the process", None, None

    def read(self, progress: Callable[[str], None], record_compiled) -> None:
        if not self.path.exists():
            return
        with self.path.open("rb") as fh:
            fh.seek(self.offset)
            data = fh.read()
        whole = data[: data.rfind(b"\n") + 1]
        self.offset += len(whole)
        for line in whole.decode("utf-8", errors="replace").splitlines():
            event = json.loads(line)
            if "progress" in event:
                self.last_stage = event["progress"]
                progress(event["progress"])
            elif "compiled_ms" in event and record_compiled is not None:
                record_compiled(event["compiled_ms"])
            elif "checkpoint" in event:
                self.checkpoint = event["checkpoint"]
            elif "record" in event:
                self.record = event["record"]


def stage_of(message: str, cell_id: str) -> str:
    """"compiling (inductor_default)" from the progress line "<cell id>: compiling (inductor_default)"."""
    return message[len(cell_id) + 2:] if message.startswith(f"{cell_id}: ") else message


def death(returncode: int) -> str:
    if returncode < 0:
        with contextlib.suppress(ValueError):
            return f"killed by {signal.Signals(-returncode).name}"
    return f"exit status {returncode}"


def stderr_tail(path: Path) -> list[str]:
    lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    return lines[-STDERR_TAIL_LINES:]


def kill_groups(*children) -> None:
    """Each child's whole process group (its own session: inductor's compile workers too), if it still runs;
    every group is killed before any is waited for. An interrupted precompile of 3 GPU children took ~21 s
    to end on an H100 (2026-11-24), ~2 s on a CPU box, not yet explained; a likely part: a killed process
    that held a GPU context ends only once the driver has freed it, and killing each child after the last
    one ended would add those waits up."""
    for child in children:
        if child.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(child.pid, signal.SIGKILL)
    for child in children:
        child.wait()


def die_with_parent() -> None:
    """Linux: SIGKILL this process when its parent dies (even by SIGKILL, where no handler runs)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # 1 = PR_SET_PDEATHSIG
    if os.getppid() == 1:  # the parent died before the line above: nobody waits for this cell
        os._exit(1)
