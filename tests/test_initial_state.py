"""Each side is a copy of the initial state's template model, not a second build from the config: for every
zoo model the copy must be the model a build and load_state_dict gave (weights, every buffer, tied weights,
modes), and stepping it must leave the state untouched."""

import pytest

torch = pytest.importorskip("torch")

from fixtures import REGISTRY  # noqa: E402
from perfgate.core.matrix import Cell  # noqa: E402
from perfgate.measure.steps import build_model, initial_state  # noqa: E402

CPU = torch.device("cpu")


def tied_groups(model) -> list[list[str]]:
    """Parameter names grouped by the tensor they name (a tied embedding and head share one)."""
    groups: dict[int, list[str]] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return sorted(groups.values())


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_a_copy_of_the_template_is_the_model_a_build_and_load_gave(name):
    spec = REGISTRY[name]
    size = spec.size(Cell(name, "train", "inductor_default", "fp32", "cpu"))
    state = initial_state(spec, size, seed=0)
    copied = build_model(spec, size, state, CPU)
    built = spec.build(size.config)
    built.load_state_dict(dict(state))

    assert copied is not state.template
    assert tied_groups(copied) == tied_groups(built)
    for mine, theirs in (
        (copied.named_parameters(), built.named_parameters()),
        (copied.named_buffers(), built.named_buffers()),
    ):
        mine, theirs = dict(mine), dict(theirs)
        assert mine.keys() == theirs.keys()  # non-persistent buffers too: load_state_dict never sets them
        for key in mine:
            assert torch.equal(mine[key], theirs[key]), key
            assert mine[key].requires_grad == theirs[key].requires_grad, key
    assert [m.training for m in copied.modules()] == [m.training for m in built.modules()]

    with torch.no_grad():
        for param in copied.parameters():
            param.add_(1.0)  # a step of the copy
    assert all(torch.equal(state[k], v) for k, v in built.state_dict().items())


def test_a_plain_state_without_a_template_is_still_built_and_loaded():
    spec = REGISTRY["resnet50"]
    size = spec.size(Cell("resnet50", "infer", "inductor_default", "fp32", "cpu"))
    state = initial_state(spec, size, seed=0)
    model = build_model(spec, size, dict(state), CPU, torch.float64)
    assert all(torch.equal(v, state[k].double()) for k, v in model.state_dict().items() if v.is_floating_point())


def test_numerics_steps_without_tensors_take_the_same_steps_and_copy_only_the_losses():
    """A process that does not judge numerics (an A/B side's later ones) still takes the numerics steps, so its
    timed steps start from the same state, but copies no gradient or parameter to the host."""
    from perfgate.measure.steps import Side, captured_steps, cell_batches

    spec = REGISTRY["vit_b16"]
    cell = Cell("vit_b16", "train", "inductor_default", "fp32", "cpu")
    size = spec.size(cell)
    state = initial_state(spec, size, seed=0)
    _, batches, _ = cell_batches(spec, cell, size, 0, CPU)
    judged, skipped = (Side(spec, build_model(spec, size, state, CPU), "train", "fp32", CPU) for _ in range(2))
    full, lean = captured_steps(judged, batches), captured_steps(skipped, batches, tensors=False)
    assert [list(step) for step in lean] == [["loss"], ["loss"]]
    assert any(key.startswith("grad.") for key in full[1]) and any(key.startswith("param.") for key in full[1])
    assert all(torch.equal(a["loss"], b["loss"]) for a, b in zip(full, lean))
    for (name, mine), theirs in zip(skipped.model.state_dict().items(), judged.model.state_dict().values()):
        assert torch.equal(mine, theirs), name


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: a GPU cell's weights are drawn on it")
@pytest.mark.parametrize("name", ["gpt2", "resnet50"])
def test_a_gpu_cells_weights_are_drawn_on_the_gpu_the_same_every_time_and_kept_on_the_host(name):
    spec = REGISTRY[name]
    size = spec.size(Cell(name, "train", "inductor_default", "fp32", "cpu"))
    first, again = (initial_state(spec, size, seed=0, device=torch.device("cuda")) for _ in range(2))
    host = initial_state(spec, size, seed=0)
    assert first.keys() == again.keys() == host.keys()
    assert all(t.device.type == "cpu" for t in [*first.values(), *first.template.parameters()])
    assert all(torch.equal(first[k], again[k]) for k in first)
    assert not all(torch.equal(first[k], host[k]) for k in first)  # another generator: other weights


def test_a_cpu_cells_weights_are_the_host_draw():
    spec = REGISTRY["gpt2"]
    size = spec.size(Cell("gpt2", "train", "inductor_default", "fp32", "cpu"))
    on_cpu, plain = initial_state(spec, size, seed=0, device=CPU), initial_state(spec, size, seed=0)
    assert all(torch.equal(on_cpu[k], plain[k]) for k in plain)
