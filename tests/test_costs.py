"""Cell costs: priors, the history's medians, shards of equal cost, and the ETA."""

import json
import math
from pathlib import Path

import pytest

from perfgate.core.matrix import Cell
from perfgate.plan import costs

import synthetic as syn

GPT2_COST = 2.0  # the test sessions' weight on gpt2's prior (SessionPlan.model_costs; the zoo's is its own)


def _cell(model="gpt2", phase="train", variant="inductor_default", kind="gpu"):
    return Cell(model, phase, variant, "amp_bf16" if kind == "gpu" else "fp32", kind, "pr")


def test_priors_rank_the_variants_as_measured():
    default, autotune, regional = (
        costs.prior_s(_cell(variant=v)) for v in ("inductor_default", "inductor_max_autotune", "inductor_regional")
    )
    assert regional < default < autotune and costs.prior_s(_cell(phase="infer")) < default


def test_a_gpu_prior_is_its_cold_weight_scaled_and_the_rotation_keeps_the_cold_weights():
    gpu, cpu = _cell(), _cell(kind="cpu")
    assert costs.prior_s(gpu) == costs.rotation_weight(gpu) * costs.GPU_NOW < costs.rotation_weight(gpu)
    assert costs.prior_s(cpu) == costs.rotation_weight(cpu)


def test_the_pr_tiers_priors_are_within_a_fifth_of_its_measured_cells():
    """The ETA a PR run prints before any history: the priors of its 12 cells against what they measured warm
    on an H100 (lease BG, 2026-11-26: 6:01 of cells; the cold priors alone said 17:00)."""
    runs = Path(__file__).resolve().parents[1] / "baselines" / "runs"
    with open(runs / "h100-20261126-BG-pr-warm.jsonl") as fh:
        measured = costs.known_costs(json.loads(line) for line in fh)
    cells = [Cell(*cell_id.split("-")[:3], "amp_bf16", "gpu", "pr") for cell_id in measured]
    planned = sum(costs.expected_s(cells, {}).values())
    assert len(measured) == 12 and abs(planned / sum(measured.values()) - 1) < 0.2


def test_a_models_cost_weighs_its_cells_prior_and_never_the_history():
    cells = [_cell(), _cell(model="vit_b16"), _cell(model="bert")]
    expected = costs.expected_s(cells, {cells[0].id: 20.0}, weights={"gpt2": 3.0, "vit_b16": 0.5})
    assert expected == {
        cells[0].id: 20.0,  # the history knows it: its weight does not apply
        cells[1].id: costs.prior_s(cells[1]) * 0.5,
        cells[2].id: costs.prior_s(cells[2]),  # a model the weights do not name: the phase's prior
    }


def test_the_zoos_costs_bring_each_pr_cells_prior_nearer_what_it_measured():
    """ModelSpec.cost, set from paired records of H100s and H200s (docs/options.md), against another lease's
    unpaired cells (the H100 lease BG's warm PR tier, 2026-11-26): each cell's prior over its measured seconds, the
    run's overall scale taken out, spreads about half as widely (rms of the log 0.29, against 0.51 unweighted). And
    the six PR models' costs average 1, so that the tier's total, which GPU_NOW is measured against, stays put."""
    pytest.importorskip("torch")  # the zoo's builders import it
    from perfgate.core import zoo

    runs = Path(__file__).resolve().parents[1] / "baselines" / "runs"
    with open(runs / "h100-20261126-BG-pr-warm.jsonl") as fh:
        measured = costs.known_costs(json.loads(line) for line in fh)
    cells = [Cell(*cell_id.split("-")[:3], "amp_bf16", "gpu", "pr") for cell_id in measured]

    def spread(weights) -> float:
        logs = [math.log(e / measured[i]) for i, e in costs.expected_s(cells, {}, weights=weights).items()]
        return math.sqrt(sum((x - sum(logs) / len(logs)) ** 2 for x in logs) / len(logs))

    registry = zoo.load(zoo.DEFAULT)
    weights = {name: spec.cost for name, spec in registry.items()}
    assert spread(weights) < 0.35 < 0.45 < spread(None)
    assert sum(spec.cost for spec in registry.values() if spec.pr) / 6 == pytest.approx(1.0, abs=0.02)


