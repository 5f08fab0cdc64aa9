"""Other processes on the GPU a cell times on. A stray job, or an orphan of an earlier run, takes the GPU's time
from the cell and moves both its clocks, with no trace in the figures: seen on an H100 lease (2026-11-24), where
seven orphaned compile processes left eager's device time 9-26 % high in 6 of 9 cells, every figure plausible.

A cell lists the GPU's compute processes (nvidia-smi, which reads NVML) as it starts timing and again after
its clocks. A process on a GPU that this process holds a context on, and outside this run's own process tree
(its ancestors: pytest, an isolated cell's parent; its descendants: inductor's compile and autotune workers),
is a neighbour: the record names it and is unfit, so the gate refuses it and no baseline folds it. Where the
listing cannot say (no nvidia-smi, or another PID namespace, where this process is not among the pids it
lists) the record says so with null, and nothing is refused. Imports no torch.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

QUERY = ["nvidia-smi", "--query-compute-apps=gpu_uuid,pid,used_memory", "--format=csv,noheader,nounits"]
QUERY_TIMEOUT_S = 10.0  # a hung driver or nvidia-smi must not hang the cell


def compute_processes(run=subprocess.run) -> list[tuple[str, int, float | None]] | None:
    """(GPU uuid, pid, MiB) for every process holding a context on a GPU; None where nvidia-smi is missing or
    fails. MiB is None where the driver does not report it ("[N/A]")."""
    try:
        out = run(QUERY, capture_output=True, text=True, timeout=QUERY_TIMEOUT_S, check=True).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    rows = []
    for line in out.splitlines():
        parts = [part.strip() for part in line.split(",")]
        if len(parts) != 3 or not parts[1].isdigit():
            continue
        try:
            mib = float(parts[2])
        except ValueError:
            mib = None
        rows.append((parts[0], int(parts[1]), mib))
    return rows


def parents(proc: Path = Path("/proc")) -> dict[int, int]:
    """pid -> parent pid of every process /proc lists (one that ends while it is read is left out)."""
    parent = {}
    for stat in proc.glob("[0-9]*/stat"):
        try:  # the name field may hold spaces and parentheses: the fields after its last ")" are fixed
            parent[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
    return parent


def own_processes(me: int, proc: Path = Path("/proc"), root: int | None = None) -> set[int]:
    """`me`, its ancestors and the descendants of `root` (`me` unless given; Linux /proc): the processes of
    this run. A data-parallel rank gives its launcher as root, so that the other ranks are its own too."""
    parent = parents(proc)
    own, pid = {me}, me
    while parent.get(pid, 0) > 1:
        pid = parent[pid]
        own.add(pid)
    frontier = seen = {me if root is None else root}
    while frontier:
        frontier = {child for child, up in parent.items() if up in frontier and child not in seen}
        seen = seen | frontier
    return own | seen


def neighbours(rows: list[tuple[str, int, float | None]], me: int, own: set[int]) -> list[dict] | None:
    """The processes outside `own` on the GPUs where `me` holds a context; None when `me` is not listed (the
    listing's pids are another namespace's, or this process has no context yet): then nobody can tell."""
    mine = {uuid for uuid, pid, _ in rows if pid == me}
    if not mine:
        return None
    return [{"pid": pid, "mib": mib} for uuid, pid, mib in rows if uuid in mine and pid not in own]


class Watch:
    """The neighbours seen over a cell's samples: `found` is None until a sample could tell, then a list
    (one entry a pid, its largest MiB)."""

    def __init__(self, list_processes=compute_processes, root: int | None = None):
        self.list_processes, self.root, self.found = list_processes, root, None

    def sample(self) -> None:
        rows = self.list_processes()
        me = os.getpid()
        # A paired side's partner shares the GPU by design (perfgate.measure.duet sets the variable).
        peers = {int(pid) for pid in os.environ.get("PERFGATE_PAIRED_PEERS", "").split(",") if pid.strip()}
        seen = None if rows is None else neighbours(rows, me, own_processes(me, root=self.root) | peers)
        if seen is not None:
            self.found = merged([self.found or [], seen])


def merged(founds: list[list[dict] | None]) -> list[dict] | None:
    """One list of the neighbours in `founds` (several samples, or every rank's), each pid once with its
    largest MiB; None when none of them could tell."""
    if all(found is None for found in founds):
        return None
    by_pid: dict[int, dict] = {}
    for n in (n for found in founds for n in found or []):
        old = by_pid.get(n["pid"])
        if old is None or (n["mib"] or 0) > (old["mib"] or 0):
            by_pid[n["pid"]] = n
    return sorted(by_pid.values(), key=lambda n: n["pid"])


def unfit_reason(found: list[dict] | None) -> str:
    """Why a record timed beside `found` cannot be trusted; "" when nothing was found or nobody could tell."""
    if not found:
        return ""
    named = ", ".join(f"pid {n['pid']}" + (f" ({n['mib']:.0f} MiB)" if n["mib"] is not None else "") for n in found[:4])
    more = f" and {len(found) - 4} more" if len(found) > 4 else ""
    return (
        f"{len(found)} other process(es) held the GPU while this cell was timed: {named}{more}; its clocks "
        f"are not its own (nvidia-smi shows them)"
    )
