"""One serializable job: everything a process needs to run one cell (or one of its parts) as the pytest process
would have, in one JSON encoding. The pytest process runs a job itself (in-process), hands it to a warm worker
(an isolated cell), to each rank of a data-parallel cell, to a fresh process that compiles from cache
artifacts, or to a precompile process (perfgate.measure.launch starts and watches them all). Plain data: it
imports no torch, so neither does a process that only launches jobs.

A spec holds lambdas and cannot be pickled: a job names the model registry ("module:attribute") and the
model, and the process that runs it loads the spec from there.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

from perfgate.core.fault import Fault
from perfgate.core.matrix import DEFAULT_TIME_LIMIT_S, WARM_COMPILE, Cell
from perfgate.core.timing_plan import TimingPlan

# --perf-reference-cache's default, from where pytest starts (the plugin makes it absolute; the process engine
# hands each side's pytest one where the run started, perfgate.ab.process_run).
REFERENCE_CACHE = str(Path(".perfgate") / "reference")

# What a process does with a job: measure the cell; compile it into a kept cache and store its reference
# (--perf-precompile); or time a compile from cache artifacts in a fresh process (--perf-warm-compile artifacts).
PURPOSES = ("measure", "precompile", "artifacts")


@dataclass(frozen=True)
class RunOptions:
    """How to measure a cell: the run-wide options the faces read from --perf-* (or the CLI)."""

    device: str = "cuda"
    plan: TimingPlan = TimingPlan()
    warm_compile: str = "on"  # one of WARM_COMPILE
    cache_dir: str | None = None  # a kept inductor cache; None: a fresh one per cell (cold compiles)
    # The reference cache (perfgate.measure.reference): where fp64 reference steps are kept between runs and
    # processes, keyed by everything they depend on; None: computed in every cell.
    reference_dir: str | None = None
    # False: numerics is established elsewhere (an A/B side's first process) and this process skips it; the
    # record says so ("skipped"), and a gate run refuses such records' numerics.
    numerics: bool = True
    fault: Fault | None = None  # test-only planted fault
    seed: int = 0
    profile_dir: str | None = None  # write why-artifacts (traces, compile logs) under <dir>/<cell id>/
    # "module:attribute" of the model registry (name -> ModelSpec), set by the face: a fresh process finds
    # the cell's spec there by name, as specs hold lambdas and cannot be pickled. Never imported here.
    registry: str | None = None

    @classmethod
    def from_json(cls, fields: dict) -> "RunOptions":
        """The options a parent wrote with dataclasses.asdict (the plan and the fault as dicts)."""
        fault = Fault(**fields["fault"]) if fields.get("fault") else None
        return cls(**dict(fields, plan=TimingPlan(**fields["plan"]), fault=fault))

    def __post_init__(self):
        if self.warm_compile not in WARM_COMPILE:  # a bool from an older caller would silently mean "off"
            raise ValueError(f"warm_compile={self.warm_compile!r}; valid: {', '.join(WARM_COMPILE)}")


@dataclass(frozen=True)
class Job:
    """One cell for one process. `env` is the environment record the cell's record carries (a data-parallel
    cell's ranks share the parent's); None: the process reads its own. `results_path`: where the process
    streams the cell's checkpoints (None: it does not). `artifacts_path`: the cache artifacts a fresh
    process compiles from (purpose "artifacts")."""

    cell: Cell
    options: RunOptions
    tf32: bool
    purpose: str = "measure"
    env: dict | None = None
    results_path: str | None = None
    run_id: str | None = None
    limit_s: float = DEFAULT_TIME_LIMIT_S
    world: int = 1
    artifacts_path: str | None = None
    sys_path: tuple[str, ...] = ()
    # Why the gate measures this cell again ("confirm", "why-artifacts"), carried by its checkpoints: one left
    # by a re-measure killed mid-way must not stand in the results file as the cell's own measurement.
    remeasure: str = ""

    def __post_init__(self):
        if self.purpose not in PURPOSES:
            raise ValueError(f"purpose={self.purpose!r}; valid: {', '.join(PURPOSES)}")

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self))

    @classmethod
    def from_json(cls, text: str) -> "Job":
        fields = json.loads(text)
        return cls(
            **dict(
                fields,
                cell=Cell(**fields["cell"]),
                options=RunOptions.from_json(fields["options"]),
                sys_path=tuple(fields["sys_path"]),
            )
        )
