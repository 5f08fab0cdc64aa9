"""How much faster torch.compile makes each model's train and inference step, and is it still right.

One test per (model, variant, precision) of each phase, straight from the zoo (the ini setting
perf_registry names it; the plugin parametrizes `cell` for each test marked perf_cells). `-m gpu` runs the
real sizes on a GPU, `-m cpu` the tiny CPU tier; `-m "gpu and pr"` is the PR gate's slice.
"""

import pytest


@pytest.mark.perf_cells("train")
def test_train_step(cell, perf, benchmark):
    perf.measure(cell, benchmark)


@pytest.mark.perf_cells("infer")
def test_infer_step(cell, perf, benchmark):
    perf.measure(cell, benchmark)


@pytest.mark.perf_cells("ddp")
def test_ddp_train_step(cell, perf, benchmark):
    """The train step data-parallel on cell.world ranks (GPUs; gloo processes on the CPU tier)."""
    perf.measure(cell, benchmark)
