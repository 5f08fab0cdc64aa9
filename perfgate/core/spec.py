"""What the engine needs to know of a model: one frozen record of data and small callables.

The engine never imports the zoo; a model reaches it as a ModelSpec. Imports no torch at module level.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Mapping

from perfgate.core.matrix import PHASES, PRECISIONS, VARIANTS

DEVICE_KINDS = ("gpu", "cpu")
ISSUE_ACTIONS = ("xfail", "skip")


@dataclass(frozen=True)
class Size:
    """One size of a model: the builder's config and the batch.

    `config` goes to ModelSpec.build and ModelSpec.make_batch unchanged (layers, widths, sequence length,
    image size); `batch` is samples per step; `units_per_sample` is tokens or images per sample.
    A variable-length model also gives what the engine's padding strategies (matrix.Variant.shapes) pad to:
    `max_seq`, the longest sequence (pad-to-max), and `buckets`, the fixed lengths of the bucketed strategy,
    ascending and ending at max_seq; both in the model's sequence unit (tokens).
    `cuda_graph_train_batch`: samples per step for a train cell whose compiled step replays CUDA graphs
    (matrix.Variant.cuda_graphs), where `batch` does not fit: the graphs' private pools hold the compiled
    step's activations for good, beside both sides' weights and optimizer state. None: `batch`.
    """

    config: Mapping[str, Any]
    batch: int
    units_per_sample: int = 1
    max_seq: int | None = None
    buckets: tuple[int, ...] = ()
    cuda_graph_train_batch: int | None = None

    def __post_init__(self):
        for name in ("batch", "cuda_graph_train_batch"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"size {name}={value!r}: give a whole number of samples >= 1")


@dataclass(frozen=True)
class Tolerance:
    """The RMSE-multiplier rule of PyTorch's accuracy CI, per captured tensor (perfgate.measure.numerics judges).

    compiled passes if  rmse(compiled, ref) <= multiplier * rmse(eager, ref) + floor * rms(ref) + group floor
    Without a higher-precision reference:  rmse(compiled, eager) <= fallback_rtol * rms(eager) + group floor
    `floor` is relative to the reference's own RMS, so one number serves logits, losses and gradients; for a
    parameter after the optimizer steps, to its update's (`rms(ref update)`), not its own size. Parameters also
    get `update_floor * rms(ref update)`. The group floor is
    `floor * rms(all gradients of the step)` for a gradient, `update_floor * rms(all parameter updates of
    the step)` for a parameter, none for outputs and losses. Why the floors: docs/numerics.md.
    """

    multiplier: float
    floor: float
    fallback_rtol: float
    update_floor: float = 0.2
    reason: str = ""


DEFAULT_TOLERANCES: Mapping[str, Tolerance] = {
    p.name: Tolerance(multiplier=p.rmse_multiplier, floor=p.rms_floor, fallback_rtol=p.fallback_rtol)
    for p in PRECISIONS.values()
}


@dataclass(frozen=True)
class KnownIssue:
    """A cell pattern that is expected to fail or must be skipped, with the reason users will read.

    Each of phase/variant/precision/device_kind is a value or "*" for any.
    """

    reason: str
    phase: str = "*"
    variant: str = "*"
    precision: str = "*"
    device_kind: str = "*"
    action: str = "xfail"  # or "skip"

    def __post_init__(self):
        # A misspelt pattern would match no cell: the issue would silently stop marking anything.
        for field_name, valid in (
            ("phase", PHASES),
            ("variant", tuple(VARIANTS)),
            ("precision", tuple(PRECISIONS)),
            ("device_kind", DEVICE_KINDS),
        ):
            value = getattr(self, field_name)
            if value != "*" and value not in valid:
                raise ValueError(
                    f"known issue {self.reason[:60]!r}: {field_name}={value!r} is not one of "
                    f"{', '.join(('*',) + valid)}"
                )
        if self.action not in ISSUE_ACTIONS:
            raise ValueError(
                f"known issue {self.reason[:60]!r}: action={self.action!r} is not one of {', '.join(ISSUE_ACTIONS)}"
            )

    def matches(self, cell) -> bool:
        pairs = (
            (self.phase, cell.phase),
            (self.variant, cell.variant),
            (self.precision, cell.precision),
            (self.device_kind, cell.device_kind),
        )
        return all(want in ("*", got) for want, got in pairs)


@dataclass(frozen=True)
class ModelSpec:
    """One model of the zoo.

    build(config) -> nn.Module           random init (the engine seeds torch first), dropout off
    make_batch(config, batch, generator) -> dict of CPU tensors, seeded by the generator
    predict(model, batch) -> Tensor      what inference returns and numerics compares (logits, masks)
    loss(model, batch) -> Tensor         a scalar; the train step compiles this path
    blocks(model) -> list of the repeated blocks (for fault injection and regional compilation)

    Variable-length models (captions, sentences) also give:
    pad(batch, length) -> the batch padded to `length` along its sequence axis
    seq_len(batch) -> its unpadded length; `dynamic_dims` the (key, dim) pairs that vary
    `stream` batches of different lengths make one round, so eager and compiled see the same mix.
    Each of its sizes gives max_seq and buckets (Size).
    """

    name: str
    description: str
    build: Callable
    make_batch: Callable
    predict: Callable
    loss: Callable
    blocks: Callable
    unit: str  # "tokens" | "images"
    sizes: Mapping[str, Size]  # by device kind: "gpu" real, "cpu" tiny
    tolerances: Mapping[str, Tolerance] = field(default_factory=lambda: dict(DEFAULT_TOLERANCES))
    known_issues: tuple[KnownIssue, ...] = ()
    lr: float = 1e-4
    speedup_threshold: float | None = None  # gate override (fraction); None = the gate's default
    time_limit_s: float | None = None  # an isolated cell's time limit, s; None = the variant's default
    # A GPU cell's seconds against its phase's prior (perfgate.plan.costs.prior_s), which weighs the prior where no
    # costs history knows the cell: a cold run's shards and its ETA (its precompile: compile_cost). 1.0: the phase's
    # typical model; the zoo's figures: docs/options.md, "What a run says while it runs". CPU cells go unweighted.
    cost: float = 1.0
    # Its cold compile against its phase's prior: what a precompile's processes are dealt by (they compile and time
    # nothing, and a compile weighs unlike a timed cell: upernet_convnext_t's is 1.7, its cells' 0.95). None: `cost`.
    compile_cost: float | None = None
    cpu_variants: tuple[str, ...] = ("inductor_default",)
    cpu_phases: tuple[str, ...] = ("train", "infer")
    regional: bool = False  # repeated transformer blocks worth compiling alone
    ddp: bool = False  # has data-parallel training cells (the "ddp" phase: on each of matrix.DDP_WORLDS)
    pr: bool = True  # its inductor_default amp_bf16 cells are in the PR tier (False: every cell nightly)
    pad: Callable | None = None
    seq_len: Callable | None = None
    dynamic_dims: tuple[tuple[str, int], ...] = ()
    stream: int = 1

    def __post_init__(self):
        for name, value in (("cost", self.cost), ("compile_cost", self.compile_cost)):
            if value is None and name == "compile_cost":
                continue
            if isinstance(value, bool) or not (isinstance(value, (int, float)) and 0 < value < float("inf")):
                unset = ", or None to weigh it by cost" if name == "compile_cost" else ""
                raise ValueError(
                    f"model {self.name!r}: {name}={value!r}; give a finite number of times its phase's prior, "
                    f"> 0{unset}"
                )
        missing = [p for p in PRECISIONS if p not in self.tolerances]
        if missing:
            raise ValueError(f"model {self.name!r}: no tolerance for precision(s) {missing}")
        unpadded = [kind for kind, size in self.sizes.items() if not (size.max_seq and size.buckets)]
        if self.pad is not None and unpadded:
            raise ValueError(
                f"model {self.name!r} pads its sequences but size(s) {unpadded} give no max_seq and buckets"
            )

    @property
    def compile_weight(self) -> float:
        """What its cold compile weighs against its phase's prior: compile_cost, else cost."""
        return self.cost if self.compile_cost is None else self.compile_cost

    def size(self, cell) -> Size:
        """The size a cell runs: its device kind's, at the CUDA-graph train batch where that applies."""
        size = self.sizes[cell.device_kind]
        graphs = cell.device_kind == "gpu" and VARIANTS[cell.variant].cuda_graphs
        if cell.phase == "train" and graphs and size.cuda_graph_train_batch is not None:
            return replace(size, batch=size.cuda_graph_train_batch)
        return size

    def runs(self, variant, phase: str) -> bool:
        """Whether a variant means anything for this model and phase."""
        if (variant.ddp is not None) != (phase == "ddp") or (phase == "ddp" and not self.ddp):
            return False
        if variant.shapes is not None and (self.pad is None or phase != "train"):
            return False
        if variant.regional and not self.regional:
            return False
        return not (variant.compiled_optimizer and phase != "train")

    def known_issue(self, cell) -> KnownIssue | None:
        return next((k for k in self.known_issues if k.matches(cell)), None)
