"""The matrix vocabulary: phases, compile variants, precisions, tiers and cell ids. Imports no torch.

A cell is (model, phase, variant, precision) on a device kind ("gpu" or "cpu"), and a data-parallel cell on
a number of ranks too. Its id reads like `gpt2-train-inductor_default-amp_bf16`; CPU-tier cells carry a `cpu-`
prefix; a data-parallel cell on other than DDP_ID_WORLD ranks names them in its phase (`gpt2-ddp4-...`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, Mapping

# --perf-warm-compile: "on" times the compile again in this process with the on-disk caches warm;
# "artifacts" also times it in a fresh process handed torch.compiler.save_cache_artifacts()'s bytes.
WARM_COMPILE = ("off", "on", "artifacts")
# An isolated cell's time limit, seconds (--perf-isolate). A cold GPU training compile took 25-70 s on an
# H100 and a whole cell a few minutes; max-autotune benchmarks every kernel's configurations (resnet50
# inference, amp_bf16, was still compiling at ~300 s), so it gets more.
DEFAULT_TIME_LIMIT_S = 900.0
AUTOTUNE_TIME_LIMIT_S = 2400.0
# The data-parallel phase ("ddp"): a train step on each of these numbers of ranks (one process each, one GPU
# each on CUDA), a cell per world. GPU cells: 2 and 4 ranks (issue 56: one host of 4 GPUs runs the nightly).
# The CPU tier's gloo ranks share the CI box's 2 cores: 2 ranks, and 4 in CI only where they cost under
# ~20 s there (docs/ddp.md, "The world size").
DDP_WORLDS = (2, 4)
CPU_DDP_WORLDS = (2,)
# The world whose cells keep the ids they had when 2 was the only one (`gpt2-ddp-...`), so committed baselines
# and history still match; other worlds name theirs (`gpt2-ddp4-...`).
DDP_ID_WORLD = 2
PHASES = ("train", "infer", "ddp")


@dataclass(frozen=True)
class Precision:
    """What a precision means to a cell. Dtypes are names ("bfloat16"): this module imports no torch.

    `amp_dtype`: the dtype autocast runs the step in; None runs it in plain fp32 (under the fp32 policy).
    `uses_scaler`: training scales the loss with a GradScaler: fp16's 5-bit exponent underflows gradients.
    `datasheet_key`: the column of perfgate.measure.datasheet's table; "fp32" reads "tf32" where the fp32
        policy allows TF32.
    `rmse_multiplier`, `rms_floor`, `fallback_rtol`: the default numerics tolerance (perfgate.core.spec.Tolerance):
        PyTorch's accuracy CI lets compiled's RMSE against fp64 be about 2x eager's for fp32, 3x for fp16/bf16.
    """

    name: str
    amp_dtype: str | None
    uses_scaler: bool
    datasheet_key: str
    rmse_multiplier: float
    rms_floor: float
    fallback_rtol: float

    @property
    def amp(self) -> bool:
        return self.amp_dtype is not None


PRECISIONS: Mapping[str, Precision] = {
    p.name: p
    for p in (
        Precision(
            "fp32",
            None,
            uses_scaler=False,
            datasheet_key="fp32",
            rmse_multiplier=2.0,
            rms_floor=1e-4,
            fallback_rtol=1e-2,
        ),
        Precision(
            "amp_fp16",
            "float16",
            uses_scaler=True,
            datasheet_key="fp16",
            rmse_multiplier=3.0,
            rms_floor=1e-3,
            fallback_rtol=5e-2,
        ),
        Precision(
            "amp_bf16",
            "bfloat16",
            uses_scaler=False,
            datasheet_key="bf16",
            rmse_multiplier=3.0,
            rms_floor=1e-3,
            fallback_rtol=5e-2,
        ),
    )
}


@dataclass(frozen=True)
class Variant:
    """One way of compiling: a torch.compile backend plus its options.

    `shapes`: how a variable-length model's batches are padded (None: to the maximum, one static shape):
        "longest8": to the batch's longest, a multiple of 8 (SDPA recompiles on other alignments);
        "buckets": to the nearest of the model's fixed lengths (a bounded number of static graphs).
    `mark_dynamic`: mark the sequence dims of the inputs dynamic; `dynamic`: torch.compile's own flag.
    `regional`: compile each repeated block instead of the whole model (a faster compile of one small graph).
    `compiled_optimizer`: compile optimizer.step as well as the model (train only).
    `inductor_config`: inductor config patches, as torch.compile(options=...); torch.compile takes them
        only without a mode, so a variant has one or the other.
    `ddp`: a data-parallel variant (the "ddp" phase only): torch._dynamo.config.optimize_ddp's mode,
        "ddp_optimizer" (the graph split at DDP's bucket boundaries, so gradients' all-reduce overlaps the
        backward), "no_optimization" (one graph, no overlap) or "python_reducer" (compiled autograd traces
        the all-reduce; `compiled_autograd` turns it on).
    `compiled_autograd`: a train step's forward and backward run under compiled autograd, whose backward
        graph is compiled with the variant's own torch.compile arguments (perfgate.measure.steps.Side).
    """

    name: str
    backend: str
    mode: str | None = None
    fullgraph: bool = False
    dynamic: bool | None = None
    shapes: str | None = None
    mark_dynamic: bool = False
    regional: bool = False
    compiled_optimizer: bool = False
    inductor_config: tuple[tuple[str, object], ...] = ()
    ddp: str | None = None
    compiled_autograd: bool = False

    def __post_init__(self) -> None:
        if self.inductor_config and self.mode is not None:
            raise ValueError(
                f"variant {self.name!r}: inductor_config and mode={self.mode!r} exclude each "
                "other in torch.compile; give one"
            )

    @property
    def cuda_graphs(self) -> bool:
        """Whether the compiled step replays CUDA graphs (on a CUDA device): the cudagraphs backend, or
        inductor's reduce-overhead and max-autotune modes (max-autotune-no-cudagraphs does not)."""
        return self.backend == "cudagraphs" or self.mode in ("reduce-overhead", "max-autotune")

    @property
    def time_limit_s(self) -> float:
        autotunes = self.mode is not None and self.mode.startswith("max-autotune")
        return AUTOTUNE_TIME_LIMIT_S if autotunes else DEFAULT_TIME_LIMIT_S

    def compile_kwargs(self) -> dict:
        kwargs: dict = {"backend": self.backend, "fullgraph": self.fullgraph}
        if self.mode is not None:
            kwargs["mode"] = self.mode
        if self.dynamic is not None:
            kwargs["dynamic"] = self.dynamic
        if self.inductor_config:
            kwargs["options"] = dict(self.inductor_config)
        return kwargs


