"""What `perfgate bisect` decides, with no measuring in it: the rule that makes a step "bad", how one probe's
A/B verdict reads under that rule (good, bad or unsure), and which step to probe next. Imports no torch.

A probe is an A/B run (perfgate.ab.process_run) with A = the range's known-good first step and B = the step probed.
Always the good end, never the neighbouring probe: every probe then answers the same question ("is this
step worse than the last good night by the rule?"), so a verdict stays valid however the search moves,
and a regression that builds up over several steps is found where it first passes the rule's line. The
neighbouring pair (last good, first bad) is what the report's reproduce commands run.

    bad     the rule trips on some cell (past both of its lines: the A/B verdict's regression)
    good    no cell trips, and the rule compared every cell with a line no wider than its threshold
    unsure  the run cannot compare (exit 2), or the rule's line was wider than its threshold on some cell
            (noise-limited: a loss of the threshold could hide), or the rule's clock is missing: the probe is
            measured again with more processes before it steers the search, and skipped if it stays unsure
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Mapping

from perfgate.ab.process_rows import ABReport
from perfgate.ab.process_rules import ab_rules
from perfgate.judge.finding import Finding

GOOD, BAD, UNSURE = "good", "bad", "unsure"
# How a probe measures: the paired engine (one pytest run, both sides alive on one GPU, the PR gate's verdict),
# or whole processes of each side alternating (perfgate ab --processes N), which a --rule METRIC needs.
PAIRED, PROCESSES = "paired", "processes"
ENGINES = (PAIRED, PROCESSES)
# The gate's own rules, all of them: a probe is bad where `perfgate ab` would fail it (exit 1).
GATE = "gate"
# The thresholds a rule's metric takes from ab_rules' keywords (fractions; counts have none).
THRESHOLD_KEYWORD = {
    "speedup": "speedup",
    "device_speedup": "device",
    "compute_speedup": "device",
    "host_speedup": "host",
    "eager_ms": "step_time",
    "compiled_ms": "step_time",
    "peak_mem_compiled_mb": "memory",
    "peak_mem_eager_mb": "memory",
    "compile_s": "compile_time",
}
TIMED = ("speedup", "device_speedup", "compute_speedup", "host_speedup", "eager_ms", "compiled_ms")
COUNTS = ("graph_breaks", "recompiles", "ddp_wrapper_breaks", "numerics", "status")
RULE_METRICS = (GATE, *THRESHOLD_KEYWORD, *COUNTS)
# Under the gate's rules, the clocks whose noise-limited line leaves a "good" unsure: the two the gate flags
# cells on. The host clock moves ~3 % a round with the machine's load (its line is often 26 %): it reports.
GATE_CLOCKS = ("speedup", "device_speedup", "compute_speedup")


class BisectError(Exception):
    """Input a bisection cannot use; the message names the value and the valid ones."""


@dataclass(frozen=True)
class BadRule:
    """What makes a step bad: one rule's metric (optionally its threshold, a fraction) or the gate's rules."""

    metric: str = GATE
    threshold: float | None = None  # 0.03 = 3 %; None: the gate's default for that metric

    @classmethod
    def parse(cls, text: str) -> "BadRule":
        """`gate`, `METRIC` or `METRIC:PCT` (e.g. device_speedup:2.5)."""
        metric, _, pct = text.partition(":")
        if metric not in RULE_METRICS:
            raise BisectError(f"--rule {text!r}: unknown metric {metric!r}; valid: {', '.join(RULE_METRICS)}")
        if not pct:
            return cls(metric)
        if metric not in THRESHOLD_KEYWORD:
            raise BisectError(
                f"--rule {text!r}: {metric} takes no threshold; metrics with one: {', '.join(THRESHOLD_KEYWORD)}"
            )
        try:
            value = float(pct)
        except ValueError:
            raise BisectError(f"--rule {text!r}: {pct!r} is not a percentage (e.g. {metric}:3)") from None
        if not 0 < value < 1000:
            raise BisectError(f"--rule {text!r}: the threshold must be a percentage above 0 and below 1000")
        return cls(metric, value / 100)

    def text(self) -> str:
        return self.metric if self.threshold is None else f"{self.metric}:{self.threshold * 100:g}"

    def rules(self) -> tuple:
        """The A/B verdict's rules, this rule's threshold set: every rule still judges (the report shows all)."""
        if self.threshold is None:
            return ab_rules()
        return ab_rules(**{THRESHOLD_KEYWORD[self.metric]: self.threshold})

    def watched(self) -> tuple[str, ...]:
        return GATE_CLOCKS if self.metric == GATE else (self.metric,)

    def describe(self) -> str:
        if self.metric == GATE:
            return (
                "the gate's rules (a regression on any rule, as `perfgate ab` exit 1; unsure where the wall "
                "or device speedup is noise-limited)"
            )
        line = f"{self.threshold:.1%}" if self.threshold is not None else "the gate's threshold"
        return f"{self.metric} worse than the good end past {line}, Student's t at the A/B verdict's alpha"


@dataclass(frozen=True)
class ProbeReading:
    verdict: str  # GOOD | BAD | UNSURE
    why: str  # for a BAD reading, the finding: perfgate.ab.bisect_report.reading_why
    finding: Finding | None = None  # BAD: the first regression under the rule
    more: int = 0  # BAD: how many more the rule found


def classify(report: ABReport, rule: BadRule) -> ProbeReading:
    """One probe's A/B report under the rule (the module docstring says how)."""
    if report.errors:
        return ProbeReading(UNSURE, f"cannot compare: {report.errors[0]}")
    tripped = [f for f in report.regressions if rule.metric in (GATE, f.metric)]
    if tripped:
        return ProbeReading(BAD, "", tripped[0], len(tripped) - 1)
    for row in report.rows:
        for metric in rule.watched():
            c = row.comparison(metric)
            if c is None and metric == rule.metric and metric in TIMED:  # the rule's own clock: it must judge
                return ProbeReading(UNSURE, f"{row.cell}: {metric} not measured")
            if c is not None and c.change is None and c.note:
                return ProbeReading(UNSURE, f"{row.cell}: {c.label}: {c.note}")
            if c is not None and c.noise_limited:
                return ProbeReading(
                    UNSURE, f"{row.cell}: {c.label} noise-limited (line {c.line:.1%}, change {c.change:+.1%})"
                )
    return ProbeReading(GOOD, f"no regression on {rule.text()} in {len(report.rows)} cell(s)")