@pytest.mark.parametrize("name", ["cost", "compile_cost"])
@pytest.mark.parametrize("cost", [0, -1.0, float("nan"), float("inf"), "2", True])
def test_a_models_cost_that_weighs_nothing_is_refused_by_name(name, cost):
    from perfgate.core.spec import ModelSpec

    with pytest.raises(ValueError, match=f"model 'm': {name}={cost!r}; give a finite number") as refused:
        ModelSpec("m", "a model", *[lambda *a: None] * 5, unit="images", sizes={}, **{name: cost})
    # compile_cost may also be left unset, and the message says so
    assert str(refused.value).endswith("or None to weigh it by cost") == (name == "compile_cost")


def test_a_precompile_dealt_by_the_models_compile_costs_ends_sooner_on_every_cold_h200_run():
    """The PR tier's cold precompiles on six H200s (2026-11-29; each cell's seconds in its run's
    `*.precompile.json`), replayed: dealt by the zoo's compile_cost, the longest of 4 processes is 11-17 s shorter
    than dealt by its cells' cost in each. The compile costs came from five of these runs (33e3c08f, 73f9268b,
    9556437e's two, dcbf00b5); 10cc7345's four and 0caedecf's came later. With 5 processes, the PR workflow's on
    16 CPUs, the captioner's train cell fills a process alone either way: the two deals end within 5 s."""
    pytest.importorskip("torch")  # the zoo's builders import it
    from perfgate.core import zoo

    registry = zoo.load(zoo.DEFAULT)
    runs = Path(__file__).resolve().parents[1] / "baselines" / "runs" / "paired"
    # 9556437e-precompile4 read back the references its step before had computed: its first calls are not cold
    left_out = ("cupti", "9556437e-precompile4")
    cold = [p for p in sorted(runs.glob("h200-*.precompile.json")) if not any(name in p.name for name in left_out)]

    def longest(seconds: dict, weights: dict, processes: int) -> float:
        cells = [Cell(*cell_id.split("-"), "gpu", "pr") for cell_id in seconds]
        shares = costs.precompile_shares(cells, costs.expected_s(cells, {}, weights=weights), processes)
        return max(sum(seconds[c.id] for c in share) for share in shares)

    cost = {n: s.cost for n, s in registry.items()}
    compile_cost = {n: s.compile_weight for n, s in registry.items()}
    saved: dict[int, list[float]] = {4: [], 5: []}
    for path in cold:
        seconds = {line["cell"]: line["wall_s"] for line in json.loads(path.read_text())}
        for processes, runs_saved in saved.items():
            runs_saved.append(longest(seconds, cost, processes) - longest(seconds, compile_cost, processes))
    assert len(cold) >= 10 and min(saved[4]) > 10
    assert min(saved[5]) > -5 and sum(saved[5]) > 0


def test_a_cpu_cells_prior_is_never_weighted_by_its_models_gpu_cost():
    cells = [_cell(), _cell(kind="cpu")]
    expected = costs.expected_s(cells, {}, weights={"gpt2": 3.0})
    assert expected == {cells[0].id: costs.prior_s(cells[0]) * 3.0, cells[1].id: costs.prior_s(cells[1])}


def test_known_costs_are_medians_of_finished_records_only():
    finished = [{"cell": "a", "status": "ok", "wall_s": s, "reason": ""} for s in (10.0, 30.0, 20.0)]
    checkpoint = {"cell": "a", "status": "failed", "wall_s": 999.0, "reason": "did not finish: the process ended"}
    assert costs.known_costs(finished + [checkpoint]) == {"a": 20.0}
    cells = [_cell(), _cell(model="bert")]
    expected = costs.expected_s(cells, {cells[0].id: 20.0})
    assert expected == {cells[0].id: 20.0, cells[1].id: costs.prior_s(cells[1])}


