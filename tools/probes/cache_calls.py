"""Which Python functions a compiled step runs when its graph was compiled in this process, and not when it was
loaded from the inductor cache (or the other way round): the process-to-process spread of the compiled Python
call count (perfgate.measure.counts).

usage: python tools/probes/cache_calls.py [train|infer]

Runs two fresh processes on one new cache directory: the first compiles (cache misses), the second loads
(cache hits). Each counts a warm compiled step's Python calls by function (sys.setprofile, this thread, 3
steps of a small MLP on the CPU), and the parent prints the functions whose counts differ.

2026-11-28, CPU box, torch 2.14.1, Python 3.11: infer read 73 calls a step both ways; train read 209 compiled
here and 210 loaded, the one more being runtime_wrappers.py's SerializableCompiledFunction.__call__, the
wrapper around a graph loaded from AOTAutograd's cache. On GPUs (torch 2.11, 4 x H200 349f3a2e, the same day)
the loaded side read one call a step fewer than the compiling one on inference cells, and segformer_b2
15-17 fewer (docs/measuring.md).
"""

import collections
import json
import os
import subprocess
import sys
import tempfile

STEPS = 3


def child(phase: str) -> None:
    import torch

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    compiled = torch.compile(model)
    x = torch.randn(16, 64)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)

    def step() -> None:
        if phase == "infer":
            with torch.no_grad():
                compiled(x)
        else:
            compiled(x).sum().backward()
            opt.step()
            opt.zero_grad()

    for _ in range(3):
        step()
    calls: collections.Counter = collections.Counter()

    def profiled(frame, event, _arg) -> None:
        if event == "call":
            code = frame.f_code
            calls[f"{code.co_filename.split('site-packages/')[-1]}:{code.co_firstlineno}:{code.co_qualname}"] += 1

    sys.setprofile(profiled)
    for _ in range(STEPS):
        step()
    sys.setprofile(None)
    from torch._dynamo.utils import counters

    print(json.dumps({"calls": calls, "inductor": dict(counters["inductor"]), "aot": dict(counters["aot_autograd"])}))


def main(phase: str) -> None:
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=tempfile.mkdtemp(prefix="cache_calls."))
    runs = []
    for label in ("compiled here", "loaded from cache"):
        out = subprocess.run([sys.executable, __file__, "--child", phase], env=env, capture_output=True, text=True)
        if out.returncode:
            sys.exit(out.stderr[-3000:])
        found = json.loads(out.stdout.strip().splitlines()[-1])
        print(
            f"{label}: {sum(found['calls'].values()) / STEPS:.2f} calls a step; inductor {found['inductor']}; "
            f"aot {found['aot']}"
        )
        runs.append(collections.Counter(found["calls"]))
    for name in sorted(set(runs[0]) | set(runs[1])):
        if runs[0][name] != runs[1][name]:
            print(f"  {name}: {runs[0][name] / STEPS:g} -> {runs[1][name] / STEPS:g} a step")


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(sys.argv[2])
    else:
        main(sys.argv[1] if len(sys.argv) > 1 else "infer")
