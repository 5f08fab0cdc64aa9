"""`perfgate deal`: one pytest run dealt over a machine's GPUs, one session a GPU, and judged as one run. Imports
no torch.

    perfgate deal [--gpus all|N] [--out DIR] -- PYTEST_ARGS...

Each shard is `pytest PYTEST_ARGS --perf-shard K/N` on one GPU (CUDA_VISIBLE_DEVICES) and an equal share of this
process's CPUs, as if on a machine of its own; the shards share whatever PYTEST_ARGS share (the base's worktree
of --perf-against, the --perf-cache-dir). Each writes DIR/shard-K/ (results, report, log). Then DIR/results.jsonl
holds every shard's records, and DIR/report.md and report.json the run's one report: where PYTEST_ARGS give
--perf-baseline, `perfgate compare` over them (a paired record keeps its verdict on the clocks, so the baseline
judges what carries across machines, as in each live shard), else a paired run's verdict over the shards. On
one GPU it is the plain pytest run, writing DIR/results.jsonl and DIR/ itself. The exit is the shards' and the
compare's as one session's would be (combined): 1 where any showed a regression, else the largest code, never 0
past a shard that did not pass.
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

OWNED = ("--perf-shard", "--perf-results", "--perf-report")  # set per shard by deal itself


@dataclass(frozen=True)
class Shard:
    index: int  # 0-based
    count: int
    gpu: str | None  # its CUDA_VISIBLE_DEVICES; None: left as it is (one shard)
    cpus: tuple[int, ...]  # its CPU share; () where there are fewer CPUs than shards: not pinned
    out: Path  # its own results, report and log

    def args(self, pytest_args: Sequence[str]) -> list[str]:
        shard = ["--perf-shard", f"{self.index + 1}/{self.count}"] if self.count > 1 else []
        results = ["--perf-results", str(self.out / "results.jsonl")]
        if any(a.startswith(("--perf-baseline", "--perf-against")) for a in pytest_args):  # a gated run reports
            results += ["--perf-report", str(self.out)]
        return [sys.executable, "-m", "pytest", *pytest_args, *shard, *results]

    def where(self) -> str:
        cpus = f", CPUs {self.cpus[0]}-{self.cpus[-1]}" if self.cpus else ""
        return f"shard {self.index + 1}/{self.count} on GPU {self.gpu}{cpus}"


def combined(codes: Sequence[int]) -> int:
    """Several sessions' exits as one: a regression shown anywhere is 1, else the worst (2 unsure, 3 a bug)."""
    return exits.REGRESSION if exits.REGRESSION in codes else max(codes, default=exits.PASS)


def visible_gpus() -> list[str]:
    """This machine's GPUs as CUDA_VISIBLE_DEVICES names them: its own list where set, else nvidia-smi's."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        return [gpu.strip() for gpu in listed.split(",") if gpu.strip()]
    smi = shutil.which("nvidia-smi")
    if not smi:
        return []
    try:
        lines = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=60).stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return []
    return [str(i) for i, line in enumerate(line for line in lines if line.startswith("GPU "))]


def plan(gpus_asked: str, gpus: Sequence[str], cpus: Sequence[int], out: Path) -> list[Shard]:
    """The shards: one a GPU asked for (all, or the first N), each with an equal contiguous share of `cpus`."""
    if gpus_asked == "all":
        n = max(1, len(gpus))
    else:
        n = int(gpus_asked) if gpus_asked.isdigit() else 0
        if n < 1 or (gpus and n > len(gpus)) or (not gpus and n > 1):
            valid = f"all or 1 to {len(gpus)}" if gpus else "all or 1 (no GPU is visible here)"
            raise ValueError(f"--gpus {gpus_asked!r}: valid: {valid}")
    if n == 1:
        return [Shard(0, 1, gpus[0] if gpus else None, (), out)]
    share = len(cpus) // n
    cpus = sorted(cpus)
    return [
        Shard(k, n, gpus[k], tuple(cpus[k * share : (k + 1) * share]) if share else (), out / f"shard-{k}")
        for k in range(n)
    ]


def owned_in(pytest_args: Sequence[str]) -> list[str]:
    return [a for a in pytest_args if any(a == o or a.startswith(o + "=") for o in OWNED)]


def baseline_in(pytest_args: Sequence[str]) -> str | None:
    """--perf-baseline's value in the pytest args (either spelling), else None."""
    for i, arg in enumerate(pytest_args):
        if arg == "--perf-baseline" and i + 1 < len(pytest_args):
            return pytest_args[i + 1]
        if arg.startswith("--perf-baseline="):
            return arg.split("=", 1)[1]
    return None


def _start(shard: Shard, pytest_args: Sequence[str]) -> subprocess.Popen:
    env = dict(os.environ)
    if shard.gpu is not None:
        env["CUDA_VISIBLE_DEVICES"] = shard.gpu
    if shard.count == 1:  # the plain run: its output is the terminal's
        return subprocess.Popen(shard.args(pytest_args), env=env)
    shard.out.mkdir(parents=True, exist_ok=True)
    with open(shard.out / "log.txt", "w", encoding="utf-8") as log:
        cpus = shard.cpus
        return subprocess.Popen(
            shard.args(pytest_args),
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,  # a shard and its workers are killed as one group
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )


def _closing_lines(log: Path, keep: int = 12) -> list[str]:
    """A shard's verdict from its log: perfgate's summary lines (the last `keep`) and pytest's closing line."""
    try:
        lines = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return []
    ours = [line for line in lines if line.startswith("perfgate") or line.startswith("  ") and "perfgate" in line]
    closing = [line for line in lines[-3:] if line.startswith("=") and " in " in line]
    return ours[-keep:] + closing