# ---------------------------------------------------------------------------------------------- the search


@dataclass(frozen=True)
class SearchState:
    """Where the search stands. `next` is the step to probe, or None when it is over; then `outcome` is one of
    found (first_bad, last_good), no_bad_step, unsettled (the culprit is one of `suspects`)."""

    next: int | None
    outcome: str | None = None
    last_good: int | None = None
    first_bad: int | None = None
    suspects: tuple[int, ...] = ()


def cell_summary(report, rule: BadRule) -> list[dict]:
    """Per cell, the rule's clocks and every tripped metric: A → B, the change, its interval and line."""
    rows = []
    for row in report.rows:
        for metric in dict.fromkeys([*rule.watched(), *row.tripped]):
            c = row.comparison(metric)
            if c is not None:
                rows.append(
                    {
                        "cell": row.cell,
                        "metric": metric,
                        "label": c.label,
                        "a": c.a,
                        "b": c.b,
                        "change": c.change,
                        "lo": c.lo,
                        "hi": c.hi,
                        "line": c.line,
                        "kind": c.kind,
                        "noise_limited": c.noise_limited,
                        "note": c.note,
                        "n_a": c.n_a,
                        "n_b": c.n_b,
                    }
                )
            elif metric in row.tripped:
                rows.append(
                    {
                        "cell": row.cell,
                        "metric": metric,
                        "label": metric,
                        "kind": "regression",
                        "a": row.a.get(metric),
                        "b": row.b.get(metric),
                    }
                )
    return rows


