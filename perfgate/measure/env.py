"""The environment a result was measured in, and its fingerprint (which baseline file it belongs to)."""

from __future__ import annotations

import os
import platform
import re
import socket

import torch

from perfgate.core.children import MEASURING_ENV
from perfgate.core.host import gpu_query, package_version


def _driver() -> str | None:
    return next(iter(gpu_query("driver_version")), None)


def cpu_model() -> str | None:
    """The host CPU: its model name with family/model/stepping (Linux /proc/cpuinfo; elsewhere
    platform.processor()). A host-bound compiled step runs as fast as this CPU issues it. Virtual machines
    often show a generic name (the H100 leases: "Intel(R) Xeon(R) Processor"), so the numbers say which
    generation it is."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as fh:
            for line in fh:
                if not line.strip():
                    break  # the first processor's block is enough
                key, _, value = line.partition(":")
                fields[key.strip()] = value.strip()
    except OSError:
        pass
    name = fields.get("model name")
    if name is None:
        return platform.processor() or None
    ids = [f"{key} {fields[key]}" for key in ("cpu family", "model", "stepping") if key in fields]
    return f"{name} ({', '.join(ids)})" if ids else name


def cpu_cores() -> int | None:
    """Cores this process may run on (its affinity, which a container or taskset narrows), else all."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count()


def slug(text: str) -> str:
    return re.sub(r"[^a-z0-9.]+", "-", text.lower()).strip("-")


def fingerprint(gpu: str | None, torch_version: str, cuda: str | None) -> str:
    """GPU model, torch minor, CUDA major: results of different fingerprints are never compared."""
    torch_minor = ".".join(torch_version.split("+")[0].split(".")[:2])
    if gpu is None:
        return f"cpu-{slug(platform.machine())}_torch{torch_minor}"
    cuda_major = (cuda or "none").split(".")[0]
    return f"{slug(gpu)}_torch{torch_minor}_cuda{cuda_major}"


def detach_cupti() -> str:
    """Have Kineto detach CUPTI as each profiler session ends, unless this process's environment already says
    otherwise (a user's TEARDOWN_CUPTI, or torch's own 0, which it assigns for CUDA graphs on a CUDA before 12.6);
    returns the setting. Kineto leaves CUPTI attached by default (pytorch/pytorch#144455), and its callbacks then
    tax every later kernel launch, so a host-bound step timed after a session read slower for the rest of its
    process (the figures: docs/measuring.md, step 5). Kineto reads the variable at each teardown, so setting it
    before a session is enough. Called before every profiler session (perfgate.measure.clocks.profiler) and by
    environment(), which records the setting as the session began; the sides of a paired run get it from their
    environment too (perfgate.core.children.MEASURING_ENV)."""
    return os.environ.setdefault("TEARDOWN_CUPTI", MEASURING_ENV["TEARDOWN_CUPTI"])


def environment(device: torch.device, tf32: bool) -> dict:
    """Everything a reader needs to trust or reproduce a number. Called once per session."""
    on_cuda = device.type == "cuda"
    gpu = torch.cuda.get_device_name(device) if on_cuda else None
    env = {
        "gpu": gpu,
        "gpu_count": torch.cuda.device_count() if on_cuda else 0,
        # Inductor sizes split reductions by the SM count, and cuBLAS picks kernels by it: one thing to compare
        # when a kernel count follows the machine (the captioner's train step does, across leases of one GPU
        # name: docs/measuring.md); it does not explain that case if both read 132.
        "gpu_sms": torch.cuda.get_device_properties(device).multi_processor_count if on_cuda else None,
        "driver": _driver() if on_cuda else None,
        "cuda": torch.version.cuda if on_cuda else None,
        "cudnn": torch.backends.cudnn.version() if on_cuda else None,
        "torch": torch.__version__,
        "triton": package_version("triton") or package_version("pytorch-triton"),
        "transformers": package_version("transformers"),
        "timm": package_version("timm"),
        "pytest_benchmark": package_version("pytest-benchmark"),
        "python": platform.python_version(),
        "cpu": platform.processor() or platform.machine(),
        "cpu_model": cpu_model(),
        "cpu_cores": cpu_cores(),
        "host": socket.gethostname(),
        "tf32": tf32 if on_cuda else None,
        # "1": CUPTI detached after each profiler session, so the clocks after one run without it (as the session
        # began: torch may set "0" later, for a CUDA-graph cell on a CUDA before 12.6)
        "cupti_teardown": detach_cupti() if on_cuda else None,
    }
    env["fingerprint"] = fingerprint(gpu, torch.__version__, env["cuda"])
    return env
