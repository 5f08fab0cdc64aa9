"""The one cheap CPU cell that the A/B and bisect tests measure in their inner pytest runs."""

# vit_b16 inference on the CPU tier, warm-compile timing off (it would compile a second time), and 15 timed
# rounds (under a second; the CPU plan's 5-9 leave the in-run intervals, each side's noise floor, wide).
CHEAP_CELL_ARGS = [
    "perftests",
    "-m",
    "cpu",
    "-k",
    "vit_b16 and infer",
    "-p",
    "no:randomly",
    "--perf-warm-compile=off",
    "--perf-min-rounds=15",
    "--perf-max-rounds=15",
]
