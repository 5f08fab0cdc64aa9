"""The pytest face when things go wrong: impossible figures, a crash at the session end, nothing selected."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from perfgate.core.records_file import load_records
from perfgate.measure.neighbours import parents

from tiny_suite import FAST, fixture

pytest.importorskip("torch")
suite = fixture()

# A conftest that makes every cell's record claim ok with a NaN speedup, as a broken measurement might.
NAN_SPEEDUP = """
pytest_plugins = ["perfgate.plugin"]
import math
import perfgate.measure.cell

_real = perfgate.measure.cell.run_cell

def run_cell(*args, **kwargs):
    record = _real(*args, **kwargs)
    record["speedup"] = math.nan
    return record

perfgate.measure.cell.run_cell = run_cell
"""

# A conftest whose gate crashes: a bug in perfgate at the session end.
BROKEN_GATE = """
pytest_plugins = ["perfgate.plugin"]
import perfgate.judge.gate

def gate_run(*args, **kwargs):
    raise ZeroDivisionError("a bug in the gate")

perfgate.judge.gate.gate_run = gate_run
"""

# A conftest whose disk fills once the session has started: every append of a record fails.
DISK_FULL = """
pytest_plugins = ["perfgate.plugin"]
import errno, os
import perfgate.core.records_file


def append_record(path, record):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


