"""The model zoo as the engine reaches it: an import path "module:attribute" naming a dict of model name ->
ModelSpec, which the ini setting perf_registry gives (default DEFAULT). Nothing in perfgate imports the zoo by
name; an isolated cell's child process finds its model through the same path, as a spec holds lambdas and
cannot be pickled.
"""

from __future__ import annotations

import importlib

DEFAULT = "fixtures:REGISTRY"


def load(path: str) -> dict:
    """The registry at `path` ("module:attribute"), imported on first use."""
    module, _, attribute = path.partition(":")
    return getattr(importlib.import_module(module), attribute)
