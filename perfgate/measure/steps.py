"""One side of a cell (eager or compiled): its seeded weights and batches, the model, its optimizer and scaler,
and one step of a phase. The cell builds both sides here, and so do the reference (its fp64 copy), a precompile
process and the artifacts process (their compiled side).
"""

from __future__ import annotations

import contextlib
import copy
import functools
import math

import torch
from torch import nn

from perfgate.core.matrix import PRECISIONS, VARIANTS
from perfgate.measure import faults
from perfgate.measure.introspect import graph_count

# GradScaler's default first scale (65536) overflows fp16 gradients in the first steps, so those steps are
# skipped; the numerics check compares exactly those first two steps, so start lower.
GRAD_SCALER_INIT_SCALE = 1024.0
# The smallest float32 a halved scale reaches before it underflows to 0: 1024 halves to it in 159 skips.
SMALLEST_SCALE = 2.0**-149
# Clean steps before GradScaler doubles its scale: never, here. A growth would cancel a skip in the count of
# halvings (Side.scaler_skips), and a nightly cell's side may take over the default 2000 steps; the scale a step
# runs at changes no work it does, and the numerics' two steps come long before any growth.
GRAD_SCALER_GROWTH_INTERVAL = 2**31 - 1


def set_tf32(enabled: bool) -> None:
    """The fp32 policy: TF32 tensor cores for matmul and cuDNN convolutions, or full-precision fp32."""
    torch.set_float32_matmul_precision("high" if enabled else "highest")
    torch.backends.cudnn.allow_tf32 = enabled


def autocast(precision: str, device: torch.device):
    amp_dtype = PRECISIONS[precision].amp_dtype
    if amp_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=getattr(torch, amp_dtype))


class Task(nn.Module):
    """Wraps the model with the record's predict or loss function, so the compiled graph holds the loss too
    (GPT-2's shifted cross-entropy, a per-pixel loss), as a user compiling a training step would have it."""

    def __init__(self, model: nn.Module, fn):
        super().__init__()
        self.model = model
        self.fn = fn

    def forward(self, batch: dict):
        return self.fn(self.model, batch)


