"""How much faster torch.compile makes each model's train and inference step, and is it still right.

One test per (model, variant, precision) of each phase, straight from the zoo. `-m gpu` runs the real
sizes on a GPU, `-m cpu` the tiny CPU tier; `-m "gpu and pr"` is the PR gate's slice.
"""

import pytest

from fixtures import REGISTRY
from perfgate.plugin import cells


@pytest.mark.parametrize("cell", cells(REGISTRY, "train"))
def test_train_step(cell, perf, benchmark):
    perf.measure(REGISTRY[cell.model], cell, benchmark)


@pytest.mark.parametrize("cell", cells(REGISTRY, "infer"))
def test_infer_step(cell, perf, benchmark):
    perf.measure(REGISTRY[cell.model], cell, benchmark)
