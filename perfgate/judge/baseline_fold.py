"""How one baseline cell folds its runs: each record field by its `fold` in perfgate.core.record.FIELDS (the last
run's as it is, a median, a maximum, or a clock's median with its per-run values, run-to-run spread and the envelope
of the runs' intervals), leaving out a figure that an older schema measured another way. perfgate.judge.baseline
groups records into runs and cells, and stores what this folds. Imports no torch.
"""

from __future__ import annotations

import statistics
from typing import Sequence

from perfgate.core.clocks import COUNT_OF, range_field
from perfgate.core.record import CLOCKS, HOST_AFTER_PROFILER, HOST_ROUNDS_SCHEMA, bound_of, names
from perfgate.core.record_reading import compiled_peak_is_right
from perfgate.core.stats import interval_sd, rel_spread

# Record fields folded as a median over runs (ms per step), as a max over runs (the conservative side), and
# taken from the last run as they are (perfgate.core.record.FIELDS, `fold`).
MEDIAN_FIELDS = names(fold="median")
MAX_FIELDS = names(fold="max")
IDENTITY_FIELDS = names(fold="verbatim")


def values_of(records: Sequence[dict], name: str) -> list:
    """The values of `name` in `records` that are not null, in order."""
    return [r[name] for r in records if r.get(name) is not None]


def _numerics(records: Sequence[dict]) -> str:
    # Runs that skipped the check (an A/B side's later processes) neither pass nor fail it.
    verdicts = [v for r in records if (v := r.get("numerics") or "skipped") != "skipped"]
    if "fail" in verdicts:
        return "fail"
    return "pass" if verdicts and all(v == "pass" for v in verdicts) else "skipped"


def _single(records: Sequence[dict], name: str):
    """A value every run should share (e.g. compile_cache); "mixed" when runs disagree."""
    values = {r.get(name) for r in records}
    return values.pop() if len(values) == 1 else "mixed"


def measured_right(records: Sequence[dict], name: str) -> list[dict]:
    """The records whose `name` means what it means today: a compiled peak from a schema-1 record left the
    compiled weights out (read low by their size) and one from schema 4 counted the numerics judge's GPU
    temporaries (gpt2 infer: 11474 MiB for 1348), so neither may become the baseline's figure. A host
    speedup from before HOST_ROUNDS_SCHEMA came from 11 rounds: the same quantity, but its spread between
    runs (the rule's s_rr) reads about twice as wide, so it folds only from newer runs where two or more of
    them measured it (one run gives no spread); else from all. A host speedup taken after the profiler
    (HOST_AFTER_PROFILER) never folds."""
    if name == "peak_mem_compiled_mb":
        return [r for r in records if compiled_peak_is_right(r)]
    if name == "host_speedup":
        records = [r for r in records if (r.get("schema") or 1) not in HOST_AFTER_PROFILER]
        newer = [r for r in records if (r.get("schema") or 1) >= HOST_ROUNDS_SCHEMA and r.get(name)]
        return newer if len(newer) >= 2 else list(records)
    return list(records)


def run_to_run_sd(runs: Sequence[dict], metric: str) -> float | None:
    """The run-to-run sd of log `metric` over runs (one record each): the robust spread of their values
    (stats.rel_spread), but never below the median run's own in-run sd (its 95 % interval / 3.92). Each
    run's value is a median with that much sampling error, so runs cannot differ by less; and from 3 to 5
    runs the MAD comes out near 0 whenever two or three runs happen to agree, which alone would put the
    line at the current run's noise and cry wolf. None with fewer than 2 values: no run-to-run evidence."""
    spread = rel_spread(values_of(runs, metric))
    in_run = [interval_sd(r.get(f"{metric}_lo"), r.get(f"{metric}_hi")) for r in runs if r.get(metric)]
    return None if spread is None else max(spread, statistics.median(in_run))


def _fold_clock(ok: Sequence[dict], metric: str) -> dict:
    """One clock's ratio over the ok runs that measured it: median, per-run values, run-to-run spread
    (run_to_run_sd), and the envelope of the runs' intervals."""
    values = values_of(ok, metric)
    return {
        metric: statistics.median(values) if values else None,
        f"{metric}_runs": values,
        f"{metric}_spread": run_to_run_sd(ok, metric),
        f"{metric}_lo": min(values_of(ok, f"{metric}_lo"), default=None),
        f"{metric}_hi": max(values_of(ok, f"{metric}_hi"), default=None),
    }


def counted_runs(ok: Sequence[dict]) -> list[dict]:
    """The ok runs whose counts fold: counts are per step over `counts_steps` steps, and a stream model's depend
    on which, so those counted over the last run's steps."""
    steps = ok[-1].get("counts_steps") if ok else None
    return [r for r in ok if r.get("counts_steps") == steps]


def band_spanned(name: str, values: Sequence[float]) -> bool:
    """Whether a count's runs lie past its narrowest band (the count's threshold) from their median, so that the
    rule around the median would fail one of them: only then does the fold keep their range (`<count>_range`),
    and `perfgate baseline update` warns of every range it keeps. Runs closer than that pass against the median
    anyway, and a range would only widen the band (4756, 4756 and 4800 Python calls: +-1 % from 4756 holds all
    three, and a range to 4800 would pass 4845, +1.9 %)."""
    count, _ = COUNT_OF[name]
    median = statistics.median(values)
    return max(abs(v - median) for v in values) > count.threshold * abs(median)


def same_batch(records: Sequence[dict]) -> list[dict]:
    """The runs at the last run's batch: the zoo changed the cell between runs at another (a record without
    `batch` predates the field and is kept)."""
    batch = records[-1].get("batch") if records else None
    return [r for r in records if batch is None or r.get("batch") in (None, batch)]


def fold_cell(records: Sequence[dict]) -> dict:
    """One baseline cell from this cell's record in each run (at most one per run). Beside the medians and
    maxima: numerics is "pass" only if every ok run passed, compile_cache the runs' one value (else "mixed"),
    bound that of the median busy_compiled. Runs at another batch than the last run's are left out: the zoo
    changed the cell between them (a record without `batch` predates the field and is kept)."""
    records = same_batch(records)
    ok = [r for r in records if r.get("status") == "ok"]
    cell = {name: records[-1].get(name) for name in IDENTITY_FIELDS}
    if not ok:
        # Failed (or skipped) in every run: keep it so the gate can call a later success an improvement.
        status = "skipped" if all(r.get("status") == "skipped" for r in records) else "failed"
        cell.update(status=status, reason=records[-1].get("reason") or "", runs_ok=0, numerics=None)
        return cell
    cell.update(status="ok", reason="", runs_ok=len(ok))
    for clock in CLOCKS:
        cell.update(_fold_clock(measured_right(ok, clock), clock))
    cell.update(compile_cache=_single(ok, "compile_cache"), numerics=_numerics(ok))
    counted = counted_runs(ok)
    cell["counts_steps"] = ok[-1].get("counts_steps")
    for name in MEDIAN_FIELDS:
        values = values_of(counted if name in COUNT_OF else ok, name)
        cell[name] = statistics.median(values) if values else None
        if name in COUNT_OF and values and band_spanned(name, values):
            # Runs that disagree past the band: a count can follow the machine (the captioner's kernels,
            # docs/measuring.md), and the rule judges the range they spanned.
            cell[range_field(name)] = [min(values), max(values)]
    cell["bound"] = bound_of(cell["busy_compiled"])
    for name in MAX_FIELDS:
        cell[name] = max(values_of(measured_right(ok, name), name), default=None)
    return cell