class Side:
    """A model and what steps it. `task` is the callable the steps call: the Task itself for eager, or the
    torch.compile wrapper of it for the compiled side."""

    def __init__(self, spec, model: nn.Module, phase: str, precision: str, device: torch.device):
        self.spec, self.model, self.phase, self.precision, self.device = spec, model, phase, precision, device
        self.task = self.eager_task()
        self.cudagraph_steps = False
        self.backward_compiler = None  # compiled autograd's compiler, where the variant asks for it
        self.optimizer_graphs = 0  # the graphs a compiled optimizer.step compiled (Side._graphs_counted)
        if phase == "train":
            model.train()
            self.optimizer = torch.optim.AdamW(model.parameters(), lr=spec.lr)
            self.scaler = (
                torch.amp.GradScaler(
                    device.type, init_scale=GRAD_SCALER_INIT_SCALE, growth_interval=GRAD_SCALER_GROWTH_INTERVAL
                )
                if PRECISIONS[precision].uses_scaler
                else None
            )
        else:
            model.eval()
            self.optimizer = self.scaler = None

    def eager_task(self) -> Task:
        """A new uncompiled task: the record's loss for training, its predict for inference."""
        return Task(self.model, self.spec.loss if self.phase == "train" else self.spec.predict)

    def compile(self, variant, fault: faults.Fault | None = None) -> None:
        """Compile a fresh task, with the test-only fault (if any) planted, as the variant says: the whole
        task, or (regional) each repeated block in place, and (compiled_optimizer) optimizer.step too."""
        self.task = faults.wrap_task(self.eager_task(), self.spec, fault)
        compile_kwargs = variant.compile_kwargs()
        if variant.regional:
            for block in self.spec.blocks(self.model):
                block.compile(**compile_kwargs)
        else:
            self.task = torch.compile(self.task, **compile_kwargs)
        if variant.compiled_optimizer and self.optimizer is not None:
            # GradScaler.step calls optimizer.step, so the compiled one serves AMP fp16 too.
            # Compile the class's own step, so compiling again (the warm-compile pass) never wraps twice.
            own_step = type(self.optimizer).step.__get__(self.optimizer)
            self.optimizer.step = self._graphs_counted(torch.compile(own_step, backend=variant.backend))
        if variant.compiled_autograd:
            self.backward_compiler = functools.partial(torch.compile, **compile_kwargs)
        # CUDA-graph trees must be told where a step starts, or a later step may overwrite outputs an
        # earlier one still holds (the optimizer reads gradients after backward).
        self.cudagraph_steps = self.device.type == "cuda" and variant.cuda_graphs

    def _graphs_counted(self, compiled_step):
        """The compiled optimizer.step, adding the dynamo graphs its calls compile to `optimizer_graphs`: a
        compiled optimizer alone must not pass a cell whose model ran eager (the "ran eager" check counts the
        model's graphs). Two counter reads a step, about a microsecond."""

        @functools.wraps(compiled_step)
        def counted(*args, **kwargs):
            before = graph_count()
            try:
                return compiled_step(*args, **kwargs)
            finally:
                self.optimizer_graphs += graph_count() - before

        return counted

    def scaler_skips(self) -> int | None:
        """The optimizer steps GradScaler skipped (inf or NaN gradients) since this side began; None without a
        scaler. Each skip halves the scale and nothing doubles it (GRAD_SCALER_GROWTH_INTERVAL), so the halvings
        from GRAD_SCALER_INIT_SCALE count them with no read a step, up to 159, where the scale underflows. One
        host read: call it once, after the clocks."""
        if self.scaler is None:
            return None
        scale = max(self.scaler.get_scale(), SMALLEST_SCALE)
        return max(0, round(math.log2(GRAD_SCALER_INIT_SCALE / scale)))

    def step(self, batch: dict):
        if self.cudagraph_steps:
            torch.compiler.cudagraph_mark_step_begin()
        if self.phase == "infer":
            with torch.no_grad(), autocast(self.precision, self.device):
                return self.task(batch)
        with self.autograd():
            with autocast(self.precision, self.device):
                loss = self.task(batch)
            self._backward_and_update(loss)
        return loss

    def autograd(self):
        """Compiled autograd around a train step, where the variant asks for it: the backward (with DDP's
        gradient hooks and their all-reduce) traced at run time and compiled like the forward. The dynamo
        config flag alone turns it on only inside a compiled call, and the step's backward runs after it
        returns: without this the backward ran eagerly, DDP's Python reducer one all-reduce per parameter."""
        if self.backward_compiler is None:
            return contextlib.nullcontext()
        from torch._dynamo import compiled_autograd

        # dynamic=False: the shapes are fixed, as torch.compile's own default (assume_static_by_default) has it.
        return compiled_autograd._enable(self.backward_compiler, dynamic=False)

    def _backward_and_update(self, loss: torch.Tensor) -> None:
        if self.scaler is not None:
            self.scaler.scale(loss).backward()
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            loss.backward()
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def captured_step(self, batch: dict, tensors: bool = True) -> dict:
        """One step that also returns what numerics compares, as CPU tensors: inference outputs, or the
        training loss and, when `tensors`, the unscaled gradients before the update and parameters after."""
        if self.phase == "infer":
            return {"output": _host(self.step(batch))}
        if self.cudagraph_steps:
            torch.compiler.cudagraph_mark_step_begin()
        with self.autograd():
            with autocast(self.precision, self.device):
                loss = self.task(batch)
            captured = {"loss": _host(loss)}
            if self.scaler is not None:
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.optimizer)
            else:
                loss.backward()
        for name, param in self.model.named_parameters() if tensors else ():
            if param.grad is not None:
                captured[f"grad.{name}"] = _host(param.grad)
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        for name, param in self.model.named_parameters() if tensors else ():
            captured[f"param.{name}"] = _host(param)
        return captured


def captured_steps(side: Side, batches: list, tensors: bool = True) -> list[dict]:
    """What numerics compares. Training: the loss of two optimizer steps, gradients and parameters of the
    second (`tensors`: False takes the same steps and keeps only the losses, for a process that does not
    judge: no host copy of every gradient and parameter). Inference: the outputs of one batch (no state
    changes between batches)."""
    if side.phase == "infer":
        return [side.captured_step(batches[0])]
    return [side.captured_step(batches[0], tensors=False), side.captured_step(batches[1], tensors=tensors)]