def run_shards(shards: list[Shard], pytest_args: Sequence[str]) -> list[int]:
    """Start every shard at once and wait for all. An interrupt (Ctrl-C, a CI step's SIGTERM) is passed on as
    SIGTERM, so each session judges what it measured and keeps its records (the plugin's interrupted run); one
    still running STOP_S later is killed with its group. A shard ended by a signal reads as exit 2: never a pass."""
    started = time.monotonic()
    procs = [_start(shard, pytest_args) for shard in shards]
    grouped = len(procs) > 1  # shards in sessions of their own; one shard shares this terminal's group

    def terminated(signum, frame):
        raise _Terminated

    previous = signal.signal(signal.SIGTERM, terminated)
    try:
        for proc in procs:
            proc.wait()
    except KeyboardInterrupt:  # a terminal's Ctrl-C reached a lone shard itself; grouped shards are told
        _stop(procs, grouped, tell=grouped)
    except _Terminated:
        _stop(procs, grouped, tell=True)
    finally:
        signal.signal(signal.SIGTERM, previous)
    codes = [code if (code := proc.wait()) >= 0 else exits.UNUSABLE for proc in procs]
    if len(shards) > 1:
        minutes, seconds = divmod(int(time.monotonic() - started), 60)
        for shard, code in zip(shards, codes):
            print(f"perfgate deal: {shard.where()}: exit {code}; log {shard.out / 'log.txt'}")
            print("\n".join(f"  {line}" for line in _closing_lines(shard.out / "log.txt")))
        print(f"perfgate deal: {len(shards)} shard(s) in {minutes}:{seconds:02d}")
    return codes


STOP_S = 120.0  # an interrupted session's close: its report, the workers' exit (a GPU context's release: ~20 s)


class _Terminated(Exception):
    """SIGTERM reached this process (a CI step's limit, a cancel)."""


def _stop(procs: list[subprocess.Popen], grouped: bool, tell: bool) -> None:
    def signal_each(sig: int) -> None:
        for proc in procs:
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, sig) if grouped else proc.send_signal(sig)

    if tell:
        signal_each(signal.SIGTERM)
    deadline = time.monotonic() + STOP_S
    for proc in procs:
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
    signal_each(signal.SIGKILL)


def _merge_results(shards: list[Shard], out: Path) -> Path:
    """Every shard's records in one file, shard by shard: what the later steps (report, history) read."""
    merged = out / "results.jsonl"
    with open(merged, "w", encoding="utf-8") as sink:
        for shard in shards:
            path = shard.out / "results.jsonl"
            if path.exists():
                sink.write(path.read_text(encoding="utf-8"))
    return merged


def cmd_deal(args: argparse.Namespace) -> int:
    pytest_args = args.pytest_args[1:] if args.pytest_args[:1] == ["--"] else args.pytest_args
    owned = owned_in(pytest_args)
    if owned:
        print(f"perfgate deal: {', '.join(owned)}: deal sets {', '.join(OWNED)} for each shard", file=sys.stderr)
        return exits.UNUSABLE
    out = Path(args.out)
    try:
        shards = plan(args.gpus, visible_gpus(), sorted(os.sched_getaffinity(0)), out)
    except ValueError as err:
        print(f"perfgate deal: {err}", file=sys.stderr)
        return exits.UNUSABLE
    codes = run_shards(shards, pytest_args)
    if len(shards) == 1:
        return codes[0]
    merged = _merge_results(shards, out)
    baseline = baseline_in(pytest_args)
    if not merged.stat().st_size:
        return combined(codes)
    if baseline is None:  # a paired run's verdict over every shard, as the one session would have written it
        from perfgate.ab.verdict import PairedVerdict
        from perfgate.core.output import OutputError
        from perfgate.core.records_file import RecordFileError, all_records

        try:
            paired = PairedVerdict.of(all_records([str(merged)]))
            if paired.cells:
                paired.write_reports(str(out))
        except (RecordFileError, OutputError) as err:
            print(f"perfgate deal: no report of the run: {err}", file=sys.stderr)
            return combined([*codes, exits.UNUSABLE])
        return combined(codes)
    from perfgate.faces.compare import cmd_compare

    judged = argparse.Namespace(
        results=[str(merged)], baseline=baseline, markdown=str(out / "report.md"), json=str(out / "report.json")
    )
    return combined([*codes, cmd_compare(judged)])


def add_parser(sub) -> None:
    deal = sub.add_parser(
        "deal",
        help="deal one pytest run over this machine's GPUs, a session a GPU with its share of the CPUs, and judge "
        "it as one run; exit 0 pass, 1 regression, 2 unsure or cannot compare (docs/gate.md)",
        description="Pytest args after -- select the cells and the gate, e.g. "
        '-- perftests -m "gpu and pr" -p no:randomly --perf-against origin/main --perf-baseline baselines',
    )
    deal.add_argument(
        "--gpus", default="all", help="all (default: every visible GPU, CUDA_VISIBLE_DEVICES else nvidia-smi) or N"
    )
    deal.add_argument("--out", default="out", help="the run's directory: shard-K/, results.jsonl, report.md")
    deal.add_argument("pytest_args", nargs=argparse.REMAINDER, metavar="-- PYTEST_ARGS")
    deal.set_defaults(func=cmd_deal)
