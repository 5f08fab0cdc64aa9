"""The GPUs' datasheet throughput per precision, dense TFLOP/s: what MFU divides by. Imports no torch.

Dense (no 2:4 sparsity) tensor-core rates from the vendors' datasheets, SXM parts. The H200 has the H100's
compute; only its memory differs. fp32 means the plain (non-tensor-core) rate; TF32 applies when the fp32
policy allows it.
"""

from __future__ import annotations

from perfgate.core.matrix import PRECISIONS

# Matched as substrings of the lower-cased device name, first match wins: specific parts before families.
DATASHEET_TFLOPS = {
    "h100 pcie": {"bf16": 756.0, "fp16": 756.0, "tf32": 378.0, "fp32": 51.0},
    "h100": {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0},
    "h200": {"bf16": 989.0, "fp16": 989.0, "tf32": 495.0, "fp32": 67.0},
    "a100": {"bf16": 312.0, "fp16": 312.0, "tf32": 156.0, "fp32": 19.5},
    "l4": {"bf16": 121.0, "fp16": 121.0, "tf32": 60.0, "fp32": 30.3},
}


def datasheet_tflops(gpu_name: str | None, precision: str, tf32: bool | None) -> float | None:
    """The rate for a GPU name as CUDA reports it ("NVIDIA H100 80GB HBM3"), or None when unknown."""
    if not gpu_name:
        return None
    name = gpu_name.lower()
    table = next((rates for key, rates in DATASHEET_TFLOPS.items() if key in name), None)
    if table is None:
        return None
    key = PRECISIONS[precision].datasheet_key
    return table["tf32" if key == "fp32" and tf32 else key]
