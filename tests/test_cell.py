"""run_cell on a tiny CPU model: every way a cell can go wrong becomes a record with a reason."""

import contextlib
import dataclasses
import json

import pytest

torch = pytest.importorskip("torch")
from tiny_mlp import ENV, OPTIONS, REGISTRY, mlp_batch, mlp_spec  # noqa: E402

from perfgate.core.job import RunOptions  # noqa: E402
from perfgate.core.matrix import VARIANTS, Cell, Variant  # noqa: E402
from perfgate.core.record_reading import first_call_cache  # noqa: E402
from perfgate.core.spec import Size  # noqa: E402
from perfgate.core.stages import STAGES  # noqa: E402
from perfgate.measure import cache_artifacts, launch, record_builder, reference  # noqa: E402
from perfgate.measure.cell import run_cell  # noqa: E402


def _run(spec, phase="infer"):
    return run_cell(spec, Cell("mlp", phase, "aot_eager", "fp32", "cpu"), OPTIONS, ENV)


def _run_with_artifacts(registry: str):
    """Inductor, inference: aot_eager leaves no cache artifacts, and one forward graph compiles fastest."""
    options = dataclasses.replace(OPTIONS, warm_compile="artifacts", registry=registry)
    return run_cell(REGISTRY["mlp"], Cell("mlp", "infer", "inductor_default", "fp32", "cpu"), options, ENV)


def test_a_healthy_cell_passes():
    record = _run(mlp_spec())
    assert (record["status"], record["numerics"]) == ("ok", "pass")


def test_a_record_says_its_batch_and_how_fast_its_host_ran():
    record = _run(mlp_spec(), phase="train")
    assert record["batch"] == 4
    # the host probe around the timed rounds: wall ms of its work, and the thread's CPU ms for it
    assert 0 < record["host_probe_cpu_ms"] <= record["host_probe_ms"] * 1.05


@pytest.mark.parametrize(
    "phase, variant, device_kind, batch",
    [
        ("train", "inductor_reduce_overhead", "gpu", 2),
        ("train", "inductor_max_autotune", "gpu", 2),
        ("train", "cudagraphs", "gpu", 2),
        ("train", "inductor_max_autotune_no_cudagraphs", "gpu", 8),
        ("infer", "inductor_reduce_overhead", "gpu", 8),
        ("train", "inductor_reduce_overhead", "cpu", 4),
    ],
)
def test_only_a_train_step_under_cuda_graphs_takes_the_cuda_graph_batch(phase, variant, device_kind, batch):
    spec = mlp_spec(sizes={"cpu": Size({}, batch=4), "gpu": Size({}, batch=8, cuda_graph_train_batch=2)})
    assert spec.size(Cell("mlp", phase, variant, "amp_bf16", device_kind)).batch == batch


@pytest.mark.parametrize("field, value", [("batch", 0), ("cuda_graph_train_batch", 2.5)])
def test_a_batch_that_is_no_whole_number_of_samples_is_refused_by_name(field, value):
    with pytest.raises(ValueError, match=f"{field}={value!r}"):
        Size({}, **dict({"batch": 4}, **{field: value}))


def test_the_numerics_judge_is_set_aside_from_the_compiled_peak(monkeypatch):
    """The judge's fp64 temporaries on the GPU are not the compiled side's memory (schema 4 counted them:
    gpt2 infer read 11474 MiB for 1348 on an H100): the cell judges inside Memory.set_aside."""
    from perfgate.measure import pipeline as cell_module

    events = []

    class Recording(cell_module.Memory):
        @contextlib.contextmanager
        def set_aside(self):
            events.append("aside")
            yield
            events.append("aside ends")

    def judging(*args, **kwargs):
        events.append("judge")
        return compare(*args, **kwargs)

    compare = cell_module.compare_steps
    monkeypatch.setattr(cell_module, "Memory", Recording)
    monkeypatch.setattr(cell_module, "compare_steps", judging)
    assert _run(mlp_spec())["status"] == "ok"
    assert events == ["aside", "judge", "aside ends"]