VARIANTS: Mapping[str, Variant] = {
    v.name: v
    for v in (
        Variant("inductor_default", "inductor", "default"),
        Variant("inductor_reduce_overhead", "inductor", "reduce-overhead"),
        Variant("inductor_max_autotune", "inductor", "max-autotune"),
        Variant("inductor_max_autotune_no_cudagraphs", "inductor", "max-autotune-no-cudagraphs"),
        Variant("inductor_fullgraph", "inductor", "default", fullgraph=True),
        Variant("cudagraphs", "cudagraphs"),
        Variant("aot_eager", "aot_eager"),
        Variant("inductor_compiled_optimizer", "inductor", "default", compiled_optimizer=True),
        Variant("inductor_regional", "inductor", "default", regional=True),
        # Dynamic-shape strategies, for models with variable-length inputs (the seed article's captioner).
        # Pad-to-max, the static strategy, is inductor_default itself.
        Variant("inductor_mark_dynamic", "inductor", "default", shapes="longest8", mark_dynamic=True),
        # The same with inductor's matmul padding off: torch 2.11's pad_mm pass guards on the symbolic
        # matmul sizes (is_mm_compute_bound) and so pins the marked dims (pytorch/pytorch#149462); later
        # torch reads their hints instead. Turning padding off is the users' workaround there.
        Variant(
            "inductor_mark_dynamic_no_pad",
            "inductor",
            shapes="longest8",
            mark_dynamic=True,
            inductor_config=(("shape_padding", False),),
        ),
        Variant("inductor_dynamic", "inductor", "default", dynamic=True, shapes="longest8"),
        Variant("inductor_buckets", "inductor", "default", dynamic=False, shapes="buckets"),
        # Data-parallel training (the "ddp" phase), eager DDP against compiled DDP.
        Variant("inductor_ddp_optimizer", "inductor", "default", ddp="ddp_optimizer"),
        Variant("inductor_ddp_no_split", "inductor", "default", ddp="no_optimization"),
        Variant("inductor_ddp_compiled_autograd", "inductor", "default", ddp="python_reducer", compiled_autograd=True),
        # The CPU tier's: the same split on gloo, compiled by aot_eager (seconds, where inductor takes minutes).
        Variant("aot_eager_ddp_optimizer", "aot_eager", ddp="ddp_optimizer"),
    )
}

