"""`perfgate deal`: one pytest run dealt over a machine's GPUs, one session a GPU, and judged as one run. Imports
no torch.

    perfgate deal [--gpus all|N] [--out DIR] -- PYTEST_ARGS...

Each shard is `pytest PYTEST_ARGS --perf-shard K/N --perf-data-parallel without` on one GPU
(CUDA_VISIBLE_DEVICES) and an equal share of this process's CPU cores, as if on a machine of its own; the shards
share whatever PYTEST_ARGS share (the base's worktree of --perf-against, the --perf-cache-dir). Each writes
DIR/shard-K/ (results, report, log). A --perf-precompile N among them runs once, before the shards, on every
dealt GPU (DIR/precompile/). Data-parallel cells need several GPUs: where a shard left some out, one more
session runs them on every dealt GPU once the shards are done (DIR/data-parallel/). The shards deal themselves by
DIR/costs.jsonl, a copy of the seconds each cell took in the --perf-cache-dir's earlier runs, where it holds any
(perfgate.plan.costs.snapshot), else by the priors. Then DIR/results.jsonl holds
every session's records, and DIR/report.md and report.json the run's one report: where the sessions' options
give --perf-baseline (PYTEST_ARGS, PYTEST_ADDOPTS or pyproject.toml: perfgate.faces.deal_args.configured),
`perfgate compare` over them (a paired record keeps its verdict on the clocks, so the baseline judges what
carries across machines, as in each live shard), else a paired run's verdict over the shards. On a
machine of one GPU it is the plain pytest run, writing DIR/results.jsonl and DIR/ itself. The exit is every
session's and the compare's as one (exits.combined): 1 where any showed a regression, else the worst code,
never 0 past a session that did not pass.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from perfgate.core import exits
from perfgate.core.children import die_with_parent
from perfgate.core.matrix import DATA_PARALLEL_LEFT_OUT, DEALT_ENV, MAX_PRECOMPILE
from perfgate.faces.deal_args import (
    PRECOMPILE,
    baseline_in,
    configured,
    gated,
    inherited,
    kept_costs,
    paired_in,
    precompile_of,
    refused,
)
from perfgate.faces.deal_outputs import NO_CELLS, clear, exit_of, judge, mark_lost, merge

STOP_S = 120.0  # an interrupted session's close: its verdict, report and workers' exit (a GPU context's release ~20 s)


@dataclass(frozen=True)
class Session:
    """One pytest run of a dealt run: a shard (`part` "K/N"), the data-parallel cells, or the plain run."""

    name: str
    gpus: str | None  # its CUDA_VISIBLE_DEVICES; None: left as it is
    cpus: tuple[int, ...]  # its CPUs; (): not pinned
    out: Path  # its own results, report and log
    extra: tuple[str, ...] = ()  # its own pytest options
    dealt: bool = True  # runs cells deal dealt it, so never precompiles (DEALT_ENV); False: the precompile session

    @property
    def plain(self) -> bool:
        """The one session of a one-GPU run: pytest as the user would run it, its output the terminal's."""
        return not self.extra

    def args(self, pytest_args: Sequence[str]) -> list[str]:
        results = ["--perf-results", str(self.out / "results.jsonl")]
        if gated(configured(pytest_args)):  # a gated run reports, wherever its baseline or base was set
            results += ["--perf-report", str(self.out)]
        return [sys.executable, "-m", "pytest", *pytest_args, *self.extra, *results]

    def where(self) -> str:
        return f"{self.name} on GPU {self.gpus}" + (f", CPUs {_ranges(self.cpus)}" if self.cpus else "")


def _ranges(cpus: Sequence[int]) -> str:
    """0-3,8-11: CPU ids as Linux lists them."""
    spans: list[list[int]] = []
    for cpu in sorted(cpus):
        if spans and cpu == spans[-1][1] + 1:
            spans[-1][1] = cpu
        else:
            spans.append([cpu, cpu])
    return ",".join(f"{a}-{b}" if b > a else str(a) for a, b in spans)