def search(steps: int, verdicts: Mapping[int, str]) -> SearchState:
    """The next step to probe, from the settled verdicts so far ({step index: GOOD | BAD | UNSURE}, UNSURE
    meaning unsure after the most processes: skipped). Step 0 is good by definition (it is every probe's A).
    The last step is probed first: if it is not worse than the first, there is nothing to find, at the cost
    of one probe. Then binary search between the last good and the first bad, skipping unsure steps as
    `git bisect skip` does (the nearest to the middle instead)."""
    if steps < 2:
        raise BisectError(f"a range of {steps} step(s): bisecting needs a good and a bad end (2 steps at least)")
    last = steps - 1
    if last not in verdicts:
        return SearchState(last)
    if verdicts[last] == GOOD:
        return SearchState(None, "no_bad_step", last_good=last)
    if verdicts[last] == UNSURE:
        return SearchState(None, "unsettled", last_good=0, suspects=tuple(range(1, steps)))
    good = max(i for i in [0, *verdicts] if i == 0 or verdicts[i] == GOOD)
    bad = min(i for i in verdicts if verdicts[i] == BAD and i > good)
    open_steps = [i for i in range(good + 1, bad) if i not in verdicts]
    if not open_steps:
        skipped = tuple(i for i in range(good + 1, bad) if verdicts.get(i) == UNSURE)
        if skipped:
            return SearchState(None, "unsettled", last_good=good, suspects=(*skipped, bad))
        return SearchState(None, "found", last_good=good, first_bad=bad)
    middle = (good + bad) / 2
    return SearchState(min(open_steps, key=lambda i: (abs(i - middle), i)))


def probes_left(steps: int, verdicts: Mapping[int, str]) -> int:
    """At most how many probes the search still needs (no skips): the end, then log2 of the open range."""
    state = search(steps, verdicts)
    if state.next is None:
        return 0
    if state.next == steps - 1 and steps - 1 not in verdicts:
        return 1 + max(0, (steps - 2).bit_length())
    good = max(i for i in [0, *verdicts] if i == 0 or verdicts[i] == GOOD)
    bad = min(i for i in verdicts if verdicts[i] == BAD and i > good)
    return max(1, (bad - good - 1).bit_length())


def _is(value, kind) -> bool:
    return isinstance(value, kind) and not (kind is int and isinstance(value, bool))


def manifest_problem(manifest: dict, min_processes: int) -> str | None:
    """The first field of a bisection's manifest (bisect.json) that perfgate bisect could not have written,
    or None: a hand-edited or corrupt one is refused naming it, where it failed mid-run with a KeyError."""
    strings = lambda v: _is(v, list) and all(_is(x, str) for x in v)  # noqa: E731
    processes = manifest.get("engine", PROCESSES) == PROCESSES  # a paired bisection has no process counts
    for field, ok in (
        ("cwd", _is(manifest.get("cwd"), str)),
        ("engine", manifest.get("engine", PROCESSES) in ENGINES),
        ("common_args", strings(manifest.get("common_args"))),
        ("pip_args", strings(manifest.get("pip_args"))),
        ("rule", _is(manifest.get("rule"), str)),
        ("processes", not processes or _is(manifest.get("processes"), int) and manifest["processes"] >= min_processes),
        (
            "max_processes",
            not processes or _is(manifest.get("max_processes"), int) and manifest["max_processes"] >= min_processes,
        ),
        ("steps", _is(manifest.get("steps"), list) and len(manifest["steps"]) >= 2),
        ("probes", _is(manifest.get("probes"), dict)),
    ):
        if not ok:
            return f"field {field!r} is {json.dumps(manifest.get(field))[:60]}"
    try:
        BadRule.parse(manifest["rule"])
    except BisectError as err:
        return f"field 'rule': {err}"
    for i, step in enumerate(manifest["steps"]):
        if not _is(step, dict):
            return f"steps[{i}] is no object"
        for key in ("name", "label", "python"):
            if not _is(step.get(key), str) or not step[key].strip():
                return f"steps[{i}].{key} is {json.dumps(step.get(key))[:60]}"
        if not all(_is(step.get(k), (str, type(None))) for k in ("rev", "pip")) or not _is(step.get("env", {}), dict):
            return f"steps[{i}]: rev, pip or env of the wrong kind"
    for key, probe in manifest["probes"].items():
        if not (key.isdigit() and int(key) < len(manifest["steps"])) or not _is(probe, dict):
            return f"probes[{key!r}] names no step of the range"
        if (
            not _is(probe.get("dir"), str)
            or (processes and not _is(probe.get("processes"), int))  # a paired probe counts no processes
            or not _is(probe.get("readings", []), list)
        ):
            return f"probes[{key!r}]: dir, processes or readings of the wrong kind"
    return None
