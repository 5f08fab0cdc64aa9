"""The compile-modes view (`perfgate report --modes`): eager and each variant of a model side by side."""

import numpy as np

from perfgate.cli import main
from perfgate.core.matrix import Cell
from perfgate.render import cells, modes

from synthetic import failed, record, write_run

VARIANTS = ("inductor_max_autotune", "inductor_default", "inductor_reduce_overhead")


def _records():
    rng = np.random.default_rng(7)
    out = []
    for variant in VARIANTS:
        for phase in ("train", "infer"):
            cell = Cell("gpt2", phase, variant, "amp_bf16", "gpu", "nightly")
            if (variant, phase) == ("inductor_max_autotune", "infer"):
                out.append(failed(cell, reason="timed out after 2400 s while compiling (inductor_max_autotune)"))
                continue
            out.append(
                record(
                    cell,
                    rng=rng,
                    compile_s={"train": 50.0, "infer": 20.0}[phase],
                    peak_mem_compile_mb=4000.0,
                    eager_ms={"train": 60.0, "infer": 20.0}[phase],
                )
            )
    out.append(record(Cell("gpt2", "train", "inductor_default", "fp32", "gpu", "nightly"), rng=rng))
    return out


def test_one_table_per_model_and_precision_eager_first_then_the_matrix_order():
    tables = modes.modes_tables(_records())
    assert list(tables) == [("gpt2", "fp32"), ("gpt2", "amp_bf16")]  # PRECISIONS' order
    rows = tables[("gpt2", "amp_bf16")]
    assert [r.mode for r in rows] == ["eager", "inductor_default", "inductor_reduce_overhead", "inductor_max_autotune"]
    eager, default = rows[0], rows[1]
    assert eager.first_call_s is None and 59 < eager.train_ms < 61 and 19 < eager.infer_ms < 21
    assert default.first_call_s == 50.0 and default.first_call_mb == 4000.0  # the train cell's compile
    assert default.train_speedup and default.infer_speedup and default.train_device_speedup
    autotune = rows[-1]
    assert autotune.infer_ms is None and autotune.train_ms is not None
    assert autotune.status == "infer failed: timed out after 2400 s while compiling (inductor_max_autotune)"


def test_a_failure_the_zoo_knows_is_marked_as_a_known_issue():
    cell = Cell("segformer_b2", "train", "inductor_max_autotune", "amp_bf16", "gpu", "nightly")
    known = {**failed(cell, reason="timed out after 2400 s while compiling"), "known_issue": "compile > 18 min"}
    row = modes.modes_tables([known])[("segformer_b2", "amp_bf16")][1]
    assert row.status.startswith("train failed (known issue): timed out after 2400 s") and "infer not run" in row.status
    assert cells.row(known)[1] == "failed (known issue)"  # the per-cell table says it too


def test_a_phase_never_run_is_named_and_eager_memory_is_the_train_steps():
    """A row with one phase only says which is missing (no silent gap), and eager's peak stays the train
    step's however many inference cells join the table."""
    rng = np.random.default_rng(3)
    train = record(
        Cell("vit_b16", "train", "inductor_default", "amp_bf16", "gpu", "nightly"), rng=rng, peak_mem_eager_mb=5000.0
    )
    infers = [
        record(Cell("vit_b16", "infer", v, "amp_bf16", "gpu", "nightly"), rng=rng, peak_mem_eager_mb=800.0)
        for v in VARIANTS
    ]
    rows = modes.modes_tables([train] + infers)[("vit_b16", "amp_bf16")]
    assert rows[0].first_call_mb == 5000.0
    assert {r.mode: r.status for r in rows[1:]} == {
        "inductor_default": "ok",
        "inductor_reduce_overhead": "train not run",
        "inductor_max_autotune": "train not run",
    }


def test_cli_prints_the_tables_alone(tmp_path, capsys):
    path = write_run(tmp_path / "r.jsonl", _records())
    assert main(["report", str(path), "--modes"]) == 0
    out = capsys.readouterr().out
    assert "### gpt2, amp_bf16" in out and "| `inductor_max_autotune` |" in out
    assert "| `eager` | – |" in out and "infer failed: timed out after 2400 s" in out


def test_cli_without_an_output_says_which_to_give(tmp_path, capsys):
    path = write_run(tmp_path / "r.jsonl", _records())
    assert main(["report", str(path)]) == 2
    assert "--modes" in capsys.readouterr().err


def test_a_first_call_that_found_its_compile_in_a_kept_cache_says_so():
    """A warm compile is no first-call time a user meets on a new machine: the table marks it."""
    records = _records()
    default_train = next(
        r
        for r in records
        if r["variant"] == "inductor_default" and r["phase"] == "train" and r["precision"] == "amp_bf16"
    )
    default_train.update(compile_cache="persistent", compile_cache_hits=2, compile_cache_misses=0)
    out = modes.render_markdown(records)
    assert "| `inductor_default` | 50.0 (warm) |" in out
    assert "| `inductor_reduce_overhead` | 50.0 |" in out  # a fresh cache: cold, unmarked


