"""The plugin's options: the ini setting perf_registry and one --perf-* group, declared with their choices
and help, and checked once at configure time so that a value that cannot mean what it says is a usage error
naming the valid ones, before any cell runs.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfgate.core import matrix, zoo
from perfgate.core.job import REFERENCE_CACHE
from perfgate.core.matrix import MAX_PRECOMPILE, PAIRED_OPTIONS, check_names, split_csv
from perfgate.plan.costs import KEPT_COSTS
from perfgate.plugin.folders import check_folders, check_outputs
from perfgate.plugin.selection import Selection

ISOLATE = ("gpu", "all", "off")  # --perf-isolate: which cells run in a child process of their own

# Upper bounds of counts and durations: past them a value is a typo or a hostile one, and it hung the run
# (a list of 10^12 shards; 10^12 rounds of a CPU cell that never ended while the ETA said 0:09).
DATA_PARALLEL = ("with", "without", "only")  # --perf-data-parallel
MAX_PARTS = 1000  # --perf-shard and --perf-rotate N: the whole matrix holds a few hundred cells
MAX_ROUNDS = 1000  # --perf-min/max-rounds: 25x the GPU default of 40, minutes of timing per cell
MAX_ROUND_MS = 10_000.0  # --perf-round-ms: 200x the GPU default of 50 ms
MAX_CELL_TIMEOUT_S = 86_400.0  # --perf-cell-timeout: a day; max-autotune's default is 2400 s


def add(parser: pytest.Parser) -> None:
    """Declare the ini setting perf_registry and the --perf-* option group."""
    parser.addini(
        "perf_registry",
        default=zoo.DEFAULT,
        help=f"module:attribute of the model registry (name -> ModelSpec), default {zoo.DEFAULT}",
    )
    group = parser.getgroup("perfgate", "perfgate: torch.compile performance cells")
    group.addoption("--perf-models", help="comma-separated models to run (default: all)")
    group.addoption("--perf-variants", help=f"compile variants: {', '.join(matrix.VARIANTS)}")
    group.addoption("--perf-precisions", help=f"precisions: {', '.join(matrix.PRECISIONS)}")
    group.addoption(
        "--perf-data-parallel",
        choices=DATA_PARALLEL,
        default="with",
        help="the data-parallel cells, which need several GPUs: with the others (default), without them (a "
        "session of one GPU, as perfgate deal's shards are), or only them",
    )
    group.addoption("--perf-shard", help="run shard I of N (1-based), e.g. 2/4: a deterministic split")
    group.addoption(
        "--perf-rotate",
        help="run slice K of N (1-based), dealt by the priors per variant alone, "
        "so the slices stay put night after night: N runs with K = 1..N run every cell once; "
        "--perf-shard then splits the slice",
    )
    group.addoption(
        "--perf-results",
        help="JSON-lines file each cell's record is appended to as it "
        "finishes (default: .perfgate/results-<UTC time>.jsonl)",
    )
    group.addoption(
        "--perf-cache-dir",
        help="keep the inductor cache here between runs (default: a "
        "fresh directory per cell, so compile times are cold)",
    )
    group.addoption(
        "--perf-reference-cache",
        metavar="DIR",
        default=REFERENCE_CACHE,
        help="keep the fp64 reference steps numerics judges against here, keyed by everything they "
        "depend on, so later runs read them instead of computing them; off: compute them in every "
        "cell (default .perfgate/reference)",
    )
    group.addoption(
        "--perf-numerics",
        choices=("on", "off"),
        default="on",
        help="off: skip the numerics check (records say 'skipped'); for the later processes of an "
        "A/B side, whose first process judged it. A gate run (--perf-baseline) refuses it",
    )
    group.addoption(
        "--perf-tf32",
        choices=("on", "off"),
        default="on",
        help="fp32 policy on CUDA: TF32 tensor cores for matmul and convolutions (default on)",
    )
    group.addoption(
        "--perf-warm-compile",
        choices=matrix.WARM_COMPILE,
        default="on",
        help="on: also time the compile again in-process with the on-disk caches warm; artifacts: "
        "that, and a compile in a fresh process with empty caches handed this cell's "
        "torch.compiler.save_cache_artifacts() (default on)",
    )
    group.addoption("--perf-min-rounds", type=int, help="interleaved rounds at least (GPU default 15)")
    group.addoption("--perf-max-rounds", type=int, help="interleaved rounds at most (GPU default 40)")
    group.addoption("--perf-round-ms", type=float, help="target length of one round, ms (GPU default 50)")
    group.addoption(
        "--perf-inject",
        help="test-only planted fault: numerics[:EPS], graph_break, slow[:MS], "
        "device_slow[:PCT] (of the compiled step's GPU time), host_slow[:PCT] (of its host time)",
    )
    group.addoption(
        "--perf-isolate",
        choices=ISOLATE,
        default="gpu",
        help="run each cell in its own child process under a time limit, so a hung compile, a "
        "crash or a poisoned CUDA context fails that cell only: gpu (GPU cells, the default), "
        "all, off",
    )
    group.addoption(
        "--perf-cell-timeout",
        type=float,
        metavar="S",
        help="time limit of an isolated cell, seconds (default: the model's time_limit_s, else "
        f"{matrix.DEFAULT_TIME_LIMIT_S:g} s, {matrix.AUTOTUNE_TIME_LIMIT_S:g} s for max-autotune)",
    )
    group.addoption(
        "--perf-precompile",
        type=int,
        metavar="N",
        help="before timing, compile the selected inductor cells into --perf-cache-dir in N "
        "processes at once (compiling can share the machine, timing cannot); not under -n: "
        "run it as its own step, e.g. with --collect-only",
    )
    group.addoption("--perf-baseline", help="gate this run against a baseline file or directory")
    group.addoption(
        "--perf-against",
        metavar="REV",
        help="measure each cell beside REV (a git revision of this checkout, e.g. origin/main) on this runner, "
        "rounds alternated, and judge the clocks against it: regression, no regression, or unsure (exit 2)",
    )
    group.addoption(
        "--perf-against-python", metavar="PY", help="the base side's interpreter (an upgrade's A/B; default: this one)"
    )
    group.addoption(
        "--perf-against-env",
        metavar="NAME=VALUE",
        action="append",
        help="an environment variable of the base side's processes, repeatable",
    )
    group.addoption(
        "--perf-b-rev",
        metavar="REV",
        help="side B, beside --perf-against's A: a git revision of this checkout instead of the checkout itself "
        "(a bisection's step); its zoo and tests run, this session coordinates",
    )
    group.addoption("--perf-b-python", metavar="PY", help="side B's interpreter (default: this one)")
    group.addoption(
        "--perf-b-env",
        metavar="NAME=VALUE",
        action="append",
        help="an environment variable of side B's processes, repeatable (PYTHONPATH: put right after its root)",
    )
    group.addoption(
        "--perf-judge-eager-wall",
        action="store_true",
        help="paired: judge eager's wall step too, not only show it (perfgate ab does: an A/B of two "
        "environments, where a slower eager host path may show on no other rule)",
    )
    group.addoption(
        "--perf-save-baseline",
        metavar="DIR",
        help="write this run's records as the baseline of its environment and tier into DIR",
    )
    group.addoption("--perf-report", metavar="DIR", help="write the gate's report.md and report.json here")
    group.addoption(
        "--perf-history",
        metavar="DB",
        help="append this run's records to a SQLite history "
        "(keyed by commit, date, environment and cell) for `perfgate history` and `perfgate report`",
    )
    group.addoption(
        "--perf-costs",
        metavar="DB",
        help="a history database, or a costs file (perfgate deal's copy of the one a --perf-cache-dir keeps), to "
        "estimate each cell's wall seconds from, for --perf-shard (shards of equal cost) and the ETA lines "
        "(default: --perf-history's database, else priors per variant and model)",
    )
    group.addoption(
        "--perf-profile",
        metavar="DIR",
        help="write why-artifacts of every cell run here: "
        "chrome traces of eager and compiled steps and TORCH_LOGS graph_breaks,recompiles,"
        "perf_hints (the gate writes them for flagged cells on its own)",
    )


def check(config: pytest.Config) -> Selection:
    """Refuse options that cannot mean what they say (ValueError, naming the valid values); return the cells
    --perf-models, --perf-variants, --perf-precisions, --perf-rotate and --perf-shard select."""
    from perfgate.core.fault import parse as parse_fault

    opt = config.getoption
    models, variants, precisions = (
        _names(f"--perf-{key}", opt(f"--perf-{key}")) for key in ("models", "variants", "precisions")
    )
    if models is not None:  # the zoo is the face's to know, never the engine's
        check_names("model", models, zoo.load(config.getini("perf_registry")))
    shard = parse_fraction("--perf-shard", opt("--perf-shard"))
    rotate = parse_fraction("--perf-rotate", opt("--perf-rotate"))
    parse_fault(opt("--perf-inject"))
    check_timing(opt("--perf-min-rounds"), opt("--perf-max-rounds"), opt("--perf-round-ms"))
    costs_db = opt("--perf-costs")
    if costs_db is not None and not Path(costs_db).is_file():
        raise ValueError(
            f"--perf-costs={costs_db}: no such history database or costs file (make one with "
            f"`perfgate history add` or --perf-history; a --perf-cache-dir keeps a costs file, {KEPT_COSTS})"
        )
    limit = opt("--perf-cell-timeout")
    if limit is not None and not (math.isfinite(limit) and 0 < limit <= MAX_CELL_TIMEOUT_S):
        raise ValueError(
            f"--perf-cell-timeout={limit}: the time limit must be a finite number of seconds > 0 and at most "
            f"{MAX_CELL_TIMEOUT_S:g}"
        )
    check_precompile(opt("--perf-precompile"), opt("--perf-cache-dir"), getattr(config.option, "numprocesses", None))
    if any(opt(name) is not None for name in PAIRED_OPTIONS):
        from perfgate.ab.pair_prepare import prepare_choice
        from perfgate.ab.pinning import pin_choice

        prepare_choice()  # the paired engine's PERFGATE_PAIRED_PREPARE and PERFGATE_PAIRED_PIN, checked before any cell
        pin_choice()
    check_outputs(opt("--perf-results"), opt("--perf-save-baseline"), opt("--perf-report"), opt("--perf-history"))
    check_folders(opt("--perf-profile"), opt("--perf-cache-dir"), opt("--perf-reference-cache"))
    check_histories(costs_db, opt("--perf-history"))
    check_baseline(opt("--perf-baseline"))
    if opt("--perf-numerics") == "off" and (opt("--perf-baseline") or opt("--perf-save-baseline")):
        raise ValueError(
            "--perf-numerics=off cannot be gated or saved as a baseline: the gate's numerics rule "
            "needs each cell's verdict (it is for an A/B side's later processes)"
        )
    return Selection(
        model=tuple(models) if models is not None else None,
        variant=tuple(check_names("variant", variants, matrix.VARIANTS)) if variants is not None else None,
        precision=tuple(check_names("precision", precisions, matrix.PRECISIONS)) if precisions is not None else None,
        shard=shard,
        rotate=rotate,
        data_parallel=opt("--perf-data-parallel"),
    )


def _names(option: str, text: str | None) -> list[str] | None:
    """A comma-separated list of names; None where the option is not given. Given, it names one at least:
    `--perf-models ""` (an unset shell variable) ran every model while ",,," ran none (exit 5)."""
    if text is None:
        return None
    names = split_csv(text)
    if not names:
        raise ValueError(f"{option}={text!r} names nothing; name one or more, or leave the option out for all")
    return names


def check_histories(costs_db: str | None, history_db: str | None) -> None:
    """Refuse a history database that is no history (a text file, another program's database): read for the
    shards' costs at collection, or written at the end, it was an INTERNALERROR."""
    from perfgate.store import history

    if costs_db and Path(costs_db).is_file() and not history.is_database(costs_db):
        from perfgate.plan.costs import costs_file_problem

        if problem := costs_file_problem(costs_db):
            raise ValueError(f"--perf-costs={costs_db}: {problem}")
        costs_db = None  # a costs file: no database to check
    for option, value in (("--perf-costs", costs_db), ("--perf-history", history_db)):
        if value and Path(value).is_file():
            try:
                history.check(value)
            except history.HistoryError as err:
                raise ValueError(f"{option}={value}: {err}") from None


def check_baseline(baseline: str | None) -> None:
    """Refuse a --perf-baseline that no run could be gated against: a path that does not exist, or a file
    that is no usable baseline. (A directory's file is known only once a cell ran: its environment.)"""
    if not baseline:
        return
    from perfgate.judge.baseline import BaselineError, load_baseline

    path = Path(baseline)
    if not path.exists():
        raise ValueError(
            f"--perf-baseline={baseline}: no such file or directory; give a baseline file or a "
            f"directory of <fingerprint>_<tier>.json files"
        )
    if path.is_file():
        try:
            load_baseline(path)
        except BaselineError as err:
            raise ValueError(f"--perf-baseline={baseline}: {err}") from None


def ineffective(opt) -> list[str]:
    """Options given that will do nothing in this session, each as a line saying why."""
    lines = []
    paired = any(opt(name) is not None for name in PAIRED_OPTIONS)
    if opt("--perf-report") and not opt("--perf-baseline") and not paired:
        lines.append(
            f"perfgate: --perf-report={opt('--perf-report')} has no effect without --perf-baseline or "
            "--perf-against: nothing is gated, so no report is written"
        )
    if opt("--perf-judge-eager-wall") and not paired:
        lines.append(
            "perfgate: --perf-judge-eager-wall has no effect without --perf-against (or --perf-b-*): it is a "
            "rule of the paired verdict"
        )
    if opt("--perf-cell-timeout") and opt("--perf-isolate") == "off":
        lines.append(
            f"perfgate: --perf-cell-timeout={opt('--perf-cell-timeout'):g} has no effect with "
            "--perf-isolate=off: only a cell in its own process can be stopped"
        )
    return lines


def check_timing(min_rounds: int | None, max_rounds: int | None, round_ms: float | None) -> None:
    """Refuse timing options that cannot mean what they say (0 or negative rounds would give a zero-width
    interval that the gate reads as no noise; nan or inf ms cannot size a round)."""
    for name, value in (("--perf-min-rounds", min_rounds), ("--perf-max-rounds", max_rounds)):
        if value is not None and value < 1:
            raise ValueError(f"{name}={value}: rounds must be 1 or more")
        if value is not None and value > MAX_ROUNDS:
            raise ValueError(f"{name}={value}: rounds must be at most {MAX_ROUNDS}")
    if min_rounds is not None and max_rounds is not None and min_rounds > max_rounds:
        raise ValueError(f"--perf-min-rounds={min_rounds} is more than --perf-max-rounds={max_rounds}")
    if round_ms is not None and not (math.isfinite(round_ms) and round_ms > 0):
        raise ValueError(f"--perf-round-ms={round_ms}: the round length must be a finite number of ms > 0")
    if round_ms is not None and round_ms > MAX_ROUND_MS:
        raise ValueError(f"--perf-round-ms={round_ms}: the round length must be at most {MAX_ROUND_MS:g} ms")


def check_precompile(workers: int | None, cache_dir: str | None, xdist_workers) -> None:
    """Refuse a precompile whose compiles would be lost or raced: it fills a kept cache (a fresh one per cell
    would throw them away), once, from the process that collected (xdist workers would each fill it)."""
    if workers is None:
        return
    if not 1 <= workers <= MAX_PRECOMPILE:
        raise ValueError(
            f"--perf-precompile={workers}: the number of processes must be 1 or more and at most {MAX_PRECOMPILE}"
        )
    if not cache_dir:
        raise ValueError(
            f"--perf-precompile={workers} needs --perf-cache-dir DIR: the compiles must outlive "
            "their processes for the cells to find them"
        )
    if xdist_workers:
        raise ValueError(
            f"--perf-precompile={workers} does not run under -n {xdist_workers}: precompile in a "
            "step of its own (add --collect-only), then run the cells under -n"
        )


def parse_fraction(option: str, text: str | None) -> tuple[int, int] | None:
    """--perf-shard's and --perf-rotate's I/N."""
    if not text:
        return None
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not (n >= 1 and 1 <= i <= n):
        raise ValueError(f"{option}={text!r}: expected I/N with 1 <= I <= N, e.g. 1/4")
    if n > MAX_PARTS:  # a deal builds all N parts: 1/10^12 never finished
        raise ValueError(f"{option}={text!r}: N must be at most {MAX_PARTS} (the matrix has fewer cells)")
    return i, n
