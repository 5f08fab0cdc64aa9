"""The pytest face: one option group (--perf-*), matrix narrowing at collection, and the hooks that hand
cells to the session (perfgate.session) and the session's end to perfgate.session_end.

torch is imported only when a cell runs, so the data side's tests collect without it.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from perfgate import matrix, selection, zoo
from perfgate.matrix import Cell, UnknownNameError, check_names, split_csv
from perfgate.session import PerfSession

ISOLATE = ("gpu", "all", "off")  # --perf-isolate: which cells run in a child process of their own
CELL_KEY = pytest.StashKey[Cell]()
SESSION_KEY = pytest.StashKey[PerfSession]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini("perf_registry", default=zoo.DEFAULT,
                  help=f"module:attribute of the model registry (name -> ModelSpec), default {zoo.DEFAULT}")
    group = parser.getgroup("perfgate", "perfgate: torch.compile performance cells")
    group.addoption("--perf-models", help="comma-separated models to run (default: all)")
    group.addoption("--perf-variants", help=f"compile variants: {', '.join(matrix.VARIANTS)}")
    group.addoption("--perf-precisions", help=f"precisions: {', '.join(matrix.PRECISIONS)}")
    group.addoption("--perf-shard", help="run shard I of N (1-based), e.g. 2/4: a deterministic split")
    group.addoption("--perf-results", help="JSON-lines file each cell's record is appended to as it "
                    "finishes (default: .perfgate/results-<UTC time>.jsonl)")
    group.addoption("--perf-cache-dir", help="keep the inductor cache here between runs (default: a "
                    "fresh directory per cell, so compile times are cold)")
    group.addoption("--perf-tf32", choices=("on", "off"), default="on",
                    help="fp32 policy on CUDA: TF32 tensor cores for matmul and convolutions (default on)")
    group.addoption("--perf-warm-compile", choices=matrix.WARM_COMPILE, default="on",
                    help="on: also time the compile again in-process with the on-disk caches warm; artifacts: "
                    "that, and a compile in a fresh process with empty caches handed this cell's "
                    "torch.compiler.save_cache_artifacts() (default on)")
    group.addoption("--perf-min-rounds", type=int, help="interleaved rounds at least (GPU default 15)")
    group.addoption("--perf-max-rounds", type=int, help="interleaved rounds at most (GPU default 40)")
    group.addoption("--perf-round-ms", type=float, help="target length of one round, ms (GPU default 50)")
    group.addoption("--perf-inject", help="test-only planted fault: numerics[:EPS], graph_break, slow[:MS], "
                    "device_slow[:PCT] (of the compiled step's GPU time), host_slow[:PCT] (of its host time)")
    group.addoption("--perf-isolate", choices=ISOLATE, default="gpu",
                    help="run each cell in its own child process under a time limit, so a hung compile, a "
                    "crash or a poisoned CUDA context fails that cell only: gpu (GPU cells, the default), "
                    "all, off")
    group.addoption("--perf-cell-timeout", type=float, metavar="S",
                    help="time limit of an isolated cell, seconds (default: the model's time_limit_s, else "
                    f"{matrix.DEFAULT_TIME_LIMIT_S:g} s, {matrix.AUTOTUNE_TIME_LIMIT_S:g} s for max-autotune)")
    group.addoption("--perf-baseline", help="gate this run against a baseline file or directory")
    group.addoption("--perf-save-baseline", metavar="DIR",
                    help="write this run's records as the baseline of its environment and tier into DIR")
    group.addoption("--perf-report", metavar="DIR", help="write the gate's report.md and report.json here")
    group.addoption("--perf-history", metavar="DB", help="append this run's records to a SQLite history "
                    "(keyed by commit, date, environment and cell) for `perfgate history` and `perfgate report`")
    group.addoption("--perf-costs", metavar="DB", help="a history database to estimate each cell's wall "
                    "seconds from, for --perf-shard (shards of equal cost) and the ETA lines (default: "
                    "--perf-history's database, else priors per variant)")
    group.addoption("--perf-profile", metavar="DIR", help="write why-artifacts of every cell run here: "
                    "chrome traces of eager and compiled steps and TORCH_LOGS graph_breaks,recompiles,"
                    "perf_hints (the gate writes them for flagged cells on its own)")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", selection.MARK_HELP)
    try:
        chosen = _selection(config)
    except (UnknownNameError, ValueError) as err:
        raise pytest.UsageError(str(err)) from None
    perf = config.stash[SESSION_KEY] = PerfSession(config, chosen)
    config.pluginmanager.register(_ShardHook(), "perfgate-shard")
    if perf.worker is None:  # prints the finished-cell lines xdist workers send (none without xdist)
        from perfgate.workers import ProgressRelay

        workers = getattr(config.option, "numprocesses", None)  # xdist has made -n auto a number by now
        perf.relay = ProgressRelay(perf._progress, workers if isinstance(workers, int) else 1)
        config.pluginmanager.register(perf.relay, "perfgate-progress-relay")


def _selection(config: pytest.Config) -> dict:
    from perfgate import faults

    opt = config.getoption
    models = split_csv(opt("--perf-models"))
    if models is not None:  # the zoo is the face's to know, never the engine's
        check_names("model", models, zoo.load(config.getini("perf_registry")))
    variants = split_csv(opt("--perf-variants"))
    precisions = split_csv(opt("--perf-precisions"))
    shard = parse_shard(opt("--perf-shard"))
    faults.parse(opt("--perf-inject"))
    check_timing(opt("--perf-min-rounds"), opt("--perf-max-rounds"), opt("--perf-round-ms"))
    costs_db = opt("--perf-costs")
    if costs_db is not None and not Path(costs_db).is_file():
        raise ValueError(f"--perf-costs={costs_db}: no such history database (make one with "
                         f"`perfgate history add` or --perf-history)")
    limit = opt("--perf-cell-timeout")
    if limit is not None and not (math.isfinite(limit) and limit > 0):
        raise ValueError(f"--perf-cell-timeout={limit}: the time limit must be a finite number of seconds > 0")
    return {
        "model": models,
        "variant": check_names("variant", variants, matrix.VARIANTS) if variants else None,
        "precision": check_names("precision", precisions, matrix.PRECISIONS) if precisions else None,
        "shard": shard,
    }


def check_timing(min_rounds: int | None, max_rounds: int | None, round_ms: float | None) -> None:
    """Refuse timing options that cannot mean what they say (0 or negative rounds would give a zero-width
    interval that the gate reads as no noise; nan or inf ms cannot size a round)."""
    for name, value in (("--perf-min-rounds", min_rounds), ("--perf-max-rounds", max_rounds)):
        if value is not None and value < 1:
            raise ValueError(f"{name}={value}: rounds must be 1 or more")
    if min_rounds is not None and max_rounds is not None and min_rounds > max_rounds:
        raise ValueError(f"--perf-min-rounds={min_rounds} is more than --perf-max-rounds={max_rounds}")
    if round_ms is not None and not (math.isfinite(round_ms) and round_ms > 0):
        raise ValueError(f"--perf-round-ms={round_ms}: the round length must be a finite number of ms > 0")


def parse_shard(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    index, _, count = text.partition("/")
    try:
        i, n = int(index), int(count)
    except ValueError:
        i = n = 0
    if not (n >= 1 and 1 <= i <= n):
        raise ValueError(f"--perf-shard={text!r}: expected I/N with 1 <= I <= N, e.g. 1/4")
    return i, n


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    selection.parametrize(metafunc, metafunc.config.getini("perf_registry"))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    perf = config.stash[SESSION_KEY]
    keep, drop = [], []
    for item in items:
        cell = _cell_of(item)
        if cell is None:
            keep.append(item)
            continue
        perf.collected += 1
        item.stash[CELL_KEY] = cell
        (keep if perf.selects(cell) else drop).append(item)
    perf.offered = sorted({item.stash[CELL_KEY] for item in keep if CELL_KEY in item.stash}, key=str)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep
    _skip_gpu_cells_without_cuda(items)


class _ShardHook:
    """A second pytest_collection_modifyitems, run last: the selection above must see every cell (to say
    why none is left), while shards must be dealt over what -m and -k left."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list) -> None:
        _deal_shard(session, config, items)