perfgate.core.records_file.append_record = append_record
"""


def test_a_disk_that_fills_mid_run_fails_no_cell_and_exits_2_not_1(suite):
    suite.makeconftest(DISK_FULL)
    out = suite.runpytest_subprocess(*FAST, "-k", "infer", f"--perf-results={suite.path / 'r.jsonl'}")
    out.assert_outcomes(passed=1)
    assert out.ret == 2
    out.stdout.fnmatch_lines([f"*could not write records to {suite.path / 'r.jsonl'} (exit 2): No space left*"])


def test_an_ok_record_with_a_nan_speedup_is_a_failed_cell(suite):
    suite.makeconftest(NAN_SPEEDUP)
    results = suite.path / "r.jsonl"
    out = suite.runpytest_subprocess(*FAST, "-k", "train", f"--perf-results={results}")
    out.assert_outcomes(failed=1)
    out.stdout.fnmatch_lines(["*mlp-train-aot_eager-fp32: bad figures: speedup nan (must be a finite number > 0)*"])


def test_a_crash_in_the_gate_exits_3_and_the_history_is_still_written(suite, tmp_path):
    suite.makeconftest(BROKEN_GATE)
    db = tmp_path / "h.sqlite"
    (tmp_path / "none").mkdir()  # an empty baseline directory: the gate is reached, and crashes
    out = suite.runpytest_subprocess(
        *FAST,
        "-k",
        "infer",
        f"--perf-results={suite.path / 'r.jsonl'}",
        f"--perf-history={db}",
        f"--perf-baseline={tmp_path / 'none'}",
    )
    assert out.ret == 3
    out.stdout.fnmatch_lines(
        ["*history: 1 record(s) appended*", "*internal error while trying to gate the run (exit 3): ZeroDivisionError*"]
    )
    with sqlite3.connect(db) as conn:
        assert conn.execute("select count(*) from results").fetchone()[0] == 1


def test_no_cell_selected_says_why(suite):
    out = suite.runpytest_inprocess("-m", "cpu", "--perf-precisions=amp_bf16", "-p", "no:randomly")
    assert out.ret == 5
    out.stdout.fnmatch_lines(
        [
            "perfgate: no cell selected: --perf-precisions amp_bf16 matches * cell(s), all gpu "
            "cells*-m 'cpu' removed every one of them*"
        ]
    )


def test_an_isolated_cell_runs_in_its_own_process_and_feeds_the_benchmark(suite):
    results = suite.path / "r.jsonl"
    out = suite.runpytest_subprocess(
        *FAST, "--perf-isolate=all", "-k", "infer", f"--perf-results={results}", "--benchmark-json=b.json"
    )
    out.assert_outcomes(passed=1)
    (record,) = load_records([results])
    assert record["status"] == "ok" and record["env"]["fingerprint"].startswith("cpu-")
    assert record["process"] == "worker"
    bench = json.loads((suite.path / "b.json").read_text())
    assert len(bench["benchmarks"][0]["stats"]["data"]) == 3 and "perfgate" in bench["machine_info"]
    out.stdout.fnmatch_lines(
        [
            "*[[]perfgate] cpu-mlp-infer-aot_eager-fp32: compiling (aot_eager)*",
            "*[[]perfgate] [[]1/1] elapsed *: cpu-mlp-infer-aot_eager-fp32: ok, *x * wall*",
            "perfgate: 1 cell(s) in *; slowest: cpu-mlp-infer-aot_eager-fp32 * s",
        ]
    )


def test_a_hung_compile_times_out_and_keeps_what_was_measured(suite):
    suite.makeconftest(
        'pytest_plugins = ["perfgate.plugin"]\nimport perfgate.measure.launch\n'
        "perfgate.measure.launch.HEARTBEAT_S = 4  # a long stage says so while it runs\n"
    )
    results = suite.path / "r.jsonl"
    out = suite.runpytest_subprocess(
        *FAST,
        "--perf-isolate=all",
        "--perf-cell-timeout=20",
        "--perf-inject=hang",
        "-k",
        "train",
        f"--perf-results={results}",
    )
    out.assert_outcomes(failed=1)
    (record,) = load_records([results])
    assert record["reason"] == "timed out after 20 s while compiling (aot_eager)"
    assert record["env"]["fingerprint"] and record["started_at"]  # the checkpoint before the hang, kept
    out.stdout.fnmatch_lines(
        ["*cpu-mlp-train-aot_eager-fp32: still compiling (aot_eager) after * s (cell limit 20 s, * s used)*"]
    )


def _children(pid: int) -> list[int]:
    """Pids whose parent is `pid` (Linux /proc)."""
    return [child for child, parent in parents().items() if parent == pid]


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=["SIGTERM", "SIGKILL"])
def test_a_killed_session_kills_the_cells_process_too(suite, signum):
    """`timeout` ends pytest with SIGTERM; the isolated cell runs in its own process group, which the signal
    does not reach. Seen on an H100: the orphan went on timing beside the next run's cells. SIGTERM is an
    interrupt (pytest ends the session); after a SIGKILL the child dies with its parent (PR_SET_PDEATHSIG)."""
    results = suite.path / "r.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *FAST,
            "--perf-isolate=all",
            "--perf-inject=hang:120",
            "-k",
            "train",
            f"--perf-results={results}",
        ],
        cwd=suite.path,
        env=os.environ.copy(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    lines, deadline = [], time.monotonic() + 120
    for line in proc.stdout:  # the parent says "compiling" once the child reached the hang
        lines.append(line)
        if "compiling (aot_eager)" in line or time.monotonic() > deadline:
            break
    cells = [pid for pid in _children(proc.pid) if "perfgate.measure.child" in Path(f"/proc/{pid}/cmdline").read_text()]
    assert cells, "".join(lines)
    proc.send_signal(signum)
    output = proc.communicate(timeout=60)[0]
    for _ in range(50):
        if not any(_alive(pid) for pid in cells):
            break
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in cells), output
    assert proc.returncode == (2 if signum == signal.SIGTERM else -signal.SIGKILL), output  # 2: interrupted
    (record,) = load_records([results])  # the checkpoint before the hang is kept
    assert record["status"] == "failed" and record["started_at"]


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads processes from Linux /proc")
def test_a_killed_precompile_kills_its_compiling_children_too(suite, tmp_path):
    """Seen on an H100 lease: a precompile killed by the device call's limit left its seven children
    compiling and autotuning on the GPU beside the next calls' timed cells. Each child runs in its own session
    (so a timeout can kill its compile workers with it), which no signal to the parent reaches."""
    from tiny_suite import TINY_SUITE

    slow = TINY_SUITE.replace('cpu_variants=("aot_eager",)', 'cpu_variants=("inductor_default",)').replace(
        "def build(config):\n", "def build(config):\n    import time\n    time.sleep(120)\n"
    )
    suite.makepyfile(test_tiny=slow)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "pytest",
            *FAST,
            "--collect-only",
            "--perf-precompile=1",
            f"--perf-cache-dir={tmp_path}",
        ],
        cwd=suite.path,
        env=os.environ.copy(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    children, deadline = [], time.monotonic() + 60
    while not children and time.monotonic() < deadline:
        children = [
            pid
            for pid in _children(proc.pid)
            if "perfgate.measure.child" in Path(f"/proc/{pid}/cmdline").read_text(errors="replace")
        ]
        time.sleep(0.2)
    assert children, "no precompile child started"
    time.sleep(2)  # past its first lines (PR_SET_PDEATHSIG), still in the 120 s build
    proc.kill()
    proc.wait(timeout=30)
    for _ in range(50):
        if not any(_alive(pid) for pid in children):
            break
        time.sleep(0.1)
    assert not any(_alive(pid) for pid in children)


def test_a_crashing_cell_fails_alone_and_the_session_goes_on(suite):
    results = suite.path / "r.jsonl"
    out = suite.runpytest_subprocess(*FAST, "--perf-isolate=all", "--perf-inject=crash", f"--perf-results={results}")
    out.assert_outcomes(failed=2)  # both cells ran, each in its own process, each died alone
    records = load_records([results])
    assert len(records) == 2
    for record in records:
        assert record["reason"].startswith("the cell's process died (killed by SIGSEGV) while compiling")
    out.stdout.fnmatch_lines([f"records: {results}"])


@pytest.mark.parametrize("value", ["0", "-5", "nan", "inf"])
def test_a_time_limit_that_cannot_mean_what_it_says_is_refused(suite, value):
    out = suite.runpytest_inprocess(*FAST, f"--perf-cell-timeout={value}")
    assert out.ret == 4
    out.stderr.fnmatch_lines([f"*--perf-cell-timeout={float(value)}: the time limit must be a finite number*"])


def test_xdist_timing_workers_that_share_the_cores_are_marked_unfit_and_kept_out(suite):
    results, base = suite.path / "r.jsonl", suite.path / "baselines"
    out = suite.runpytest_subprocess(*FAST, "-n", "2", f"--perf-results={results}", f"--perf-save-baseline={base}")
    assert out.ret == 2  # the baseline step refused them
    records = load_records([results])  # the named file exists, merged from the workers' files
    assert len(records) == 2 and all("xdist workers sharing" in r["unfit"] for r in records)
    assert all(r["status"] == "ok" for r in records)  # measured and kept, only not trusted
    assert not base.exists()
    out.stdout.fnmatch_lines(
        [
            "*[[]?/2] elapsed *: gw? cpu-mlp-*-aot_eager-fp32: ok, *x * wall, compile * s; "
            "unfit: timed by one of 2 xdist workers*",
            f"records: {results}",
            "*could not write the baseline (exit 2): 2 record(s) are unfit for a baseline*",
        ]
    )


def test_a_costs_database_that_does_not_exist_is_refused(suite):
    out = suite.runpytest_inprocess(*FAST, "--perf-costs=nope.sqlite")
    assert out.ret == 4
    out.stderr.fnmatch_lines(["*--perf-costs=nope.sqlite: no such history database*"])


def _offline(results, baseline) -> tuple[int, str]:
    """`perfgate compare` of the plugin's results file against the same baseline: (exit code, stderr)."""
    proc = subprocess.run(
        [sys.executable, "-m", "perfgate.cli", "compare", str(results), "--baseline", str(baseline)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return proc.returncode, proc.stderr


def test_a_gate_on_a_machine_without_its_gpu_cannot_pass_and_compare_agrees(suite):
    """Every GPU cell skipped (no CUDA here): exit 2 with the reason, in the report too, and offline alike."""
    results, base, rep = suite.path / "r.jsonl", suite.path / "baselines", suite.path / "rep"
    base.mkdir()
    out = suite.runpytest_inprocess(
        "-m", "gpu", "-p", "no:randomly", f"--perf-results={results}", f"--perf-baseline={base}", f"--perf-report={rep}"
    )
    assert out.ret == 2
    out.stdout.fnmatch_lines(
        ["*cannot compare (exit 2): nothing was measured: all * selected cell(s) were skipped: no CUDA device*"]
    )
    assert "nothing was measured" in (rep / "report.md").read_text()
    records = load_records([results])
    assert records and {r["status"] for r in records} == {"skipped"}  # what was asked and not measured
    rc, err = _offline(results, base)
    assert rc == 2 and "nothing was measured: all" in err


def test_a_run_that_measured_its_cpu_cells_but_skipped_its_gpu_cells_cannot_pass(suite):
    results, base = suite.path / "r.jsonl", suite.path / "baselines"
    first = suite.runpytest_subprocess(
        *FAST, "-k", "infer", f"--perf-results={suite.path / 'first.jsonl'}", f"--perf-save-baseline={base}"
    )
    assert first.ret == 0
    both = [arg if arg != "cpu" else "cpu or gpu" for arg in FAST]
    out = suite.runpytest_subprocess(*both, "-k", "infer", f"--perf-results={results}", f"--perf-baseline={base}")
    assert out.ret == 2
    out.stdout.fnmatch_lines(["*selected cell(s) were not measured and carry no environment*no CUDA device*"])
    rc, err = _offline(results, base)
    assert rc == 2 and "were not measured and carry no environment" in err


@pytest.mark.parametrize(
    "option, make, said",
    [
        ("--perf-results", "dir", "--perf-results={path}: is a directory; give a file there"),
        ("--perf-results", "under-a-file", "is a file, so nothing can be made under it"),
        ("--perf-report", "file", "--perf-report={path}: is a file; give a directory there"),
        ("--perf-save-baseline", "file", "--perf-save-baseline={path}: is a file; give a directory there"),
        ("--perf-history", "dir", "--perf-history={path}: is a directory; give a file there"),
        ("--perf-baseline", "nothing", "--perf-baseline={path}: no such file or directory"),
        ("--perf-baseline", "file", "--perf-baseline={path}: baseline {path} is not valid JSON"),
    ],
    ids=[
        "results-a-dir",
        "results-under-a-file",
        "report-a-file",
        "save-baseline-a-file",
        "history-a-dir",
        "baseline-missing",
        "baseline-corrupt",
    ],
)
def test_an_unusable_output_or_baseline_is_refused_before_the_first_cell(suite, option, make, said):
    path = suite.path / "target"
    if make == "dir":
        path.mkdir()
    elif make in ("file", "under-a-file"):
        path.write_text("{half")
        path = path / "r.jsonl" if make == "under-a-file" else path
    out = suite.runpytest_inprocess(*FAST, f"{option}={path}")
    assert out.ret == pytest.ExitCode.USAGE_ERROR
    assert said.format(path=path) in out.stderr.str()


def test_a_collect_only_run_with_the_gates_options_judges_nothing_and_passes(suite, tmp_path):
    """perfgate deal's precompile session is collect-only with the run's own options: its gate read "nothing was
    measured" (exit 2), and the dealt run could never pass."""
    out = suite.runpytest_inprocess(*FAST, "--collect-only", f"--perf-baseline={tmp_path}", "--perf-against-env=X=1")
    assert out.ret == 0 and "nothing was measured" not in out.stdout.str()


@pytest.mark.parametrize(
    "args, said",
    [
        (["--perf-report=rep"], "--perf-report=rep has no effect without --perf-baseline"),
        (
            ["--perf-isolate=off", "--perf-cell-timeout=5"],
            "--perf-cell-timeout=5 has no effect with --perf-isolate=off",
        ),
    ],
    ids=["report-without-baseline", "timeout-without-isolation"],
)
def test_an_option_that_will_have_no_effect_is_said_at_the_start_and_the_end(suite, args, said):
    out = suite.runpytest_inprocess(*FAST, "--collect-only", *args)
    assert out.ret == 0
    assert [line.strip().startswith(f"perfgate: {said}") for line in out.outlines if said in line] == [True, True]


# A conftest whose second cell is interrupted (Ctrl-C, or SIGTERM from a CI step's limit), and whose session
# end says whether it took a confirm round.
INTERRUPTED_SECOND_CELL = """
pytest_plugins = ["perfgate.plugin"]
import perfgate.measure.cell
import perfgate.plugin.session_end

_real_cell, _real_round, _cells = perfgate.measure.cell.run_cell, perfgate.plugin.session_end._confirm_round, []

def run_cell(*args, **kwargs):
    _cells.append(1)
    if len(_cells) == 2:
        raise KeyboardInterrupt
    return _real_cell(*args, **kwargs)

def confirm_round(*args, **kwargs):
    print("GATE: confirm round taken")
    return _real_round(*args, **kwargs)

perfgate.measure.cell.run_cell = run_cell
perfgate.plugin.session_end._confirm_round = confirm_round
"""


def test_an_interrupted_run_measures_nothing_more_and_is_judged_on_what_it_measured(suite):
    """On H100 lease AU (2026-11-25) a `timeout` SIGTERM during the last cell was followed by a confirm
    round, which compiled and timed again until the call was killed: a stopped run must stop."""
    suite.makeconftest(INTERRUPTED_SECOND_CELL)
    base = suite.path / "baselines"
    base.mkdir()
    out = suite.runpytest_subprocess(*FAST, f"--perf-baseline={base}", "-s")
    out.stdout.fnmatch_lines(["*the run was interrupted: no confirm round and no why-artifacts*"])
    assert "GATE: confirm round taken" not in out.stdout.str()
    assert out.ret == 2