def test_shards_of_equal_cost_beat_round_robin_on_an_uneven_tier():
    """The PR tier's cells with one slow model (captioner train ~250 s): cost dealing keeps the shards
    within the slowest cell of each other; round-robin by id puts the two slowest cells together."""
    measured = {
        "captioner-train": 250.0,
        "gpt2-train": 60.0,
        "gpt2-infer": 25.0,
        "resnet50-train": 45.0,
        "resnet50-infer": 15.0,
        "segformer_b2-train": 190.0,
        "segformer_b2-infer": 40.0,
        "upernet-train": 90.0,
        "upernet-infer": 30.0,
        "vit_b16-train": 40.0,
        "vit_b16-infer": 20.0,
    }
    shards = costs.deal(measured, 2)
    assert sorted(c for shard in shards for c in shard) == sorted(measured)
    loads = [sum(measured[c] for c in shard) for shard in shards]
    ids = sorted(measured)
    robin = [sum(measured[c] for c in ids[i::2]) for i in range(2)]
    assert max(loads) - min(loads) < max(robin) - min(robin) and max(loads) / min(loads) < 1.1
    assert costs.deal(measured, 2) == shards  # deterministic
    assert costs.shard_of(ids, measured, 1, 2) | costs.shard_of(ids, measured, 2, 2) == set(ids)


def test_progress_counts_and_scales_the_eta_by_how_fast_cells_really_ran():
    now = [0.0]
    progress = costs.Progress(planned=3, planned_s=300.0, clock=lambda: now[0])
    now[0] = 50.0
    # The first cell took half its expected 100 s: the 200 s left are expected to take 100 s.
    assert progress.finish("a", 50.0, 100.0) == "[1/3] elapsed 0:50, about 1:40 left"
    now[0] = 3700.0
    assert progress.finish("b", 3650.0, 100.0).startswith("[2/3] elapsed 1:01:40, about ")
    assert progress.finish("c", 10.0, 100.0) == "[3/3] elapsed 1:01:40"
    assert progress.summary() == "perfgate: 3 cell(s) in 1:01:40; slowest: b 3650 s, a 50 s, c 10 s"
    # GPU-minutes: each cell's wall time times the GPUs it held (a data-parallel cell: its ranks)
    progress.finish("d", 60.0, 100.0, gpus=2)
    progress.finish("e", 30.0, 100.0, gpus=1)
    assert "; 2.5 GPU-minutes; slowest:" in progress.summary()
    assert [
        costs.gpus_held(r)
        for r in ({"device_kind": "gpu", "world_size": 2}, {"device_kind": "gpu"}, {"device_kind": "cpu"})
    ] == [2, 1, 0]
    assert costs.eta_s(200.0, 100.0, 50.0, workers=2) == 50.0


def test_the_xdist_controllers_lines_count_elapsed_from_the_sessions_start():
    from types import SimpleNamespace

    from perfgate.plugin.workers import ProgressRelay

    now, lines = [100.0], []
    relay = ProgressRelay(lines.append, workers=4, clock=lambda: now[0])
    now[0] = 163.0  # the first cell's line arrives when that cell is done
    done = {"planned": 2, "planned_s": 120.0, "cell": "a", "wall_s": 63.0, "expected_s": 60.0, "line": "a: ok"}
    relay.pytest_runtest_logreport(SimpleNamespace(user_properties=[(ProgressRelay.KEY, done)]))
    assert lines == ["[1/2] elapsed 1:03, about 0:16 left: a: ok"]


def test_the_history_feeds_the_costs(tmp_path):
    from perfgate.store import history

    db = tmp_path / "h.sqlite"
    history.append(db, syn.run(3))
    known = costs.known_costs(history.records(db))
    assert known and all(seconds > 0 for seconds in known.values())