def visible_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES names them: its own list where set (up to an entry that
    hides the rest, as CUDA reads it), else nvidia-smi's."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        names = [gpu.strip() for gpu in listed.split(",")]
        kept = []
        for name in names:
            if not name or name.startswith("-"):
                break
            kept.append(name)
        return kept
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        lines = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, _ in enumerate(line for line in lines if line.startswith("GPU "))]


def cores(cpus: Sequence[int]) -> list[tuple[int, ...]]:
    """`cpus` as whole cores (a core's hyperthreads together, from Linux's thread_siblings_list), in order: a
    share of whole cores keeps two shards off one core's two threads."""
    allowed, seen, out = set(cpus), set(), []
    for cpu in sorted(allowed):
        if cpu in seen:
            continue
        path = Path(f"/sys/devices/system/cpu/cpu{cpu}/topology/thread_siblings_list")
        try:
            siblings = {int(c) for part in path.read_text().strip().split(",") for c in _span(part)}
        except (OSError, ValueError):
            siblings = {cpu}
        core = tuple(sorted(siblings & allowed)) or (cpu,)
        seen.update(core)
        out.append(core)
    return out


def _span(part: str) -> range:
    first, _, last = part.partition("-")
    return range(int(first), int(last or first) + 1)


def plan(gpus_asked: str, gpus: Sequence[str], machine_cores: Sequence[tuple[int, ...]], out: Path) -> list[Session]:
    """The shards: one a GPU asked for (all, or the first N), each an equal contiguous share of whole cores
    (the remainder to the first shards); the plain run where there is one GPU or none and all were asked."""
    if gpus_asked == "all":
        n = max(1, len(gpus))
    else:
        n = int(gpus_asked) if gpus_asked.isdigit() else 0
        if n < 1 or (gpus and n > len(gpus)) or (not gpus and n > 1):
            valid = f"all or 1 to {len(gpus)}" if gpus else "all or 1 (no GPU is visible here)"
            raise ValueError(f"--gpus {gpus_asked!r}: valid: {valid}")
    if n == 1:
        return [Session("the run", gpus[0] if gpus and gpus_asked != "all" else None, (), out)]
    share, extra = divmod(len(machine_cores), n)
    sessions, start = [], 0
    for k in range(n):
        taken = machine_cores[start : start + share + (k < extra)] if share else ()
        start += len(taken)
        cpus = tuple(sorted(c for core in taken for c in core))
        part = ("--perf-shard", f"{k + 1}/{n}", "--perf-data-parallel", "without")
        sessions.append(Session(f"shard {k + 1}/{n}", gpus[k], cpus, out / f"shard-{k}", part))
    return sessions


def precompile_session(shards: Sequence[Session], workers: int, out: Path) -> Session:
    """The shards' cells compiled into the kept cache before any is timed: one collect-only session on every
    dealt GPU, `workers` processes a shard's GPU, as each shard's own precompile had."""
    gpus = ",".join(s.gpus for s in shards if s.gpus is not None)
    cpus = tuple(sorted(c for s in shards for c in s.cpus))
    processes = str(min(MAX_PRECOMPILE, workers * len(shards)))
    extra = ("--collect-only", "-q", "--perf-data-parallel", "without", PRECOMPILE, processes)
    return Session("precompile", gpus, cpus, out / "precompile", extra, dealt=False)


def data_parallel_session(shards: Sequence[Session], out: Path) -> Session:
    """The data-parallel cells the shards left out, on every dealt GPU and CPU at once."""
    gpus = ",".join(s.gpus for s in shards if s.gpus is not None)
    cpus = tuple(sorted(c for s in shards for c in s.cpus))
    return Session("data-parallel cells", gpus, cpus, out / "data-parallel", ("--perf-data-parallel", "only"))


class _Signalled(Exception):
    """SIGINT or SIGTERM reached this process (Ctrl-C, a CI step's limit or cancel)."""

    def __init__(self, signum: int):
        super().__init__(signum)
        self.signum = signum


@contextlib.contextmanager
def _signals_raise():
    def handler(signum, frame):
        raise _Signalled(signum)

    previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)


