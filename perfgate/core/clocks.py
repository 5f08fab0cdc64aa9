"""The clocks a cell is timed by, each defined once: its record fields, its gate rule's default line, its name and
label in reports. The record (perfgate.core.record.FIELDS), the rules (perfgate.judge.rules.default_rules), the
gate and A/B reports (perfgate.render.report, perfgate.ab.process_report) all read their clocks from here, so a new
clock is one definition here plus its measurement. The counts of a step's work (COUNTS: Python calls, ATen ops,
kernels, ...) are defined here the same way: their record fields and band rules follow from each Count.
Imports no torch.

How each clock is measured lives in perfgate.measure (timing.py: wall; clocks.py: device and host;
ddp_clocks.py: compute); why each line is where it is, in perfgate.judge.rules.default_rules and
docs/gate-power.md.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Clock:
    """One clock. Its record fields: `{eager,compiled}_{ms}round_ms` (one value per round, ms per step),
    `{eager,compiled}_{ms}ms` (their median) and the eager/compiled ratio `ratio` with `ratio_lo`, `ratio_hi`
    (its 95 % interval)."""

    name: str  # what reports and findings call it: "the device clock"
    ratio: str  # the record's eager / compiled ratio field
    ms: str  # the infix of its ms fields: "" (eager_ms), "device_" (eager_device_ms)
    label: str  # its ratio's column heading
    threshold: float  # the gate's default line on a drop of the ratio, a fraction (0.05 = 5 %)
    phases: tuple[str, ...] | None = None  # the phases whose cells have it (None: every phase)
    column: str = ""  # where a report shows it: another clock's column (it stands in there)

    @property
    def eager_ms(self) -> str:
        return f"eager_{self.ms}ms"

    @property
    def compiled_ms(self) -> str:
        return f"compiled_{self.ms}ms"

    @property
    def eager_rounds(self) -> str:
        return f"eager_{self.ms}round_ms"

    @property
    def compiled_rounds(self) -> str:
        return f"compiled_{self.ms}round_ms"


# CUDA events around back-to-back steps: what a user gets, host stalls included (perfgate.measure.timing).
WALL = Clock("wall", "speedup", "", "wall speedup", threshold=0.05)
# GPU-busy ms per step (CUPTI through torch.profiler): apart from the host (perfgate.measure.clocks).
DEVICE = Clock("device", "device_speedup", "device_", "device speedup", threshold=0.025)
# Host ms to issue a step from an idle GPU (perfgate.measure.clocks); its rule reads it as compiled host time
# relative to eager's (perfgate.judge.rules.HostTimeRule), so its line is a growth of that time.
HOST = Clock("host", "host_speedup", "host_", "host: compiled / eager host time", threshold=0.15)
# A data-parallel cell's GPU work but NCCL's, the ranks' mean (perfgate.measure.ddp_clocks): its device clock,
# shown in the device column and gated by the device line.
COMPUTE = Clock(
    "compute",
    "compute_speedup",
    "compute_",
    "compute speedup",
    threshold=DEVICE.threshold,
    phases=("ddp",),
    column="device",
)

CLOCKS: tuple[Clock, ...] = (WALL, DEVICE, HOST, COMPUTE)
BY_RATIO = {clock.ratio: clock for clock in CLOCKS}
NAMES = {clock.ratio: clock.name for clock in CLOCKS}  # "device_speedup" -> "device"


@dataclass(frozen=True)
class Count:
    """One count of a step's work, taken per side in a pass of its own (perfgate.measure.counts): its record
    fields are `eager_<name>` and `compiled_<name>`, the count per step. Counts do not drift with the host as
    timings do, so their rule is a tight band around the baseline's (perfgate.judge.rules.CountBandRule)."""

    name: str  # the fields' stem: "kernels" -> eager_kernels, compiled_kernels
    label: str  # what is counted, plural: "kernels"
    verb: str  # what a step does with them: "launches" ("compiled step launches 412 kernels")
    threshold: float = 0.015  # the band, a fraction of the baseline's count either way
    # The band where the two records' graphs came by different ways (one process compiled them, the other
    # loaded them from the cache: perfgate.core.record_reading.graphs_came_alike), for a count that follows
    # that; None where the count does not.
    apart: float | None = None

    @property
    def widest(self) -> float:
        """The band where nothing is known of how the graphs came (a history's change points)."""
        return max(self.threshold, self.apart or 0.0)

    def field(self, side: str) -> str:
        return f"{side}_{self.name}"

    @property
    def fields(self) -> tuple[str, str]:
        return self.field("eager"), self.field("compiled")


def range_field(field: str) -> str:
    """The baseline cell's field that holds [least, most] of a count field its runs disagreed on
    (perfgate.judge.baseline_fold; absent where they agreed): "compiled_kernels" -> "compiled_kernels_range"."""
    return f"{field}_range"


# The bands started from PyTorch's pr_time_benchmarks band on instruction counts (about +-1.5 %) and were tuned
# from the measured spread (docs/measuring.md, which also says how each count is taken and what it catches).
# ATen ops, kernels, CUDA graph replays and dynamo lookups were the same in every process of every cell: the 12
# PR cells in 3-4 processes each on 2xH200 23ebdea2, 4xH200 2aa41d77 and 349f3a2e and the H100 06ce1001
# (2026-11-27/28), and every cell of the CPU tier run to run. So +-0.5 %: one more kernel on resnet50 infer's
# 187 fails. Python calls follow how a process got its graphs, compiled there or loaded from the cache (under
# 1 % apart); got alike, they repeated on six machines but for a thread's wake in one counted step, which
# step_thread_hook now leaves out (docs/measuring.md has the figures). So +-1 % alike, which one more call a
# layer on gpt2's or vit_b16's 12 layers passes (+1.15-1.25 %), and +-1.5 % apart. Instructions were never
# countable there: +-1.5 %.
EXACT = 0.005
PY_CALLS = Count("py_calls", "Python calls", "makes", 0.01, apart=0.015)
ATEN_OPS = Count("aten_ops", "ATen ops", "dispatches", EXACT)
KERNELS = Count("kernels", "GPU kernels", "runs", EXACT)
CUDA_GRAPHS = Count("cuda_graphs", "CUDA graph replays", "makes", EXACT)
LOOKUPS = Count("dynamo_lookups", "dynamo cache lookups", "makes", EXACT)
INSTRUCTIONS = Count("instructions", "instructions", "retires")
COUNTS: tuple[Count, ...] = (PY_CALLS, ATEN_OPS, KERNELS, CUDA_GRAPHS, LOOKUPS, INSTRUCTIONS)
# A count field -> (its Count, its side): "compiled_kernels" -> (KERNELS, "compiled").
COUNT_OF = {count.field(side): (count, side) for count in COUNTS for side in ("eager", "compiled")}


def shown_in(column: Clock, has) -> Clock:
    """The clock a report shows in `column`'s place for one cell: one that stands in for it where the cell has
    that clock (`has(clock)`: a data-parallel cell's compute clock in the device column), else `column`."""
    return next((clock for clock in CLOCKS if clock.column == column.name and has(clock)), column)
