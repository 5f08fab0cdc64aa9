"""Where a profiled pytest run's seconds went, by function: `python tools/probes/prof_summary.py RUN.prof`.

For a run of the PR tier under cProfile (`python -m cProfile -o RUN.prof -m pytest ...`): the cell stages'
functions (perfgate.measure.pipeline, cell) and what each spent its time in, so a stage's cost can be split
into the torch work a cut would have to touch (dynamo's trace, a cache load, the numerics' copies). cProfile
slows Python-heavy code (dynamo's trace) more than the rest: read the shares, not the seconds.
"""

from __future__ import annotations

import io
import pstats
import sys

STAGE_FUNCTIONS = (
    "prepare",
    "load_reference",
    "build_eager",
    "capture_eager",
    "warm_eager",
    "first_compiled_call",
    "judge_numerics",
    "warm_compiled",
    "timed_rounds",
    "_clocks",
    "store_throughput",
    "clean_up",
    "compare_steps",
    "captured_steps",
    "captured_step",
)


def main(path: str) -> None:
    stats = pstats.Stats(path)
    out = io.StringIO()
    stats.stream = out
    stats.sort_stats("cumulative").print_stats(90)
    stats.sort_stats("tottime").print_stats(50)
    for name in STAGE_FUNCTIONS:
        stats.sort_stats("cumulative").print_callees(rf"\b{name}\b", 25)
    sys.stdout.write(out.getvalue())


if __name__ == "__main__":
    main(sys.argv[1])
