"""Other processes on a cell's GPU make its record unfit: the listing, whose processes are this run's own, and
when nobody can tell (no nvidia-smi, another PID namespace)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.measure import neighbours as nb

ME = os.getpid()
SMI = "GPU-aaaa, {me}, 5364\nGPU-aaaa, 595, 17000\nGPU-bbbb, 601, 1440\nGPU-aaaa, 700, [N/A]\n"


def _runner(stdout: str = "", error: Exception | None = None):
    def run(argv, **kwargs):
        assert argv[0] == "nvidia-smi" and kwargs["timeout"] == nb.QUERY_TIMEOUT_S
        if error is not None:
            raise error
        return subprocess.CompletedProcess(argv, 0, stdout=stdout)

    return run


def test_the_listing_reads_uuid_pid_and_mib_and_skips_what_it_cannot_read():
    rows = nb.compute_processes(_runner(SMI.format(me=1) + "No running processes found\n"))
    assert rows == [
        ("GPU-aaaa", 1, 5364.0),
        ("GPU-aaaa", 595, 17000.0),
        ("GPU-bbbb", 601, 1440.0),
        ("GPU-aaaa", 700, None),
    ]


@pytest.mark.parametrize(
    "error",
    [
        FileNotFoundError("nvidia-smi"),
        subprocess.TimeoutExpired("nvidia-smi", 10),
        subprocess.CalledProcessError(9, "nvidia-smi"),
    ],
    ids=["missing", "hung", "failed"],
)
def test_no_listing_is_none_not_an_empty_gpu(error):
    assert nb.compute_processes(_runner(error=error)) is None


def test_neighbours_are_the_others_on_this_process_gpus_only():
    rows = nb.compute_processes(_runner(SMI.format(me=ME)))
    assert nb.neighbours(rows, ME, {ME}) == [{"pid": 595, "mib": 17000.0}, {"pid": 700, "mib": None}]
    assert nb.neighbours(rows, ME, {ME, 595, 700}) == []  # this run's own processes (its compile workers)


def test_a_listing_without_this_process_cannot_tell():
    """Another PID namespace (a container) lists pids this process cannot match: nothing is refused."""
    rows = nb.compute_processes(_runner(SMI.format(me=ME + 100000)))
    assert nb.neighbours(rows, ME, {ME}) is None


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
def test_own_processes_are_the_ancestors_and_descendants_not_the_siblings():
    a, b = (subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) for _ in range(2))
    try:
        own_a = nb.own_processes(a.pid)
        assert {a.pid, ME, os.getppid()} <= own_a  # itself and its ancestors (pytest, an isolated cell's parent)
        assert b.pid not in own_a  # a sibling is another's
        assert {a.pid, b.pid} <= nb.own_processes(ME)  # descendants (compile and autotune workers)
    finally:
        for child in (a, b):
            child.kill()
            child.wait()


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
def test_a_rank_rooted_at_its_launcher_counts_the_other_ranks_and_their_workers_as_its_own():
    """DDP ranks are siblings under the process that started them: one rank's stray context on another's
    GPU is the cell's own, not a neighbour. A rank's own compile workers stay its own."""
    sleeper = (
        "import subprocess, sys, time; "
        "subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)']); time.sleep(30)"
    )
    a, b = (subprocess.Popen([sys.executable, "-c", sleeper]) for _ in range(2))
    workers: set[int] = set()
    try:
        for _ in range(100):  # until each has started its worker
            workers = {pid for pid, up in nb.parents().items() if up in (a.pid, b.pid)}
            if len(workers) == 2:
                break
            time.sleep(0.05)
        assert len(workers) == 2
        assert {a.pid, b.pid, ME} | workers <= nb.own_processes(a.pid, root=ME)
        assert b.pid not in nb.own_processes(a.pid)
    finally:
        for pid in workers:
            os.kill(pid, 9)
        for child in (a, b):
            child.kill()
            child.wait()


def test_every_ranks_neighbours_merge_into_one_list_and_none_only_if_no_rank_could_tell():
    rank0, rank1 = [{"pid": 595, "mib": 1000.0}], [{"pid": 595, "mib": 17000.0}, {"pid": 601, "mib": None}]
    assert nb.merged([rank0, rank1]) == [{"pid": 595, "mib": 17000.0}, {"pid": 601, "mib": None}]
    assert nb.merged([None, []]) == [] and nb.merged([None, rank0]) == rank0
    assert nb.merged([None, None]) is None


def test_a_watch_keeps_every_neighbour_it_saw_and_the_reason_names_them():
    listings = iter([SMI.format(me=ME), "GPU-aaaa, {me}, 5364\nGPU-aaaa, 595, 18000\n".format(me=ME)])
    watch = nb.Watch(lambda: nb.compute_processes(_runner(next(listings))))
    watch.sample()
    watch.sample()
    assert watch.found == [{"pid": 595, "mib": 18000.0}, {"pid": 700, "mib": None}]
    reason = nb.unfit_reason(watch.found)
    assert (
        reason.startswith("2 other process(es) held the GPU while this cell was timed: pid 595 (18000 MiB), pid 700;")
        and "nvidia-smi" in reason
    )


def test_a_watch_that_could_not_tell_says_none_and_refuses_nothing():
    watch = nb.Watch(lambda: None)
    watch.sample()
    assert watch.found is None and nb.unfit_reason(watch.found) == "" and nb.unfit_reason([]) == ""
