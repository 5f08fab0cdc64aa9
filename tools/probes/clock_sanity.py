"""A GPU's first check of the device clock (20 s): two matmul steps against one through clocks.device_rounds,
which must read about 2x; exits 3 where it fails, so a device call stops before its long runs."""

import sys
import time

import torch

from perfgate.measure import clocks

device = torch.device("cuda:0")
a = torch.randn(4096, 4096, device=device)
one = lambda _i: a @ a  # noqa: E731
two = lambda _i: (a @ a, a @ a)  # noqa: E731
for _ in range(20):
    one(0)
t = time.perf_counter()
try:
    rounds = clocks.device_rounds(two, one, device)
except Exception as err:  # noqa: BLE001 - the finding is the error
    print(f"device clock failed: {type(err).__name__}: {err}")
    sys.exit(3)
print(
    f"device clock: two {rounds.eager_ms} one {rounds.compiled_ms} ms, speedup {rounds.speedup().median:.3f}, "
    f"{time.perf_counter() - t:.2f} s"
)
sys.exit(0 if 1.8 < rounds.speedup().median < 2.2 else 3)
