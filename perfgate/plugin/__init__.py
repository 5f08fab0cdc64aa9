"""The pytest face: the hooks, each handing its work to a module: the options to perfgate.plugin.options, the
cells and their narrowing and sharding to perfgate.plugin.selection, each cell's run and the session's state to
perfgate.plugin.session (its parts perfgate.plugin.session_runner and perfgate.plugin.session_plan), the session's
end to perfgate.plugin.session_end.

Imports no torch: torch is imported only when a cell runs (or a GPU cell is collected), so the data side's tests
collect without it, and a project that installs perfgate (its pytest11 entry point loads this module into every
pytest run there) pays nothing for it until a cell runs. tests/test_report_cli.py imports it with torch blocked.
"""

from __future__ import annotations

import logging
import os

import pytest

from perfgate.core import exits
from perfgate.core.matrix import DATA_PARALLEL_LEFT_OUT, DEALT_ENV, UnknownNameError
from perfgate.plugin import against, config_file, folders, options, selection
from perfgate.plugin.session import PerfSession

SESSION_KEY = pytest.StashKey[PerfSession]()
CONFIG_FILE_READ = pytest.StashKey[bool]()
TORCH_TRACE_LOGGER = "torch.__trace"  # torch's structured trace (TORCH_TRACE, tlparse): always at DEBUG


def pytest_addoption(parser: pytest.Parser) -> None:
    options.add(parser)


@pytest.hookimpl(tryfirst=True)
def pytest_load_initial_conftests(early_config: pytest.Config, parser: pytest.Parser, args: list[str]) -> None:
    """[tool.perfgate] of the rootdir's pyproject.toml, put before addopts and the command line, which override
    it (perfgate.plugin.config_file). pytest calls this only for a plugin it loads before the conftests: the
    pytest11 entry point of an installed perfgate, or -p perfgate.plugin."""
    pyproject = early_config.rootpath / "pyproject.toml"
    table = config_file.settings(pyproject)
    args[0:0] = config_file.as_args(table, config_file.perf_options(parser), pyproject)
    early_config.stash[CONFIG_FILE_READ] = True


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", selection.MARK_HELP)
    if not config.stash.get(CONFIG_FILE_READ, False) and config_file.settings(config.rootpath / "pyproject.toml"):
        # A conftest's pytest_plugins loads the plugin after the arguments were read: say so, not ignore it.
        raise pytest.UsageError(
            f"{config.rootpath / 'pyproject.toml'}: {config_file.TABLE} is read only where pytest loads perfgate "
            "before the conftests: install perfgate (its pytest11 entry point), or pass -p perfgate.plugin"
        )
    try:
        folders.anchor(config)  # first: every later check and every process reads the folders absolute
        chosen = options.check(config)
        base = against.base_side(config)  # --perf-against: checked (and checked out) before any cell
        tree = against.tree_side(config) if base is not None else None  # --perf-b-*: likewise
    except (UnknownNameError, ValueError) as err:
        raise pytest.UsageError(str(err)) from None
    perf = config.stash[SESSION_KEY] = PerfSession(config, chosen)
    if base is not None and not config.option.collectonly:
        perf.pairing = against.Pairing(
            base,
            perf.results_path,
            config.getoption("--perf-cache-dir"),
            str(config.rootpath),
            tree,
            eager_wall=config.getoption("--perf-judge-eager-wall"),
        )
    perf.summary += options.ineffective(config.getoption)  # said again at the end, where a reader looks
    config.pluginmanager.register(_ShardHook(), "perfgate-shard")
    config.pluginmanager.register(_CollectFailures(perf), "perfgate-collect-failures")
    if perf.worker is None:  # prints the finished-cell lines xdist workers send (none without xdist)
        workers = getattr(config.option, "numprocesses", None)  # xdist has made -n auto a number by now
        config.pluginmanager.register(
            perf.start_relay(workers if isinstance(workers, int) else 1), "perfgate-progress-relay"
        )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    selection.parametrize(metafunc, metafunc.config.getini("perf_registry"))


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list) -> None:
    """Keep the cells the --perf-* options select, remembering what was there to say why none is left."""
    perf = config.stash[SESSION_KEY]
    keep, drop = selection.narrow(items, perf.selection)
    perf.collected = len(selection.cells_of(items))
    perf.offered = sorted(set(selection.cells_of(keep)), key=str)
    _deselect(config, items, keep, drop)
    selection.skip_gpu_cells_without_cuda(items)


