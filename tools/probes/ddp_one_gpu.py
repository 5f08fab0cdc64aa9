"""Probe (device kit, not product): a data-parallel cell's GPU path on a machine with one GPU. Both ranks run
on cuda:0 and meet over gloo instead of NCCL (NCCL refuses two ranks on one device); everything else is the
product's code (perfgate.measure.ddp and ddp_rank, unchanged). It shows whether the cell runs on CUDA and
this torch, and its structural figures (buckets, DDPOptimizer's splits, wrapper breaks, numerics, the ranks'
agreement); its times and scaling mean nothing, as the two ranks share one GPU and gloo copies through the host.
PROBE_WORLD=1 runs one rank instead, over NCCL, the product's path untouched: DDP's own cost on one device
(its wrapper, the bucketing, the split graphs, a one-rank all-reduce) against the plain step; there the
"scaling" is one-device step / DDP step (1.0: DDP costs nothing) and the times are the GPU's alone.
PROBE_INJECT=KIND[:ARG] plants a test-only fault, as --perf-inject does (device_slow:3: 3 % more GPU work).
usage: python tools/probes/ddp_one_gpu.py MODEL VARIANT PRECISION [CACHE_DIR]
prints the cell's record as one JSON line (PROBE_KIND=cpu: the CPU tier's cell, to try the probe itself).
"""

import json
import os
import sys
from pathlib import Path

if sys.argv[1] == "rank":  # a rank's process: both ranks on cuda:0, gloo, then the product's rank code
    import torch.distributed as dist

    from perfgate.measure import ddp

    ddp.rank_device = lambda device, rank: "cuda:0" if device.startswith("cuda") else "cpu"
    nccl_init = dist.init_process_group

    def gloo_init(backend, **kwargs):
        kwargs.pop("device_id", None)  # binds a rank to its GPU for NCCL only
        return nccl_init("gloo", **kwargs)

    dist.init_process_group = gloo_init
    from perfgate.measure import ddp_rank

    ddp_rank.main(Path(sys.argv[2]), int(sys.argv[3]))
    sys.exit(0)

import torch

sys.path.insert(0, os.getcwd())
from perfgate.core.matrix import Cell
from perfgate.core.zoo import DEFAULT, load
from perfgate.core.fault import parse as parse_fault
from perfgate.measure import ddp
from perfgate.core.job import RunOptions
from perfgate.measure.env import environment


model, variant, precision = sys.argv[1:4]
kind = os.environ.get("PROBE_KIND", "gpu")
cell = Cell(model, "ddp", variant, precision, kind)
device = "cuda:0" if kind == "gpu" else "cpu"
options = RunOptions(
    device=device,
    registry=DEFAULT,
    cache_dir=sys.argv[4] if len(sys.argv) > 4 else None,
    fault=parse_fault(os.environ.get("PROBE_INJECT")),
)
world = int(os.environ.get("PROBE_WORLD", "2"))
if world > 1:
    ddp.RANK_ARGS = (__file__, "rank")  # each rank through this file's "rank" mode
record = ddp.run(
    load(DEFAULT)[model],
    cell,
    options,
    environment(torch.device(device), tf32=True),
    progress=lambda message: print(message, file=sys.stderr, flush=True),
    world=world,
)
probe = "2 gloo ranks on one GPU" if world > 1 else "1 rank (NCCL on GPUs): DDP's own cost"
print(json.dumps(dict(record, probe=f"ddp_one_gpu: {probe}", probe_inject=os.environ.get("PROBE_INJECT"))))