def fake_allocator(monkeypatch, resident_mib: float):
    """A fake CUDA allocator, `resident_mib` allocated: returns allocate(mib), which sets what is allocated."""
    from perfgate.measure.memory import MIB

    state = {"now": resident_mib * MIB, "peak": resident_mib * MIB}

    def allocate(mib):
        state["now"] = mib * MIB
        state["peak"] = max(state["peak"], state["now"])

    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: state["now"])
    monkeypatch.setattr(torch.cuda, "max_memory_allocated", lambda *a: state["peak"])
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: state.update(peak=state["now"]))
    return allocate


def test_a_set_aside_block_leaves_the_peak_before_it_and_after_it(monkeypatch):
    """Memory's arithmetic on a fake CUDA allocator (MiB): 100 resident, a side peaks at 300, a set-aside
    block at 900, the side again at 250; its peak is 300 - 100."""
    from perfgate.measure.memory import Memory

    allocate = fake_allocator(monkeypatch, 100)
    memory = Memory(torch.device("cuda"))
    allocate(300), allocate(120)
    with memory.set_aside():
        allocate(900), allocate(120)
    allocate(250)
    assert memory.peak_mb() == 200.0
    allocate(500)
    assert memory.peak_mb() == 400.0
    memory.reset()  # what is resident at a reset (500) still counts
    allocate(130)
    assert memory.peak_mb() == 400.0


def test_the_base_is_taken_once_the_last_cells_garbage_is_collected(monkeypatch):
    """The last cell's models, held in reference cycles (5000 MiB), are freed by the first garbage collection:
    taken before it, the base sat above what was resident once one ran mid-side (CUDA-graph capture runs one),
    and the compiled peak read -5152 MiB on an H100. A base that is still undercut reads negative and fails."""
    from perfgate.measure import memory
    from perfgate.measure.memory import Memory

    allocate = fake_allocator(monkeypatch, 5100)
    monkeypatch.setattr(memory.gc, "collect", lambda: allocate(100))  # the garbage freed
    side = Memory(torch.device("cuda"))
    side.reset()  # as the eager side's warm-up starts
    allocate(600)
    assert side.peak_mb() == 500.0
    monkeypatch.setattr(memory.gc, "collect", lambda: None)
    allocate(5100)
    side.rebase()  # garbage nothing collects before the base, freed mid-side: negative, a failed figure
    allocate(100), side.reset(), allocate(300)
    assert side.peak_mb() == -4800.0


def test_a_cell_that_compiled_nothing_fails_as_ran_eager():
    record = _run(mlp_spec(predict=torch._dynamo.disable(lambda m, b: m(b["x"]))))
    assert record["status"] == "failed"
    assert record["reason"].startswith("ran eager")
    assert record["compile_s"] is not None  # what was measured before the failure stays


def test_a_compiled_optimizer_alone_does_not_pass_a_model_that_ran_eager(monkeypatch):
    """The optimizer's step compiles graphs of its own: counted as the model's, a cell whose model dynamo never
    traced passed as compiled. aot_eager keeps the optimizer's compile fast on the CPU."""
    from perfgate.core import matrix

    variant = Variant("aot_eager_compiled_optimizer", "aot_eager", compiled_optimizer=True)
    monkeypatch.setitem(matrix.VARIANTS, variant.name, variant)
    cell = Cell("mlp", "train", variant.name, "fp32", "cpu")
    eager_model = mlp_spec(
        loss=torch._dynamo.disable(lambda m, b: torch.nn.functional.cross_entropy(m(b["x"]), b["y"]))
    )
    record = run_cell(eager_model, cell, OPTIONS, ENV)
    assert record["status"] == "failed"
    assert record["reason"].startswith("ran eager: aot_eager_compiled_optimizer compiled no graph of the model (its ")
    assert run_cell(mlp_spec(), cell, OPTIONS, ENV)["status"] == "ok"  # model and optimizer both compiled


def _overflowing_when_compiled(model, batch):
    """A loss whose compiled graph overflows every step (dynamo reads is_compiling as True), eager's never."""
    loss = torch.nn.functional.cross_entropy(model(batch["x"]), batch["y"])
    return loss * float("inf") if torch.compiler.is_compiling() else loss