class _CollectFailures:
    """A module that failed to collect (run on past it with --continue-on-collection-errors) is a failed test
    that is no cell, as pytest_runtest_makereport notes the others: the session's exit is then 1, never perfgate's 3."""

    def __init__(self, perf: PerfSession):
        self.perf = perf

    def pytest_collectreport(self, report) -> None:
        if report.failed:
            self.perf.other_failures.add(report.nodeid)


class _ShardHook:
    """A second pytest_collection_modifyitems, run last: the selection above must see every cell (to say
    why none is left), while shards must be dealt over what -m and -k left."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, session: pytest.Session, config: pytest.Config, items: list) -> None:
        """--perf-data-parallel, then --perf-rotate K/N, then --perf-shard I/N: slices and shards of equal
        expected cost over the cells that will really run; then, in an xdist worker under --dist loadgroup, the
        dearest first."""
        perf = config.stash[SESSION_KEY]
        keep, drop = selection.data_parallel_split(items, perf.selection.data_parallel)
        _deselect(config, items, keep, drop)
        if drop and perf.selection.data_parallel == "without":
            perf.summary.append(
                f"perfgate: {len(drop)} {DATA_PARALLEL_LEFT_OUT} (--perf-data-parallel without): they need several "
                "GPUs; perfgate deal runs them after its shards, on every GPU it dealt"
            )
        if perf.selection.rotate is not None:
            _deselect(config, items, *selection.rotate(items, *perf.selection.rotate))
        if perf.selection.shard is not None:
            costs = perf.expected_costs(selection.cells_of(items))
            _deselect(config, items, *selection.shard(items, costs, *perf.selection.shard))
        if getattr(config, "workerinput", None) and config.getvalue("loadgroup"):  # an xdist worker, --dist loadgroup
            workers = int(config.workerinput.get("workercount", 1))
            items[:] = selection.longest_first(items, perf.timed_costs(selection.cells_of(items)), workers)


def _deselect(config: pytest.Config, items: list, keep: list, drop: list) -> None:
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_collection_finish(session: pytest.Session) -> None:
    """Plan the progress lines over the cells that will run; say why no cell is left when the --perf-*
    options and -m/-k together select none (pytest alone says "313 deselected" and exits 5)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    planned = selection.cells_of(session.items)
    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    for line in options.ineffective(session.config.getoption) if reporter is not None and perf.worker is None else ():
        reporter.write_line(line, yellow=True)
    if planned:
        line = perf.plan(planned)
        if reporter is not None and perf.worker is None:  # under xdist the controller has no plan to say
            reporter.write_line(line)
        collect_only = session.config.option.collectonly
        if any(perf.measures_paired(cell) for cell in planned) and not collect_only:
            perf.pairing.spawn()
        if session.config.getoption("--perf-precompile") and perf.worker is None:
            line = (  # also under --collect-only: a step that fills the cache alone
                perf.precompile(planned)
                if not os.environ.get(DEALT_ENV)
                else "perfgate: --perf-precompile: skipped in a session of perfgate deal, which precompiles once, "
                "before its sessions, where the option is on its own command line"
            )
            if reporter is not None:
                reporter.write_line(line)
        if not collect_only:
            perf.find_picked(planned)
        return
    if reporter is not None and perf.collected:
        why = selection.why_none(
            perf.selection, perf.collected, perf.offered, session.config.option.markexpr, session.config.option.keyword
        )
        reporter.write_line(f"perfgate: no cell selected: {why}", yellow=True)