def test_precompile_keeps_a_models_variants_in_one_share_dearest_first():
    """max-autotune-no-cudagraphs compiles max-autotune's kernels again: in the same child, after it, it finds
    them in the cache; in another child at the same time it would autotune them all a second time."""
    cells = [
        _cell(model, phase, variant)
        for model in ("gpt2", "vit_b16")
        for phase in ("train", "infer")
        for variant in ("inductor_max_autotune_no_cudagraphs", "inductor_max_autotune")
    ]
    expected = {
        cell.id: (400.0 if cell.variant == "inductor_max_autotune" else 100.0) * (2 if cell.phase == "train" else 1)
        for cell in cells
    }
    dealt = costs.precompile_shares(cells, expected, 4)
    assert sorted(len(share) for share in dealt) == [2, 2, 2, 2]
    for share in dealt:
        assert len({(c.model, c.phase) for c in share}) == 1
        assert [c.variant for c in share] == ["inductor_max_autotune", "inductor_max_autotune_no_cudagraphs"]
    assert costs.precompile_shares(cells, expected, 4) == dealt  # deterministic


def test_a_cell_whose_compiles_the_cache_holds_costs_its_warm_prior_and_dynamic_shapes_still_recompile():
    default, autotune, dynamic = (
        costs.warm_prior_s(_cell(variant=v)) for v in ("inductor_default", "inductor_max_autotune", "inductor_dynamic")
    )
    assert default == costs.prior_s(_cell()) < autotune < costs.prior_s(_cell(variant="inductor_max_autotune"))
    assert dynamic == 4 * default
    cells = [_cell(variant="inductor_max_autotune"), _cell(model="vit_b16", variant="inductor_max_autotune")]
    expected = costs.expected_s(cells, {cells[1].id: 7.0}, warm={c.id for c in cells})
    assert expected == {cells[0].id: autotune, cells[1].id: 7.0}  # the history still wins


def test_the_warm_priors_sit_closer_to_a_precompiled_slices_cells_than_the_cold_ones():
    """Rotation slice 4/15 on 4 x H200 1c60ab9c (2026-11-28), timed after its precompile: how far each ok cell's
    seconds sit from its prior as a session prices it (warm where the precompile held its compiles), once one
    common scale is fitted: a typical factor of 1.6 against 2.2."""
    import math
    import statistics

    from perfgate.core.records_file import load_records
    from perfgate.measure import precompile

    runs = Path(__file__).resolve().parents[1] / "baselines" / "runs" / "nightly4"
    finals = load_records(sorted(runs.glob("h200x4-20261128-1c60ab9c-slice.gw*.jsonl")))
    ok = [r for r in finals if r["status"] == "ok"]
    spread = {}
    for name, warm in (("cold", False), ("warm", True)):
        errors = []
        for r in ok:
            cell = Cell(r["model"], r["phase"], r["variant"], r["precision"])
            held = warm and precompile.wanted(cell, has_cuda=True)
            errors.append(math.log(r["wall_s"] / (costs.warm_prior_s if held else costs.prior_s)(cell)))
        spread[name] = statistics.pstdev(errors)
    assert len(ok) == 20 and spread["warm"] < 0.5 < 0.8 < spread["cold"]  # 0.45 against 0.81


def test_a_session_prices_warm_the_cells_its_kept_cache_will_hold_and_deals_shards_cold(tmp_path):
    from types import SimpleNamespace

    from perfgate.measure import precompiled
    from perfgate.plugin.session_plan import SessionPlan

    autotune, aot = _cell(variant="inductor_max_autotune"), _cell(variant="aot_eager")  # aot_eager is not cached

    def plan(**options) -> SessionPlan:
        session = SessionPlan()
        session._model_costs = {"gpt2": GPT2_COST}
        session.config = SimpleNamespace(getoption=lambda name: options.get(name.removeprefix("--perf-")))
        return session

    precompiling = plan(**{"cache-dir": str(tmp_path), "precompile": 4})
    assert precompiling.compiles_held([autotune, aot]) == {autotune.id}
    assert precompiling.timed_costs([autotune])[autotune.id] == costs.warm_prior_s(autotune, GPT2_COST)
    # shards: cold; the precompile: the cold prior by the model's compile cost, never the history
    assert precompiling.expected_costs([autotune])[autotune.id] == costs.prior_s(autotune, GPT2_COST)
    from perfgate.core import zoo

    precompiling.registry = zoo.DEFAULT
    compile_cost = zoo.load(zoo.DEFAULT)["gpt2"].compile_cost
    assert precompiling.compile_costs([autotune])[autotune.id] == costs.prior_s(autotune, compile_cost)
    after_its_step = plan(**{"cache-dir": str(tmp_path)})  # the nightly's -n 4 run after its precompile step
    assert after_its_step.compiles_held([autotune]) == set()
    precompiled.mark([{"cell": autotune.id, "status": "ok"}], str(tmp_path), {autotune.id: "0" * 64})
    assert after_its_step.compiles_held([autotune, aot]) == {autotune.id}
    assert plan().compiles_held([autotune]) == set()  # no kept cache: every compile is cold


