"""perfgate's change points (perfgate.judge.changepoint.segment: binary segmentation on log speedup) against
E-Divisive means as maintained in apache-otava (Hunter's windowed E-Divisive with a Student's t significance
test, otava.analysis.compute_change_points, its defaults: window 50, p 0.001), on the same seeded series:
docs/bisect.md's table. Not a test (pytest collects test_*.py only). otava needs scipy, which perfgate does
not; from the repository root, with both installed apart from the project's venv:

    pip install --no-deps --target /tmp/otava apache-otava==0.8.0 "scipy>=1.16,<1.17"
    PYTHONPATH=/tmp/otava python tests/changepoint_vs_edivisive.py [--trials 200]

One trial is one series of speedups: log-normal noise of sd `noise` around 1.5, and where a step is
planted, the speedup 5 % lower from the middle on. A series "finds" the step when a change point lands
within 2 points of it; any change point on pure noise is a false one. perfgate sees log speedups, otava
the speedups (its min_magnitude, where set, is a change relative to the mean: 2 % as perfgate's
MIN_SHIFT). The real history: every unplanted H100 PR-tier record in baselines/runs/ (files naming no
planted fault), one series per cell in time order.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from perfgate.judge.changepoint import segment  # noqa: E402

STEP = 0.05  # the planted loss: the speedup 5 % lower
NEAR = 2  # points: a change point this close to the step finds it
PLANTED = ("slow", "inject", "planted", "graph-break", "AB", "ab")


def perfgate_points(values: np.ndarray) -> list[int]:
    return [cp.index for cp in segment(values).change_points]


def otava_points(values: np.ndarray, min_magnitude: float = 0.0) -> list[int]:
    from otava.analysis import compute_change_points

    # the raw speedups, as otava's users feed it (its min_magnitude is a change relative to the mean); a
    # list, not an array: otava 0.8.0's split step raises ValueError on a numpy array (seen on every 30- and
    # 100-point series tried)
    points, _ = compute_change_points(
        [float(v) for v in values], window_len=50, max_pvalue=0.001, min_magnitude=min_magnitude
    )
    return [int(cp.index) for cp in points]


METHODS = {
    "perfgate (binary segmentation)": perfgate_points,
    "otava E-Divisive (window 50, p 0.001)": otava_points,
    "otava E-Divisive, min magnitude 2 %": lambda values: otava_points(values, 0.02),
}


def series(rng: np.random.Generator, n: int, noise: float, step: bool) -> np.ndarray:
    levels = np.where(np.arange(n) >= n // 2, 1 - STEP, 1.0) if step else np.ones(n)
    return 1.5 * levels * np.exp(rng.normal(0.0, noise, n))


def rates(trials: int) -> list[tuple]:
    rows = []
    for n in (8, 30, 100):
        for noise in (0.01, 0.03):
            for step in (False, True):
                for name, method in METHODS.items():
                    rng = np.random.default_rng(1000 * n + int(noise * 1000) + step)
                    hits = 0
                    for _ in range(trials):
                        points = method(series(rng, n, noise, step))
                        hits += any(abs(p - n // 2) <= NEAR for p in points) if step else bool(points)
                    rows.append((n, noise, "5 % step" if step else "none", name, hits / trials))
    return rows


def run_time(cells: int = 400, nights: int = 100) -> dict[str, float]:
    rng = np.random.default_rng(7)
    data = [series(rng, nights, 0.02, bool(i % 2)) for i in range(cells)]
    seconds = {}
    for name, method in METHODS.items():
        start = time.perf_counter()
        for values in data:
            method(values)
        seconds[name] = time.perf_counter() - start
    return seconds


def real_history(root: Path, metric: str) -> list[tuple[str, int, dict[str, list[int]]]]:
    """Per cell of the unplanted H100 runs: (cell, points, {method: change point indices})."""
    by_cell: dict[str, list[tuple[str, float]]] = {}
    for path in sorted(root.glob("h100-*.jsonl")):
        if any(word in path.name for word in PLANTED):
            continue
        for line in path.read_text().splitlines():
            record = json.loads(line)
            if record.get("status") == "ok" and record.get(metric) and not record.get("inject"):
                by_cell.setdefault(record["cell"], []).append((record.get("started_at") or "", record[metric]))
    out = []
    for cell, points in sorted(by_cell.items()):
        if len(points) >= 8:
            values = np.asarray([v for _, v in sorted(points)])
            out.append((cell, len(values), {name: method(values) for name, method in METHODS.items()}))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200)
    args = parser.parse_args()
    print("| points | noise (sd) | planted | method | series with a change point (none) / step found (5 %) |")
    print("|---|---|---|---|---|")
    for n, noise, planted, name, rate in rates(args.trials):
        print(f"| {n} | {noise:.0%} | {planted} | {name} | {rate:.1%} |")
    print()
    for name, seconds in run_time().items():
        print(f"run time, 400 cells x 100 nights, {name}: {seconds:.2f} s")
    root = Path(__file__).resolve().parents[1] / "baselines" / "runs"
    for metric in ("speedup", "device_speedup"):
        print(f"\nreal H100 history, {metric}:")
        for cell, n, found in real_history(root, metric):
            print(f"  {cell} ({n} points): " + "; ".join(f"{name} {points}" for name, points in found.items()))


if __name__ == "__main__":
    main()