def test_the_cells_view_has_a_row_per_cell_in_the_matrix_order_with_what_it_cost(tmp_path, capsys):
    records = _records()
    warm = next(r for r in records if r["variant"] == "inductor_reduce_overhead" and r["phase"] == "infer")
    warm.update(compile_cache="persistent", compile_cache_hits=1, compile_cache_misses=0, wall_s=33.0)
    path = write_run(tmp_path / "r.jsonl", records)
    assert main(["report", str(path), "--cells"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| `gpt2-")]
    assert [line.split(" | ")[0] for line in lines] == [
        "| `gpt2-infer-inductor_default-amp_bf16`",
        "| `gpt2-infer-inductor_reduce_overhead-amp_bf16`",
        "| `gpt2-infer-inductor_max_autotune-amp_bf16`",
        "| `gpt2-train-inductor_default-fp32`",
        "| `gpt2-train-inductor_default-amp_bf16`",
        "| `gpt2-train-inductor_reduce_overhead-amp_bf16`",
        "| `gpt2-train-inductor_max_autotune-amp_bf16`",
    ]  # model, phase, precision, variant
    ro = lines[1].split(" | ")
    assert ro[6] == "20.0 (warm)" and ro[12] == "33.0"  # first call marked warm; the cell's wall cost
    autotune = lines[2].split(" | ")
    assert autotune[1] == "failed" and "timed out after 2400 s" in autotune[-1]


def test_the_cell_table_shows_a_batch_column_only_where_records_carry_one():
    """gpt2_xl's train step under CUDA graphs runs another batch than its other cells: the per-cell table
    says which; a results file from before records carried a batch gets no column of dashes."""
    rng = np.random.default_rng(5)
    graphs = record(Cell("gpt2_xl", "train", "inductor_reduce_overhead", "amp_bf16", "gpu", "nightly"), rng=rng)
    default = record(Cell("gpt2_xl", "train", "inductor_default", "amp_bf16", "gpu", "nightly"), rng=rng)
    header = lambda table: table.splitlines()[0].split(" | ")  # noqa: E731
    assert "batch" not in header(cells.render_markdown([graphs, default]))
    table = cells.render_markdown([{**graphs, "batch": 2}, {**default, "batch": 4}])
    assert header(table)[1] == "batch"
    assert [line.split(" | ")[1] for line in table.splitlines()[2:4]] == ["4", "2"]  # default first: matrix order


def test_an_ok_cell_under_a_known_issue_says_the_issue_did_not_occur():
    cell = Cell("gpt2_xl", "train", "inductor_max_autotune", "amp_bf16", "gpu", "nightly")
    xpassed = {**record(cell, rng=np.random.default_rng(2)), "known_issue": "compile > 14 min"}
    assert cells.row(xpassed)[1] == "ok (known issue did not occur)"


def test_data_parallel_cells_get_a_table_of_their_own_with_scaling_splits_and_the_step_breakdown():
    rng = np.random.default_rng(3)
    ddp = record(
        Cell("gpt2", "ddp", "inductor_ddp_optimizer", "amp_bf16", "gpu", "nightly"),
        rng=rng,
        with_clocks=False,
        eager_ms=62.8,
        speedup=1.33,
        single_eager_ms=64.0,
        single_compiled_ms=33.5,
        scaling_eager=1.96,
        scaling_compiled=1.40,
        world_size=2,
        ddp_buckets=14,
        ddp_splits=13,
        ddp_wrapper_breaks=2,
        ranks_param_diff=0.0,
        compute_speedup=1.9,
        compute_speedup_lo=1.88,
        compute_speedup_hi=1.93,
        eager_compute_ms=60.1,
        compiled_compute_ms=31.6,
        eager_comm_ms=9.0,
        compiled_comm_ms=9.5,
        eager_comm_exposed_ms=1.2,
        compiled_comm_exposed_ms=8.0,
        eager_gpu_idle_ms=1.5,
        compiled_gpu_idle_ms=8.2,
    )
    train = record(Cell("gpt2", "train", "inductor_default", "amp_bf16", "gpu", "nightly"), rng=rng)
    assert "Data-parallel" not in cells.render_markdown([train])
    out = cells.render_markdown([ddp, train])
    main_table, ddp_table = out.split("### Data-parallel cells")
    assert "`gpt2-ddp-inductor_ddp_optimizer-amp_bf16`" in main_table  # every cell in the per-cell table too
    (line,) = [line for line in ddp_table.splitlines() if line.startswith("| `gpt2-ddp")]
    columns = line.split(" | ")
    assert columns[4:11] == [
        "64.00 → 33.50",
        "1.96 → 1.40 of 2 (98 % → 70 %)",
        "1.900× [1.880, 1.930]",
        "60.10 → 31.60",
        "9.00 (1.20) → 9.50 (8.00)",
        "1.50 → 8.20",
        "14 / 13 / 2",
    ]
    assert columns[-1] == "pass, ranks identical |"
    no_cuda = (
        "compute_speedup",
        "eager_compute_ms",
        "compiled_compute_ms",
        "eager_comm_ms",
        "eager_gpu_idle_ms",
        "compiled_gpu_idle_ms",
    )
    cpu = {**ddp, **dict.fromkeys(no_cuda)}
    line = cells.render_markdown([cpu]).splitlines()[-3]  # the ddp table's row, before its note
    assert line.split(" | ")[6:10] == ["–", "–", "–", "–"]