def test_a_session_reads_the_costs_history_once(tmp_path, monkeypatch):
    """The shard hook, the xdist order, the plan and the precompile all price by the history: one read a session."""
    from types import SimpleNamespace

    from perfgate.plugin.session_plan import SessionPlan
    from perfgate.store import history

    db = tmp_path / "h.sqlite"
    db.write_bytes(b"SQLite format 3\x00")
    reads = []
    monkeypatch.setattr(history, "records", lambda path: reads.append(path) or [])
    session = SessionPlan()
    session._model_costs = {"gpt2": GPT2_COST}
    session.config = SimpleNamespace(getoption=lambda name: str(db) if name == "--perf-costs" else None)
    cell = _cell()
    session.expected_costs([cell])
    session.timed_costs([cell])
    assert session.expected_costs([cell])[cell.id] == costs.prior_s(cell, GPT2_COST) and reads == [str(db)]


def _paired(cell: str, total: float) -> dict:
    return {"cell": cell, "status": "ok", "reason": "", "wall_s": total / 3, "paired": {"seconds": {"total": total}}}


def test_a_kept_caches_costs_are_each_cells_latest_seconds_in_its_own_sides_scale():
    """A paired cell's line holds both sides and every process pair (cell_seconds), read back over
    PAIRED_OVER_OWN as the history and the priors give a cell's own seconds; a cell's cost is the median of its
    latest KEPT_PER_CELL lines; a checkpoint, a skip and a torn line are no cost."""
    checkpoint = {"cell": "a", "status": "failed", "wall_s": 9.0, "reason": "did not finish: the process ended"}
    skipped = {"cell": "a", "status": "skipped", "wall_s": 1.0, "reason": "no CUDA"}
    assert costs.cost_line(checkpoint) is None and costs.cost_line(skipped) is None
    assert costs.cost_line(_paired("a", 135.0)) == {"cell": "a", "seconds": 135.0, "paired": True}
    solo = {"cell": "b", "status": "ok", "reason": "", "wall_s": 40.0}
    assert costs.cost_line(solo) == {"cell": "b", "seconds": 40.0, "paired": False}
    lines = [costs.cost_line(_paired("a", s)) for s in (1000.0, 1000.0, 1000.0, 135.0, 135.0, 270.0, 270.0, 270.0)]
    assert costs.kept_costs([*lines, costs.cost_line(solo)]) == {"a": 200.0, "b": 40.0}  # 270 / 1.35
    assert len(costs.latest_lines(lines)) == costs.KEPT_PER_CELL and costs.latest_lines(lines)[-1] == lines[-1]


def test_a_costs_file_leaves_out_what_is_no_cost(tmp_path):
    path = tmp_path / costs.KEPT_COSTS
    good = {"cell": "a", "seconds": 12.5, "paired": True}
    bad = [{"cell": "b", "seconds": -1}, {"cell": "c", "seconds": True}, {"cell": 3, "seconds": 1}, [1, 2]]
    path.write_text("\n".join([json.dumps(good), *map(json.dumps, bad), '{"cell": "d", "sec', "NaN"]) + "\n")
    assert costs.cost_lines(path) == [good] and costs.cost_lines(tmp_path / "none.jsonl") == []