@pytest.mark.parametrize(
    ("loss", "precision", "skips", "status"),
    [
        (None, "amp_fp16", (0, 0), "ok"),
        (None, "fp32", (None, None), "ok"),  # no scaler, nothing to count
        (_overflowing_when_compiled, "amp_fp16", (0, "many"), "failed"),
    ],
    ids=["fp16-clean", "fp32-no-scaler", "fp16-compiled-overflows"],
)
def test_gradscaler_skips_are_counted_and_sides_that_skip_unalike_fail(loss, precision, skips, status):
    """A skipped step does no update: a compiled fp16 step that overflowed every step timed less work than eager's
    and read as a speedup. Numerics off, as where an A/B side's first process judged them: the watch stands alone."""
    spec = mlp_spec(**({"loss": loss} if loss else {}))
    options = dataclasses.replace(OPTIONS, numerics=False)
    record = run_cell(spec, Cell("mlp", "train", "aot_eager", precision, "cpu"), options, ENV)
    eager, compiled = record["eager_scaler_skips"], record["compiled_scaler_skips"]
    assert eager == skips[0] and (compiled > 10 if skips[1] == "many" else compiled == skips[1])
    assert record["status"] == status
    if status == "failed":
        assert record["reason"].startswith(f"GradScaler skipped {compiled} compiled and 0 eager optimizer step(s)")


def test_skips_are_counted_exactly_past_the_steps_after_which_gradscaler_would_grow_its_scale():
    """GradScaler doubles its scale after 2000 clean steps by default, which cancels a skip in the halvings:
    3 skips and then 2100 clean steps read 2, and a side whose skips came later read 3 (a false difference)."""
    from perfgate.measure.steps import Side

    model = torch.nn.Linear(8, 2)
    side = Side(mlp_spec(), model, "train", "amp_fp16", torch.device("cpu"))
    x = torch.randn(4, 8)
    for loss_scale in [float("inf")] * 3 + [1.0] * 2100:
        side._backward_and_update(model(x).float().pow(2).mean() * loss_scale)
    assert side.scaler_skips() == 3


def test_an_error_inside_the_model_becomes_a_reason_not_a_crash():
    def broken(model, batch):
        raise RuntimeError("shape mismatch in block 3")

    record = _run(mlp_spec(predict=broken))
    assert record["status"] == "failed"
    assert "shape mismatch in block 3" in record["reason"]


def test_nan_in_the_compiled_output_fails_numerics():
    spec = mlp_spec(predict=lambda m, b: m(b["x"]) / (b["x"].sum() * 0) if torch.compiler.is_compiling() else m(b["x"]))
    record = _run(spec)
    assert record["status"] == "failed" and record["numerics"] == "fail"
    assert "non-finite" in str(record["numerics_detail"]["checks"])


def test_checkpoints_keep_what_a_killed_cell_had_measured():
    seen = []
    record = run_cell(
        mlp_spec(),
        Cell("mlp", "infer", "aot_eager", "fp32", "cpu"),
        OPTIONS,
        ENV,
        checkpoint=lambda partial: seen.append(dict(partial)),
    )
    assert record["status"] == "ok" and record["reason"] == ""
    assert [p["status"] for p in seen] == ["failed"] * len(seen) and len(seen) >= 3
    assert seen[0]["reason"].endswith("building'") and seen[1]["reason"].endswith("numerics reference'")
    compiled = next(p for p in seen if "checking numerics" in p["reason"])  # killed in a recompile
    assert compiled["compile_s"] is not None and compiled["graph_count"] >= 1
    timing = next(p for p in seen if "timing" in p["reason"])  # killed while timing: compile and numerics kept
    assert timing["compile_s"] is not None and timing["numerics"] == "pass" and timing["speedup"] is None


def test_a_fresh_process_compiles_from_the_cells_cache_artifacts():
    record = _run_with_artifacts("tiny_mlp:REGISTRY")
    assert record["status"] == "ok", record["reason"]
    assert record["compile_artifacts_note"] is None
    assert record["compile_artifacts_bytes"] > 0
    assert record["compile_artifacts_s"] > 0
    assert record["compile_artifacts_hits"] > 0  # 0 would mean the child compiled cold: the load went unused
    assert record["compile_warm_s"] > 0  # "artifacts" is "on" plus the fresh process
    # The cell's own first call, in its fresh cache: every lookup missed, and the record says it was cold.
    assert record["compile_cache_hits"] == 0 and record["compile_cache_misses"] > 0
    assert first_call_cache(record) == "cold"


