"""Before a session's first cell: the planned cells' expected costs (k/N and the ETA on each finished cell)
and --perf-precompile's compiles, N processes at once. A part of PerfSession (perfgate.plugin.session), whose
state it reads. torch is imported only when the precompile runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Collection

from perfgate.core.matrix import Cell


class SessionPlan:
    """PerfSession's plan and precompile; reads and sets the session's expected costs, progress, cache keys and
    picked cells (PerfSession.__init__), and asks its CellRunner where each cell runs."""

    _history: dict[str, float] | None = None  # history_costs, once read
    _model_costs: dict[str, float] | None = None  # model_costs, once read

    def history_costs(self) -> dict[str, float]:
        """{cell id: median wall seconds} in the --perf-costs (else --perf-history) database or costs file, for
        the cells that ran there. Read once a session: the shard hook, the xdist order, the plan and the precompile
        all price by it, and the controller appends to the history only at the session's end."""
        if self._history is None:
            from perfgate.plan import costs
            from perfgate.store import history

            db = self.config.getoption("--perf-costs") or self.config.getoption("--perf-history")
            if not (db and Path(db).is_file()):
                self._history = {}
            elif history.is_database(db):
                self._history = costs.known_costs(history.records(db))
            else:  # a costs file (perfgate deal's copy of a kept cache's)
                self._history = costs.kept_costs(costs.cost_lines(db))
        return self._history

    def keep_cost(self, record: dict) -> None:
        """A finished cell's seconds, appended to the kept cache's costs file (perfgate.plan.costs.KEPT_COSTS),
        which the next dealt run on this runner deals its shards by. One that cannot be written costs only that."""
        from perfgate.plan import costs

        cache_dir = self.config.getoption("--perf-cache-dir")
        line = costs.cost_line(record) if cache_dir else None
        if line is not None:
            from perfgate.core.records_file import append_record

            try:
                append_record(Path(cache_dir) / costs.KEPT_COSTS, line)
            except OSError:
                pass

    def expected_costs(self, cells: list[Cell], warm: Collection[str] = ()) -> dict[str, float]:
        """Expected wall seconds per cell: the costs history's median where the cell ran, else a prior per
        variant weighted by its model's cost (perfgate.plan.costs; the warm prior for the ids in `warm`). Every
        shard of a split run must read the same, so shards are dealt by these with nothing `warm`."""
        from perfgate.plan import costs

        known = self.history_costs()
        weights = self.model_costs() if any(cell.id not in known for cell in cells) else {}
        return costs.expected_s(cells, known, warm, weights)

    def model_costs(self) -> dict[str, float]:
        """{model: its ModelSpec.cost}, the weight of a cell's prior where no history knows the cell; read once."""
        if self._model_costs is None:
            from perfgate.core import zoo

            self._model_costs = {name: spec.cost for name, spec in zoo.load(self.registry).items()}
        return self._model_costs

    def compile_costs(self, cells: list[Cell]) -> dict[str, float]:
        """Expected seconds of each cell's cold compile, which a precompile's processes are dealt by: the cold prior
        per variant weighted by its model's compile_cost (ModelSpec). Never the costs history: its seconds are
        whole cells', in which a compile weighs unlike."""
        from perfgate.core import zoo
        from perfgate.plan import costs

        weights = {name: spec.compile_weight for name, spec in zoo.load(self.registry).items()}
        return costs.expected_s(cells, {}, (), weights)

    def timed_costs(self, cells: list[Cell]) -> dict[str, float]:
        """expected_costs, where a cell whose compiles the kept cache will hold costs its warm prior: what the
        ETA and one host's order of cells go by. Never a shard's deal: two runners' caches may differ."""
        return self.expected_costs(cells, self.compiles_held(cells))

    def compiles_held(self, cells: list[Cell]) -> set[str]:
        """The cells whose compiles --perf-cache-dir will hold when they are timed: those this session
        precompiles, and those an earlier precompile marked there (a nightly's xdist run after its precompile
        step)."""
        from perfgate.measure import precompile, precompiled

        cache_dir = self.config.getoption("--perf-cache-dir")
        if not cache_dir:
            return set()
        if self.config.getoption("--perf-precompile"):
            return {cell.id for cell in cells if precompile.wanted(cell, has_cuda=True)}
        return precompiled.marked(cache_dir) & {cell.id for cell in cells}

    def plan(self, cells: list[Cell]) -> str:
        """The cells this process will run, for k/N and the ETA on each finished cell; returns the line that
        says what they are expected to cost, before the first starts."""
        from perfgate.plan.costs import PAIRED_OVER_OWN, Progress, hms

        self.expected = self.timed_costs(cells)
        self.costs_known = sum(1 for cell in cells if self.history_costs().get(cell.id))
        paired = {cell.id for cell in cells if self.measures_paired(cell)}
        for cell_id in paired:  # measured beside its base: both sides' seconds, and second process pairs
            self.expected[cell_id] *= PAIRED_OVER_OWN
        self.progress = Progress(len(cells), sum(self.expected.values()))
        isolated = [cell for cell in cells if self.isolates(cell)]
        if isolated and not self.config.option.collectonly:  # its imports overlap what comes before the first cell
            self.isolated_process(gpu=any(cell.device_kind == "gpu" for cell in isolated)).prestart()
        gpus = sum(1 for cell in cells if cell.device_kind == "gpu")
        how = f"{len(paired)} of them beside their base (paired)" if paired else "in one process"
        return (
            f"perfgate: {len(cells)} cell(s) planned ({gpus} on a GPU), about "
            f"{hms(sum(self.expected.values()))} expected {how}: {self.costs_known} from the "
            f"costs history, {len(cells) - self.costs_known} from priors per variant and model (perfgate.plan.costs)"
        )

    def cache_keys(self, cells: list[Cell]) -> dict[str, str]:
        """{cell id: its key in the kept cache's markers (perfgate.measure.precompiled.key)}; kept for the
        session, which marks the picks its paired cells timed."""
        import torch

        from perfgate.measure import precompile, precompiled

        devices = precompile.cuda_devices()
        gpu = torch.cuda.get_device_name(devices[0]) if devices else None
        for cell in cells:
            if cell.id not in self.keys:
                self.keys[cell.id] = precompiled.key(cell, self.tf32, gpu, self.registry)
        return {cell.id: self.keys[cell.id] for cell in cells}

    def find_picked(self, cells: list[Cell]) -> None:
        """After any precompile: the paired cells whose launch-config picks the kept cache holds as an earlier
        run's cell between the same two sides timed them, alone on its GPU (precompiled.picks_timed). Their two
        sides prepare at once. A precompile killed before it removed the picks it timed goes first."""
        from perfgate.measure import precompile, precompiled

        cache_dir = self.config.getoption("--perf-cache-dir")
        paired = [cell for cell in cells if self.measures_paired(cell)]
        if cache_dir and paired:
            precompile.forget_abandoned(cache_dir)
            keys = self.cache_keys(paired)
            self.picked = precompiled.picks_timed(keys, cache_dir, keys, self.pairing.described())

    def keep_picks(self, cell: Cell, record: dict) -> None:
        """A paired cell whose two sides both ran whole: the kept cache holds its picks as its first side timed
        them, alone on the GPU (its two sides prepare one after the other until then), so a later run between the
        same sides prepares them at once. Not where a side failed: a base that compiled nothing timed no pick."""
        paired = record.get("paired")
        whole = record.get("status") == "ok" and isinstance(paired, dict) and "error" not in paired
        if whole and cell.id in self.keys and cell.id not in self.picked:
            from perfgate.measure import precompiled

            cache_dir = self.config.getoption("--perf-cache-dir")
            precompiled.mark_picked(cache_dir, cell.id, self.keys[cell.id], self.pairing.described())

    def precompile(self, cells: list[Cell]) -> str:
        """--perf-precompile N: fill --perf-cache-dir with the planned cells' compiles in N processes at once,
        dealt by each model's compile cost (SessionPlan.compile_costs), before the first cell is timed; returns
        the line that says how it went. Each line (a cell's first-call seconds, or why it did not compile) goes
        to <results>.precompile.json."""
        import time

        from perfgate.core import zoo
        from perfgate.core.records_file import precompile_path
        from perfgate.measure import precompile, precompiled
        from perfgate.plan.costs import hms, precompile_shares

        workers = self.config.getoption("--perf-precompile")
        devices = precompile.cuda_devices()
        todo = {cell.id: cell for cell in cells if precompile.wanted(cell, bool(devices))}
        if not todo:
            return "perfgate: --perf-precompile: no selected cell compiles with inductor; nothing to do"
        started = time.monotonic()
        cache_dir = self.config.getoption("--perf-cache-dir")
        keys = self.cache_keys(list(todo.values()))
        cells_left, held = precompiled.split(todo.values(), cache_dir, keys)
        already = f"; {len(held)} already in the cache from an earlier precompile" if held else ""
        if not cells_left:
            self.precompile_s = time.monotonic() - started
            return (
                f"perfgate: --perf-precompile: all {len(held)} cell(s) already in the cache from an earlier precompile"
            )
        shares = precompile_shares(cells_left, self.compile_costs(cells_left), workers)
        registry = zoo.load(self.registry)
        limit = max(sum(self.time_limit_s(registry[c.model], c) for c in share) for share in shares if share)
        references = self.config.getoption("--perf-reference-cache")
        results = precompile.run(
            shares,
            cache_dir=cache_dir,
            registry=self.registry,
            devices=devices,
            tf32=self.tf32,
            limit_s=limit,
            reference_dir=None if references == "off" else references,
            out=precompile_path(self.results_path),
        )
        precompiled.mark(results, cache_dir, keys)
        self.precompile_s = time.monotonic() - started
        failed = [
            r["cell"] + (f" (stopped after {hms(r['stopped_after_s'])})" if "stopped_after_s" in r else "")
            for r in results
            if r["status"] != "ok"
        ]
        return (
            f"perfgate: precompiled {len(results) - len(failed)} of {len(results)} cell(s) in "
            f"{hms(time.monotonic() - started)} with {len([s for s in shares if s])} process(es)"
            + (f"; not compiled: {', '.join(failed)}" if failed else "")
            + already
        )