def _start(session: Session, pytest_args: Sequence[str]) -> subprocess.Popen:
    env = dict(os.environ)
    if session.gpus is not None:
        env["CUDA_VISIBLE_DEVICES"] = session.gpus
    env.pop(DEALT_ENV, None)  # deal's own environment's (a dealt session's nested run) is not this session's
    if session.plain:  # its output is the terminal's, and a terminal's Ctrl-C reaches it as it reaches deal
        return subprocess.Popen(session.args(pytest_args), env=env, preexec_fn=die_with_parent)
    if session.dealt:
        env[DEALT_ENV] = "1"
    session.out.mkdir(parents=True, exist_ok=True)
    cpus = session.cpus

    def prepare() -> None:
        die_with_parent()
        if cpus:
            os.sched_setaffinity(0, cpus)

    with open(session.out / "log.txt", "w", encoding="utf-8") as log:
        return subprocess.Popen(
            session.args(pytest_args),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a session and its workers are killed as one group at the deadline
            preexec_fn=prepare,
        )


def run_sessions(sessions: Sequence[Session], pytest_args: Sequence[str]) -> tuple[list[int], bool]:
    """Start the sessions at once and wait for all. A signal (Ctrl-C, a CI step's SIGTERM) is passed on to each
    session's pytest as SIGINT, so each judges what it measured, writes its report and keeps its records (a
    plain session sharing the terminal had a Ctrl-C already); one still running STOP_S later, or at a second
    signal, is killed with its group. Returns each session's return code as the OS gave it (-N: ended by signal
    N, which `exit_of` reads as 2, never a pass) and whether a signal came."""
    procs: list[subprocess.Popen] = []
    interrupted = False
    with _signals_raise():
        try:
            for session in sessions:
                procs.append(_start(session, pytest_args))
            for proc in procs:
                proc.wait()
        except _Signalled as first:
            interrupted = True
            _stop(procs, [s.plain for s in sessions], first.signum)
    return [proc.wait() for proc in procs], interrupted


