"""How often the A/B verdict (perfgate.ab.process_verdict) fails a run when nothing changed, and how often it catches
a planted loss, on synthetic processes: the rates in docs/ab.md. Not a test (pytest collects test_*.py only);
tests/test_ab_verdict.py runs small seeded versions of it. From the repository root:

    python tests/ab_power.py [--trials 200]

It also prints how Student's t holds its level when one side is noisier than the other (unequal_variances).

One trial is one A/B run of the PR slice (10 cells, synthetic.cells()) with n processes a side; each
process is synthetic.run: per-round noise of 2 % on eager and compiled ms over 15 rounds (the speedup's
in-run sd ~0.9 %) plus a compile-to-compile factor on the compiled side, sized so that the sd of the wall
speedup between processes is `noise` in total; the device clock moves 0.3 % a round and 0.2 % a compile,
the host clock 3 % and 1 % (synthetic.clocks). B's loss, when planted, lowers the true wall speedup of
every cell (compiled ms up, eager ms as is), or the device speedup alone (`clock="device_speedup"`).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np  # noqa: E402

from perfgate.ab.process_rows import Process  # noqa: E402
from perfgate.ab.process_rules import ALPHA  # noqa: E402
from perfgate.ab.process_verdict import judge_ab  # noqa: E402
from perfgate.core.stats import t_quantile  # noqa: E402

import synthetic as syn  # noqa: E402

IN_RUN_SD = 0.0089  # the in-run sd of a synthetic record's wall speedup (15 rounds of 2 % noise a side)
CELLS = syn.cells()
# The device clock keeps synthetic's own noise (0.3 % a round, 0.2 % a compile): ~0.25 % between processes.
DEVICE_NOISE = "~0.25 % (its own)"


def compile_noise(total: float) -> float:
    """The compile-to-compile factor that gives a speedup sd of `total` between processes."""
    return math.sqrt(max(total**2 - IN_RUN_SD**2, 0.0))


@dataclass(frozen=True)
class Rates:
    runs: int
    runs_failed: int  # runs with any regression (what fails a PR)
    cells: int
    cells_caught: int  # cells with a regression on any rule
    clock_caught: int  # cells with a regression on the planted clock's rule

    def text(self) -> str:
        return (
            f"{100 * self.runs_failed / self.runs:.1f} % of runs / {100 * self.cells_caught / self.cells:.1f} "
            f"% of cells ({100 * self.clock_caught / self.cells:.1f} % on the clock)"
        )


def processes(side: str, first_seed: int, n: int, noise: float, overrides: dict | None = None) -> list[Process]:
    return [
        Process(
            side,
            rep,
            tuple(syn.run(first_seed + rep, cell_list=CELLS, run_noise=compile_noise(noise), overrides=overrides)),
            cold=rep == 1,
        )
        for rep in range(1, n + 1)
    ]


def planted(loss: float, clock: str) -> dict:
    """B's record() keywords for every cell: its true `clock` ratio lowered by `loss`."""
    if not loss:
        return {}
    if clock == "speedup":
        return {c.id: {"speedup": syn.PROFILE[c.model][1] * (1 - loss)} for c in CELLS}
    return {
        c.id: {"device_speedup": syn.PROFILE[c.model][1] * syn.EAGER_BUSY / syn.BUSY[c.model] * (1 - loss)}
        for c in CELLS
    }


def simulate(trials: int, n: int, noise: float, loss: float = 0.0, clock: str = "speedup", seed: int = 0) -> Rates:
    runs_failed = cells_caught = clock_caught = 0
    for trial in range(trials):
        base = 10_000 * (seed + trial)
        report = judge_ab(processes("A", base, n, noise) + processes("B", base + 1000, n, noise, planted(loss, clock)))
        runs_failed += bool(report.regressions)
        cells_caught += len({f.cell for f in report.regressions})
        clock_caught += len({f.cell for f in report.regressions if f.metric == clock})
    return Rates(trials, runs_failed, trials * len(CELLS), cells_caught, clock_caught)


def table(trials: int) -> str:
    rows = [
        "| processes a side | clock | noise (sd between processes) | true loss in B | runs failed | cells "
        "caught (any rule) | cells caught on that clock |",
        "|---|---|---|---|---|---|---|",
    ]
    for clock, noises, losses in (
        ("speedup", (0.01, 0.03), (0.0, 0.05, 0.10)),
        ("device_speedup", (0.01,), (0.0, 0.03)),
    ):
        for n in (3, 5):
            for noise in noises:
                for loss in losses:
                    r = simulate(trials, n, noise, loss, clock)
                    label, noise_text = ("wall", f"{noise:.0%}") if clock == "speedup" else ("device", DEVICE_NOISE)
                    rows.append(
                        f"| {n} | {label} | {noise_text} | {loss:.0%} | {r.runs_failed}/{r.runs} | "
                        f"{100 * r.cells_caught / r.cells:.1f} % | {100 * r.clock_caught / r.cells:.1f} % |"
                    )
    return "\n".join(rows)


def unequal_variances(n: int = 3, trials: int = 400_000, alpha: float = ALPHA) -> str:
    """How often Student's t with df = 2n - 2 trips at one-sided `alpha` on normal data with nothing changed
    when B's variance is 1, 2, 4, 9 times A's: the level it keeps with equal n (perfgate.core.stats.two_sample)."""
    rng = np.random.default_rng(0)
    line = t_quantile(1 - alpha, 2 * n - 2)
    rows = [f"| variance B / A | rate at nominal {alpha:g} |", "|---|---|"]
    for ratio in (1, 2, 4, 9):
        a, b = rng.normal(0, 1, (trials, n)), rng.normal(0, math.sqrt(ratio), (trials, n))
        t = (a.mean(1) - b.mean(1)) / np.sqrt(a.var(1, ddof=1) / n + b.var(1, ddof=1) / n)
        rows.append(f"| {ratio} | {float((t > line).mean()):.5f} |")
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=200, help="A/B runs per row (10 cells each)")
    print(table(parser.parse_args().trials))
    print()
    print(unequal_variances())


if __name__ == "__main__":
    main()
