"""Cell costs: priors, the history's medians, shards of equal cost, and the ETA."""

import json
from pathlib import Path

from perfgate.core.matrix import Cell
from perfgate.plan import costs

import synthetic as syn


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
        session.config = SimpleNamespace(getoption=lambda name: options.get(name.removeprefix("--perf-")))
        return session

    precompiling = plan(**{"cache-dir": str(tmp_path), "precompile": 4})
    assert precompiling.compiles_held([autotune, aot]) == {autotune.id}
    assert precompiling.timed_costs([autotune])[autotune.id] == costs.warm_prior_s(autotune)
    assert precompiling.expected_costs([autotune])[autotune.id] == costs.prior_s(autotune)  # shards, precompile
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
    db.write_bytes(b"")
    reads = []
    monkeypatch.setattr(history, "records", lambda path: reads.append(path) or [])
    session = SessionPlan()
    session.config = SimpleNamespace(getoption=lambda name: str(db) if name == "--perf-costs" else None)
    cell = _cell()
    session.expected_costs([cell])
    session.timed_costs([cell])
    assert session.expected_costs([cell])[cell.id] == costs.prior_s(cell) and reads == [str(db)]