@pytest.fixture(scope="session")
def perf(pytestconfig: pytest.Config) -> PerfSession:
    return pytestconfig.stash[SESSION_KEY]


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict) -> None:
    from perfgate.plugin.bench_sink import machine_info as perfgate_info

    machine_info["perfgate"] = perfgate_info()


@pytest.hookimpl(wrapper=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, benchmarksession, machine_info, compared_benchmark):
    """pytest-benchmark 5.x crashes pytest (INTERNALERROR) where it should warn that machine_info differs, when
    --benchmark-storage lies outside the working directory: its warning names the storage relative to the
    working directory (FileStorage.location, Path.relative_to). Give its warning, naming the absolute path."""
    try:
        return (yield)
    except ValueError as err:
        storage = getattr(benchmarksession.storage, "path", None)
        if storage is None or "subpath" not in str(err):
            raise
        benchmarksession.logger.warning(
            f"Benchmark machine_info is different. Current: {machine_info} VS saved: "
            f"{compared_benchmark.get('machine_info')} (location: {storage})."
        )
        return None


@pytest.hookimpl(wrapper=True, trylast=True)
def pytest_runtest_call(item: pytest.Item):
    """Keep pytest's log capture off torch's structured-trace logger. pytest 9 hangs its capture handlers on
    every logger that does not propagate; that one never does and is always at DEBUG, so each compile wrote
    thousands of empty `DEBUG torch.__trace` lines into a cell's captured log (11,045 in an H100 run's -rA
    report of 3 cells) and buried a failed cell's traceback. trylast: inside pytest's own wrapper, after it
    has hung them. torch's handler stays, so TORCH_TRACE still writes its files."""
    trace_log = logging.getLogger(TORCH_TRACE_LOGGER)
    for handler in [h for h in trace_log.handlers if type(h).__module__ == "_pytest.logging"]:
        trace_log.removeHandler(handler)
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call):
    """On an xdist worker, send a cell's finished line to the controller with its report. Note a skipped cell,
    and a failed test that is no cell."""
    report = yield
    perf = item.config.stash.get(SESSION_KEY, None)
    cell = item.stash.get(selection.CELL_KEY, None)
    if perf is not None and cell is not None and call.when == "setup" and report.skipped:
        perf.note_skip(cell, _skip_reason(report))
    if perf is not None and cell is None and report.failed:
        perf.other_failures.add(item.nodeid)
    relayed = perf.relayed(cell.id) if perf is not None and cell is not None and call.when == "call" else None
    if relayed is not None:
        report.user_properties.append(relayed)
    return report


def _skip_reason(report) -> str:
    """A skip's reason from pytest's report: ("path", line, "Skipped: no CUDA device ...") for a mark."""
    longrepr = report.longrepr
    text = longrepr[2] if isinstance(longrepr, tuple) and len(longrepr) == 3 else str(longrepr)
    return text.removeprefix("Skipped: ")


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """Save a baseline and/or gate the run, once, on the controller (xdist workers only stream records)."""
    perf = session.config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    perf.write_skips()  # an xdist worker's go to its own file, which the controller merges
    if hasattr(session.config, "workerinput"):
        perf.close()
        return
    from perfgate.plugin.session_end import finish

    try:
        if session.config.pluginmanager.hasplugin("dsession"):  # xdist: the workers ran the cells
            from perfgate.plugin.workers import merge_into

            perf.records = merge_into(perf.results_path, perf.run_id)
        finish(session, perf)  # its confirm round still runs its cells in the warm process
    finally:
        perf.close()
    if perf.unwritten:  # what was measured did not reach the disk: no verdict can stand on it
        session.exitstatus = max(int(session.exitstatus), exits.UNUSABLE)


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    perf = config.stash.get(SESSION_KEY, None)
    if perf is None:
        return
    if perf.records:
        terminalreporter.write_sep("-", "perfgate")
    for line in perf.closing_lines():
        terminalreporter.write_line(line)