def test_a_broken_fresh_process_leaves_the_cell_ok_with_a_note():
    record = _run_with_artifacts("no_such_zoo:REGISTRY")
    assert record["status"] == "ok", record["reason"]
    assert record["compile_artifacts_bytes"] > 0 and record["compile_artifacts_s"] is None
    assert "ModuleNotFoundError: No module named 'no_such_zoo'" in record["compile_artifacts_note"]


def test_a_fresh_process_past_its_time_is_killed_with_a_note():
    record = {}
    options = dataclasses.replace(OPTIONS, registry="tiny_mlp:REGISTRY")
    compiled = cache_artifacts.measure_in_child(
        b"", Cell("mlp", "infer", "inductor_default", "fp32", "cpu"), options, timeout_s=0.2
    )  # the child is still importing torch
    record_builder.merge_cache_artifacts(record, compiled)
    assert record == {"compile_artifacts_note": "fresh process: timed out after 0.2 s"}


def test_warm_compile_takes_its_option_values_only():
    with pytest.raises(ValueError, match="off, on, artifacts"):
        RunOptions(warm_compile=True)


def test_inductor_config_reaches_torch_compile_as_options():
    """torch.compile checks option names when it is called (no compile yet), so this pins the key to a real
    inductor setting on this torch, and mode and options are never passed together."""
    kwargs = VARIANTS["inductor_mark_dynamic_no_pad"].compile_kwargs()
    assert kwargs["options"] == {"shape_padding": False} and "mode" not in kwargs
    torch.compile(lambda x: x, **kwargs)
    with pytest.raises(ValueError, match="exclude each other"):
        Variant("bad", "inductor", "max-autotune", inductor_config=(("shape_padding", False),))


def test_a_recompile_records_the_guard_that_failed():
    from perfgate.measure import introspect

    introspect.reset_compiler()
    double = torch.compile(lambda x: x * 2, backend="eager", dynamic=False)
    double(torch.ones(2))
    double(torch.ones(3))
    counts = introspect.compile_counts()
    assert counts["frames"] == 2
    assert len(counts["recompile_reasons"]) == 1 and "size mismatch" in counts["recompile_reasons"][0]
    introspect.reset_compiler()
    assert introspect.compile_counts()["recompile_reasons"] == []


def test_more_recompiles_than_the_strategy_allows_fail_the_cell_and_name_the_guard():
    """Two batch sizes in the stream of a fixed-shape model: the second costs a recompile it may not."""
    sizes = iter((4, 6))
    spec = mlp_spec(make_batch=lambda config, size, generator: mlp_batch(config, next(sizes), generator), stream=2)
    record = run_cell(spec, Cell("mlp", "infer", "aot_eager", "fp32", "cpu"), OPTIONS, ENV)
    assert record["status"] == "failed" and record["recompiles"] == 1 and record["recompiles_allowed"] == 0
    assert "size mismatch at index 0. expected 4, actual 6" in record["reason"]


# ---------------------------------------------------------------------------------------------- stages, reference


def test_a_records_stages_account_for_its_wall_time():
    record = _run(mlp_spec(), phase="train")
    assert record["process"] == "pytest"  # measured in this process
    assert {"build", "reference", "compile", "numerics", "warmup", "timing"} <= set(record["stages"])
    assert set(record["stages"]) <= set(STAGES)
    assert sum(record["stages"].values()) == pytest.approx(record["wall_s"], abs=0.05)


def test_a_cached_reference_is_read_back_equal_and_a_changed_key_misses(tmp_path):
    options = dataclasses.replace(OPTIONS, reference_dir=str(tmp_path))
    cell = Cell("mlp", "train", "aot_eager", "fp32", "cpu")
    first, again = (run_cell(mlp_spec(), cell, options, ENV) for _ in range(2))
    assert (first["reference_cache"], again["reference_cache"]) == ("stored", "hit")
    assert first["numerics"] == again["numerics"] == "pass"
    assert first["numerics_detail"]["worst"] == again["numerics_detail"]["worst"]
    (stored,) = tmp_path.glob("*/*.pt")
    fresh = reference.cached(None, None, lambda: _fresh_reference(cell))[0]
    read = torch.load(stored, weights_only=True)["steps"]
    assert [sorted(step) for step in read] == [sorted(step) for step in fresh]
    for read_step, fresh_step in zip(read, fresh):
        for name, tensor in fresh_step.items():
            assert torch.equal(read_step[name], tensor), name
    # another seed (hence other weights and batches) is another key: computed and stored beside the first
    run_cell(mlp_spec(), cell, dataclasses.replace(options, seed=1), ENV)
    assert len(list(tmp_path.glob("*/*.pt"))) == 2