def _deal_shard(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """--perf-shard I/N: shards of equal expected cost over the cells that will really run."""
    perf = config.stash[SESSION_KEY]
    if perf.selection["shard"] is None:
        return
    keep, drop = _shard(items, perf.expected_costs([i.stash[CELL_KEY] for i in items if CELL_KEY in i.stash]),
                        *perf.selection["shard"])
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Plan the progress lines over the cells that will run; say why no cell is left when the --perf-*
    options and -m/-k together select none (pytest alone says "313 deselected" and exits 5)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    planned = [item.stash[CELL_KEY] for item in session.items if CELL_KEY in item.stash]
    if planned:
        perf.plan(planned)
        return
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if reporter is not None and perf.collected:
        reporter.write_line(f"perfgate: no cell selected: {_why_none(perf, session.config)}", yellow=True)


def _why_none(perf: PerfSession, config: pytest.Config) -> str:
    options = ", ".join(f"--perf-{key}s {','.join(value)}" for key, value in perf.selection.items()
                        if key != "shard" and value is not None) or "no --perf-* selection"
    if not perf.offered:
        return f"{options} matches none of the {perf.collected} cells collected"
    kinds = sorted({cell.device_kind for cell in perf.offered})
    variants = sorted({cell.variant for cell in perf.offered})
    filters = " ".join(f"{flag} {value!r}" for flag, value in (("-m", config.option.markexpr),
                                                               ("-k", config.option.keyword)) if value)
    return (f"{options} matches {len(perf.offered)} cell(s), all {'/'.join(kinds)} cells (variants "
            f"{', '.join(variants)}), and {filters or 'the shard'} removed every one of them; CPU cells run "
            f"fp32 with each model's cpu_variants, GPU cells the whole matrix")


def _cell_of(item) -> Cell | None:
    callspec = getattr(item, "callspec", None)
    value = callspec.params.get("cell") if callspec else None
    return value if isinstance(value, Cell) else None


def _shard(items: list, costs: dict[str, float], index: int, count: int) -> tuple[list, list]:
    """Deal cells into shards of near-equal expected cost (perfgate.costs.deal: the history's wall seconds,
    else priors per variant), independent of collection order. Items that are not cells stay in shard 1."""
    from perfgate.costs import shard_of

    mine = shard_of(sorted(costs), costs, index, count)
    keep, drop = [], []
    for item in items:
        cell = item.stash.get(CELL_KEY, None)
        ours = cell.id in mine if cell is not None else index == 1
        (keep if ours else drop).append(item)
    return keep, drop


def _skip_gpu_cells_without_cuda(items: list) -> None:
    gpu_items = [item for item in items if item.get_closest_marker("gpu")]
    if not gpu_items:
        return
    import torch

    if torch.cuda.is_available():
        return
    reason = f"no CUDA device (torch {torch.__version__}, built for CUDA {torch.version.cuda})"
    for item in gpu_items:
        item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def perf(pytestconfig: pytest.Config) -> PerfSession:
    return pytestconfig.stash[SESSION_KEY]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    perf = config.stash.get(SESSION_KEY, None)
    if perf is not None and perf._envs:
        machine_info["perfgate"] = next(iter(perf._envs.values()))


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """On an xdist worker, send a cell's finished line to the controller with its report."""
    report = yield
    perf = item.config.stash.get(SESSION_KEY, None)
    cell = item.stash.get(CELL_KEY, None)
    if perf is not None and perf.worker and cell is not None and call.when == "call" and cell.id in perf.finished:
        from perfgate.workers import ProgressRelay

        report.user_properties.append((ProgressRelay.KEY, perf.finished.pop(cell.id)))
    return report


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Save a baseline and/or gate the run, once, on the controller (xdist workers only stream records)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None or hasattr(session.config, "workerinput"):
        return
    from perfgate.session_end import finish

    if session.config.pluginmanager.hasplugin("dsession"):  # xdist: the workers ran the cells
        from perfgate.workers import merge_into

        perf.records = merge_into(perf.results_path, perf.run_id)
    finish(session, perf)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    perf = config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    if perf.records:
        terminalreporter.write_sep("-", "perfgate")
        terminalreporter.write_line(f"records: {perf.results_path}")
        progress = perf.relay.progress if perf.relay is not None and perf.relay.progress else perf.progress
        if progress is not None and progress.done:
            terminalreporter.write_line(progress.summary())
    for line in perf.summary:
        terminalreporter.write_line(line)