def _stop(procs: Sequence[subprocess.Popen], plain: Sequence[bool], signum: int) -> None:
    try:
        for proc, alone in zip(procs, plain):
            if proc.poll() is None and not (alone and signum == signal.SIGINT):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGINT)
        deadline = time.monotonic() + STOP_S
        for proc in procs:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    except _Signalled:  # a second signal: no more waiting
        pass
    previous = {sig: signal.signal(sig, signal.SIG_IGN) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:  # the kill, which no further signal interrupts
        for proc, alone in zip(procs, plain):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill() if alone else os.killpg(proc.pid, signal.SIGKILL)
    finally:
        for sig, action in previous.items():
            signal.signal(sig, action)


def _report(sessions: Sequence[Session], codes: Sequence[int], seconds: float) -> None:
    for session, code in zip(sessions, codes):
        print(f"perfgate deal: {session.where()}: exit {code}; log {session.out / 'log.txt'}")
        print("\n".join(f"  {line}" for line in _closing_lines(session.out / "log.txt")))
    minutes, rest = divmod(int(seconds), 60)
    print(f"perfgate deal: {len(sessions)} session(s) in {minutes}:{rest:02d}")


def _closing_lines(log: Path, keep: int = 12) -> list[str]:
    """A session's verdict from its log: perfgate's summary lines (the last `keep`) and pytest's closing line."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    ours = [line for line in lines if line.startswith("perfgate") or line.startswith("  ") and "perfgate" in line]
    closing = [line for line in lines[-3:] if line.startswith("=") and " in " in line]
    return ours[-keep:] + closing


def _left_out_data_parallel(shards: Sequence[Session]) -> bool:
    for shard in shards:
        with contextlib.suppress(OSError):
            if DATA_PARALLEL_LEFT_OUT in (shard.out / "log.txt").read_text(encoding="utf-8", errors="replace"):
                return True
    return False


def cmd_deal(args: argparse.Namespace) -> int:
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    if not pytest_args:
        print('perfgate deal: give the pytest args after --, e.g. -- perftests -m "gpu and pr"', file=sys.stderr)
        return exits.UNUSABLE
    before = inherited()
    seen = [*before, *pytest_args]  # as the sessions read them (deal_args.configured)
    reasons = refused(pytest_args, before)
    if reasons:
        print("\n".join(f"perfgate deal: {line}" for line in reasons), file=sys.stderr)
        return exits.UNUSABLE
    out = Path(args.out)
    if out.exists() and not out.is_dir():
        print(f"perfgate deal: --out {out} is a file; give a folder for the run's records and report", file=sys.stderr)
        return exits.UNUSABLE
    try:
        shards = plan(args.gpus, visible_gpus(), cores(sorted(os.sched_getaffinity(0))), out)
    except ValueError as err:
        print(f"perfgate deal: {err}", file=sys.stderr)
        return exits.UNUSABLE
    if len(shards) == 1 and shards[0].plain:  # its records and report in DIR are this run's, or none
        clear(out, [])
        return exit_of(run_sessions(shards, pytest_args)[0][0])
    try:
        with _signals_raise():  # a signal between the sessions, or while merging and judging: no half report
            return _deal(shards, pytest_args, out, seen)
    except _Signalled:
        print("perfgate deal: interrupted: the run is not judged (exit 2)", file=sys.stderr)
        return exits.UNUSABLE


def _deal(shards: list[Session], pytest_args: Sequence[str], out: Path, seen: Sequence[str]) -> int:
    """The precompile, the shards, then the data-parallel cells they left out, then the run's one report and
    exit. `seen`: the options as the sessions read them, a config file's included (deal_args.configured)."""
    started = time.monotonic()
    workers, _ = precompile_of(seen)
    _, dealt_args = precompile_of(pytest_args)  # one set in a config file: dealt sessions skip it (DEALT_ENV)
    first = [precompile_session(shards, workers, out)] if workers else []
    clear(out, [s.out for s in (*first, *shards)])
    sessions, codes = list(first), []
    if first:
        codes, interrupted = run_sessions(first, pytest_args)
        if interrupted:
            _report(sessions, codes, time.monotonic() - started)
            return exits.UNUSABLE
        pytest_args = dealt_args
    pytest_args = [*pytest_args, *kept_costs(seen, out)]
    sessions += shards
    more, interrupted = run_sessions(shards, pytest_args)
    codes += more
    crashed = any(exit_of(code) >= exits.BUG and code != NO_CELLS for code in more)
    if _left_out_data_parallel(shards) and not (interrupted or crashed):
        sessions.append(data_parallel_session(shards, out))
        more, late = run_sessions(sessions[-1:], pytest_args)
        codes, interrupted = codes + more, late  # a signal in the data-parallel session: no pass either
    _report(sessions, codes, time.monotonic() - started)
    # pytest's 5: a session the deal left no cell (more GPUs than cells); the others measured.
    ran = [_own(exit_of(code)) for code in codes if code != NO_CELLS] + [exits.UNUSABLE] * interrupted  # past 0s too
    merged = merge([s.out for s in sessions], out)
    if merged is None:
        return exits.combined([*ran, exits.UNUSABLE])  # nothing measured: never a pass
    judged = judge(merged, baseline_in(seen), paired_in(seen), out)
    final = exits.combined([*ran, judged])
    mark_lost(out, [(s.where(), c) for s, c in zip(sessions, codes)], judged, final, interrupted)
    return final


def _own(code: int) -> int:
    """A session's exit as one of perfgate's: pytest's usage error (4) is unusable input (2), and any other code
    past perfgate's (pytest's warnings limit, a signal's) is no verdict: 3, never read as a regression or a pass."""
    return exits.UNUSABLE if code == 4 else code if code <= exits.BUG else exits.BUG


def add_parser(sub) -> None:
    deal = sub.add_parser(
        "deal",
        help="deal one pytest run over this machine's GPUs, a session a GPU with its share of the CPU cores, and "
        "judge it as one run; exit 0 pass, 1 regression, 2 unsure, cannot compare or interrupted, 3 a crash "
        "(docs/gate.md)",
        description="Pytest args after -- select the cells and the gate, e.g. "
        '-- perftests -m "gpu and pr" -p no:randomly --perf-against origin/main --perf-baseline baselines',
    )
    deal.add_argument(
        "--gpus", default="all", help="all (default: every visible GPU, CUDA_VISIBLE_DEVICES else nvidia-smi) or N"
    )
    deal.add_argument("--out", default="out", help="the run's directory: shard-K/, results.jsonl, report.md")
    deal.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS")
    deal.set_defaults(func=cmd_deal)