# The PR gate's slice of the matrix: every model, both phases, one variant, one precision.
PR_VARIANT = "inductor_default"
PR_PRECISION = "amp_bf16"


@dataclass(frozen=True)
class Cell:
    """`world`: the ranks (processes) the cell runs on: 1 outside the "ddp" phase; None there means
    DDP_ID_WORLD, so a cell named without one is the cell it always was."""

    model: str
    phase: str
    variant: str
    precision: str
    device_kind: str = "gpu"
    tier: str = "nightly"
    world: int | None = None

    def __post_init__(self) -> None:
        world = self.world
        if world is None:  # one spelling per cell: Cell(..., "ddp") == Cell(..., "ddp", world=2)
            world = DDP_ID_WORLD if self.phase == "ddp" else 1
            object.__setattr__(self, "world", world)
        if (self.phase == "ddp") != (world > 1):
            raise ValueError(
                f"cell {self.model}/{self.phase}: world={self.world}; a ddp cell has 2 ranks or more, others 1"
            )

    @property
    def phase_token(self) -> str:
        """The phase as the id spells it: "ddp4" for a data-parallel cell on 4 ranks."""
        return self.phase if self.world in (1, DDP_ID_WORLD) else f"{self.phase}{self.world}"

    @property
    def id(self) -> str:
        base = f"{self.model}-{self.phase_token}-{self.variant}-{self.precision}"
        return base if self.device_kind == "gpu" else f"cpu-{base}"

    @property
    def param_id(self) -> str:
        """The pytest id: the phase is already in the test's name, a world other than DDP_ID_WORLD is not."""
        world = "" if self.phase_token == self.phase else f"{self.phase_token}-"
        base = f"{self.model}-{world}{self.variant}-{self.precision}"
        return base if self.device_kind == "gpu" else f"cpu-{base}"


def tier_of(variant: str, precision: str, world: int = 1) -> str:
    """The PR tier is one variant and precision on one device; every data-parallel world is nightly."""
    return "pr" if (variant, precision, world) == (PR_VARIANT, PR_PRECISION, 1) else "nightly"


# A session's closing line where --perf-data-parallel without left such cells out: perfgate deal reads it in its
# shards' logs to run them in a session of every GPU after the shards.
DATA_PARALLEL_LEFT_OUT = "data-parallel cell(s) left out"
# Set by perfgate deal in each session it deals cells to: the session never precompiles (deal did, once, before
# them), whatever --perf-precompile reaches it from a config file; a shard's own precompile would remove the
# launch-config picks other shards' cells had just timed.
DEALT_ENV = "PERFGATE_DEALT"
# Options the plugin (perfgate.plugin.options) and `perfgate deal` both read. The paired mode's: side A's, then
# side B's where it is not this checkout (perfgate.plugin.against).
PAIRED_OPTIONS = (
    "--perf-against",
    "--perf-against-python",
    "--perf-against-env",
    "--perf-b-rev",
    "--perf-b-python",
    "--perf-b-env",
)
MAX_PRECOMPILE = 256  # --perf-precompile: processes compiling at once


def ddp_worlds(phase: str, device_kind: str) -> tuple[int, ...]:
    """The worlds a phase's cells run on: DDP_WORLDS (GPUs) or CPU_DDP_WORLDS for "ddp", else one device."""
    if phase != "ddp":
        return (1,)
    return DDP_WORLDS if device_kind == "gpu" else CPU_DDP_WORLDS


class UnknownNameError(ValueError):
    """A name that is not in the matrix; the message lists the valid ones."""


def check_names(kind: str, names: Iterable[str], valid: Iterable[str]) -> list[str]:
    """Return `names` as a list, or raise naming each bad one and listing the valid ones."""
    names, valid = list(names), list(valid)
    bad = [n for n in names if n not in valid]
    if bad:
        raise UnknownNameError(f"unknown {kind} {', '.join(repr(b) for b in bad)}; valid {kind}s: {', '.join(valid)}")
    return names


def split_csv(text: str | None) -> list[str] | None:
    """'a, b' -> ['a', 'b']; None or '' -> None (meaning: no narrowing)."""
    if not text:
        return None
    return [part.strip() for part in text.split(",") if part.strip()]