def _host(tensor: torch.Tensor) -> torch.Tensor:
    # .clone() first: a CUDA-graph output lives in the graph's pool and is overwritten by the next replay.
    # The dtype stays (bf16 logits are a quarter of fp64's host memory); numerics upcasts per tensor.
    return tensor.detach().clone().cpu()


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


class InitialState(dict):
    """The weights both sides start from, {name: tensor}, and `template`: the host model they are the state of,
    which is never stepped (the tensors are its own, so neither may be changed in place)."""

    template: nn.Module | None = None


def initial_state(spec, size, seed: int, device: torch.device | None = None) -> InitialState:
    """The weights both sides start from: the model's random init under `seed`, run on `device` where it is a
    GPU and kept on the host. The host's init is one thread drawing every weight: on an H100 lease's host
    (2026-11-27, the PR tier under cProfile) normal_ and uniform_ took 12.8 s of the tier's 11 builds, the
    build stage's half; on the GPU they take milliseconds, and the copy back ~0.1 s for GPT-2's 124M
    parameters. The draws differ from the host's (another generator), so the weights do too: the reference
    cache's format says which init its references came from (perfgate.measure.reference.REFERENCE_FORMAT)."""
    torch.manual_seed(seed)
    on_gpu = device is not None and device.type == "cuda"
    with torch.device(device) if on_gpu else contextlib.nullcontext():
        template = spec.build(size.config)
    if on_gpu:
        template.to("cpu")  # in place: the template and its state live on the host, as a host init's do
    state = InitialState((k, v.detach()) for k, v in template.state_dict().items())
    state.template = template
    return state


def build_model(spec, size, state: dict, device: torch.device, dtype: torch.dtype | None = None):
    """A model holding `state`, on `device`: a copy of the state's template where it has one. Building from the
    config again ran a random init that load_state_dict then overwrote: a cell builds a model three times
    (its state, eager, compiled; four with the reference), and a copy of GPT-2's 124M parameters took 0.6 s
    where a build and load took 3.3 s (on a 2-core CI box)."""
    template = getattr(state, "template", None)
    if template is not None:
        model = copy.deepcopy(template)
    else:
        model = spec.build(size.config)
        model.load_state_dict(state)
    return model.to(device=device, dtype=dtype)


def compiled_side(spec, cell, size, state: dict, device: torch.device, fault: faults.Fault | None) -> Side:
    side = Side(spec, build_model(spec, size, state, device), cell.phase, cell.precision, device)
    side.compile(VARIANTS[cell.variant], fault)
    return side


def cell_batches(spec, cell, size, seed: int, device: torch.device) -> tuple[list, list, int]:
    """The cell's batches, seeded: on the host, on the device (sequence dims marked dynamic where the
    variant says), and the recompiles their shapes may cost."""
    generator = torch.Generator().manual_seed(seed)
    variant = VARIANTS[cell.variant]
    raw = [spec.make_batch(size.config, size.batch, generator) for _ in range(max(2, spec.stream))]
    host_batches, allowed = shaped(spec, size, variant, raw)
    batches = [to_device(b, device) for b in host_batches]
    if variant.mark_dynamic:
        for batch in batches:
            for key, dim in spec.dynamic_dims:
                torch._dynamo.mark_dynamic(batch[key], dim)
    return host_batches, batches, allowed


def shaped(spec, size, variant, batches: list) -> tuple[list, int]:
    """Pad a variable-length model's batches as the variant's strategy says; returns them and how many
    recompiles after the first call the strategy may cost (buckets: one per further length)."""
    if spec.pad is None:
        return batches, 0
    lengths = [spec.seq_len(b) for b in batches]
    if variant.shapes is None:
        targets = [size.max_seq] * len(batches)
    elif variant.shapes == "longest8":
        targets = [8 * math.ceil(n / 8) for n in lengths]
    else:
        targets = [min(b for b in size.buckets if b >= n) for n in lengths]
    allowed = len(set(targets)) - 1 if variant.shapes == "buckets" else 0
    return [spec.pad(b, n) for b, n in zip(batches, targets)], allowed


def to_device(batch: dict, device: torch.device, float_dtype: torch.dtype | None = None) -> dict:
    """Move a batch; floating tensors become `float_dtype` when given (the fp64 reference)."""
    moved = {}
    for key, value in batch.items():
        if float_dtype is not None and value.is_floating_point():
            value = value.to(float_dtype)
        moved[key] = value.to(device, non_blocking=True)
    return moved