def _fresh_reference(cell):
    from perfgate.measure.steps import cell_batches, initial_state

    spec = mlp_spec()
    size = spec.size(cell)
    state = initial_state(spec, size, OPTIONS.seed)
    host_batches = cell_batches(spec, cell, size, OPTIONS.seed, torch.device("cpu"))[0]
    return reference.compute(spec, cell, size, state, host_batches[:2], torch.device("cpu"))


@pytest.mark.parametrize("change", ["seed", "batches", "torch_version", "device"])
def test_a_reference_key_changes_with_what_the_reference_depends_on(change, monkeypatch):
    spec, cell = mlp_spec(), Cell("mlp", "train", "aot_eager", "fp32", "cpu")
    size = spec.size(cell)
    batches = [{"x": torch.ones(4, 8)}]
    base = reference.key(spec, cell, size, 0, batches, torch.device("cpu"))
    args = dict(seed=0, batches=batches, device=torch.device("cpu"))
    if change == "seed":
        args["seed"] = 1
    elif change == "batches":
        args["batches"] = [{"x": torch.zeros(4, 8)}]
    elif change == "torch_version":
        monkeypatch.setattr(reference, "_version", lambda dist: "0.0-other")
    else:
        monkeypatch.setattr(torch.cuda, "get_device_name", lambda device: "Other GPU")
        args["device"] = torch.device("cuda", 0)
    assert reference.key(spec, cell, size, args["seed"], args["batches"], args["device"]) != base


def test_numerics_off_skips_the_check_and_says_so():
    record = run_cell(
        mlp_spec(), Cell("mlp", "train", "aot_eager", "fp32", "cpu"), dataclasses.replace(OPTIONS, numerics=False), ENV
    )
    assert (record["status"], record["numerics"]) == ("ok", "skipped")
    assert record["reference_cache"].startswith("skipped")


@pytest.mark.parametrize(
    "gpu, precision, tf32, rate",
    [
        ("NVIDIA H100 80GB HBM3", "amp_bf16", True, 989.0),
        ("NVIDIA H100 PCIe", "amp_fp16", True, 756.0),  # the part before its family
        ("NVIDIA H200", "fp32", True, 495.0),  # fp32 under TF32 reads the tensor cores' rate
        ("NVIDIA H200", "fp32", False, 67.0),
        ("NVIDIA GeForce RTX 4090", "amp_bf16", True, None),  # unknown: no MFU rather than a wrong one
        (None, "amp_bf16", True, None),
    ],
)
def test_mfu_divides_by_the_gpus_datasheet_rate(gpu, precision, tf32, rate):
    from perfgate.measure.datasheet import datasheet_tflops

    assert datasheet_tflops(gpu, precision, tf32) == rate


def test_a_child_that_reports_its_record_and_exits_between_two_reads_is_not_lost(tmp_path):
    """The supervisor reads the child's events, then sees every child ended: the record the child wrote in
    between, just before exiting, must still count (a 4-rank CPU cell under load read 'ended ... with nothing
    to report' so, 2026-11-27)."""
    path = tmp_path / "events-0.jsonl"
    events = launch.Events(path)
    real_read = events.read

    def read(*args, **kwargs):  # the child writes its record and exits right after the supervisor's first read
        real_read(*args, **kwargs)
        if not path.exists():
            path.write_text(json.dumps({"record": {"status": "ok"}}) + "\n")

    events.read = read
    child = type("Ended", (), {"label": "rank 0 of 2", "poll": lambda self: 0, "stderr": tmp_path / "stderr"})()
    failure = launch.supervise([child], limit_s=60, events=events, finished=lambda: events.record is not None)
    assert failure is None and events.record == {"status": "ok"}