def test_a_dealt_runs_copy_of_the_kept_costs_trims_the_caches_file_once_it_grew(tmp_path):
    """The copy holds each cell's latest lines; the cache's own file is cut to them only past four times as
    many, so a file a few runs long is never rewritten."""
    cache, copy = tmp_path / "cache", tmp_path / "out" / costs.KEPT_COSTS
    assert not costs.snapshot(cache, copy) and not copy.exists()  # no costs kept yet: the priors deal
    cache.mkdir()
    line = {"cell": "a", "seconds": 10.0, "paired": False}
    (cache / costs.KEPT_COSTS).write_text((json.dumps(line) + "\n") * 8)
    assert costs.snapshot(cache, copy) and len(costs.cost_lines(copy)) == costs.KEPT_PER_CELL
    assert len(costs.cost_lines(cache / costs.KEPT_COSTS)) == 8  # under 4x: left alone
    (cache / costs.KEPT_COSTS).write_text((json.dumps(line) + "\n") * 21)
    assert costs.snapshot(cache, copy) and len(costs.cost_lines(cache / costs.KEPT_COSTS)) == costs.KEPT_PER_CELL


def test_a_session_keeps_each_cells_seconds_in_its_cache_and_reads_a_costs_file_as_its_history(tmp_path):
    from types import SimpleNamespace

    from perfgate.plugin.session_plan import SessionPlan

    cell = _cell()
    keeper = SessionPlan()
    keeper.config = SimpleNamespace(getoption=lambda name: str(tmp_path) if name == "--perf-cache-dir" else None)
    keeper.keep_cost(_paired(cell.id, 81.0))
    keeper.keep_cost({"cell": cell.id, "status": "skipped", "reason": "no CUDA", "wall_s": 0.0})
    kept = tmp_path / costs.KEPT_COSTS
    assert costs.cost_lines(kept) == [{"cell": cell.id, "seconds": 81.0, "paired": True}]
    reader = SessionPlan()
    reader.config = SimpleNamespace(getoption=lambda name: str(kept) if name == "--perf-costs" else None)
    assert reader.expected_costs([cell])[cell.id] == pytest.approx(60.0)  # 81 s, both sides, over 1.35
    nowhere = SessionPlan()
    nowhere.config = SimpleNamespace(getoption=lambda name: None)
    nowhere.keep_cost(_paired(cell.id, 81.0))  # no kept cache: nothing written, nothing raised


def test_a_precompile_deals_its_processes_by_the_compile_costs(tmp_path, monkeypatch):
    """Not by the costs history's seconds of whole cells, nor by the cells' cost (test_a_session_prices_...)."""
    from types import SimpleNamespace

    from perfgate.measure import precompile, precompiled
    from perfgate.plugin.session_plan import SessionPlan

    cells = [_cell(), _cell(model="vit_b16")]
    session = SessionPlan()
    options = {"precompile": 2, "cache-dir": str(tmp_path)}
    session.config = SimpleNamespace(getoption=lambda name: options.get(name.removeprefix("--perf-")))
    session.compile_costs = lambda todo: {cell.id: 7.0 for cell in todo}  # what the deal must be given
    session.expected_costs = lambda todo, warm=(): pytest.fail("the precompile read the cells' costs")
    session.cache_keys = lambda todo: {}
    monkeypatch.setattr(precompile, "cuda_devices", lambda: ["cuda:0"])
    monkeypatch.setattr(precompile, "wanted", lambda cell, has_cuda: True)
    monkeypatch.setattr(precompiled, "split", lambda todo, cache, keys: (list(todo), []))
    dealt = []

    def shares(todo, expected, workers):
        dealt.append(expected)
        raise RuntimeError("dealt")

    monkeypatch.setattr(costs, "precompile_shares", shares)
    with pytest.raises(RuntimeError, match="dealt"):
        session.precompile(cells)
    assert dealt == [{cell.id: 7.0 for cell in cells}]
