"""A cell's trend over its history, for one clock's speedup: the chart (perfgate.render.charts), its change points
(perfgate.judge.changepoint), the points the gate's own rule for that clock marks against the baseline, and the
bisect command a lower level asks for. Imports no torch.

The HTML report draws one per cell for the wall speedup, what a user gets, and one for the device speedup
beside it: on these H100 leases the wall speedup of a host-bound step followed the host CPU (resnet50 train
2.19x, 1.82x, 1.54x on three leases in one day) while the device speedup moved 0.1-1.5 % between machines, so
a nightly's change points on the device clock are the ones that say the GPU's work moved.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from perfgate.core.clocks import BY_RATIO, COUNTS, WALL
from perfgate.judge.changepoint import series_changes
from perfgate.judge.finding import REGRESSION
from perfgate.judge.rules import DEFAULT_RULES, SpeedupRule
from perfgate.judge.triage import bisect_hint
from perfgate.render.charts import TrendChange, TrendLevel, TrendPoint, trend_chart
from perfgate.render.report import shown

SPARK = "▁▂▃▄▅▆▇█"


@dataclass(frozen=True)
class Trend:
    cell: str
    svg: str
    points: int
    changes: tuple[str, ...]  # "-13.2 % at 11-22 06:53 (abc1234), regression"
    marked: tuple[str, ...]  # points the gate's rule flags against the baseline
    spark: str
    baseline: float | None  # the baseline's median ratio (the dashed line), if one was given
    bisects: tuple[str, ...] = ()  # per lower level: the nights around it and the perfgate bisect command
    metric: str = WALL.ratio  # the clock's ratio field: speedup | device_speedup
    label: str = WALL.label  # its heading: "wall speedup"


def ratio_text(record: dict, metric: str = WALL.ratio) -> str:
    """ "2.249× [2.239, 2.265]": a clock's ratio with its 95 % interval."""
    return f"{shown(record, metric)}× [{shown(record, metric + '_lo')}, {shown(record, metric + '_hi')}]"


def clock_rule(rules: Sequence, metric: str = WALL.ratio) -> SpeedupRule:
    """The rule set's rule for one clock's ratio (the default one where the set has none): it marks trend points
    against the baseline and sizes the change points' kinds, as it gates the run."""
    default = SpeedupRule(metric, threshold=BY_RATIO[metric].threshold)
    return next((r for r in rules if isinstance(r, SpeedupRule) and r.metric == metric), default)


def _axis_labels(points: Sequence[dict]) -> list[tuple[str, str]]:
    """(label, sublabel) per point: the time when every point is on one day, else the date; and the commit."""
    one_day = len({str(p["date"])[:10] for p in points}) == 1
    return [
        (
            str(p["date"])[11:16] if one_day else str(p["date"])[5:10],
            (p.get("commit") or "")[:7] or f"run {str(p['run_id'])[:6]}",
        )
        for p in points
    ]


def _point_mark(point: dict, base_cell: dict | None, rule: SpeedupRule) -> str:
    if not base_cell or point.get("status") != "ok" or not point.get(rule.metric):
        return ""
    finding = rule.check(base_cell, point)
    return finding.kind if finding else ""


def _change_kind(shift: float, threshold: float) -> str:
    if shift <= -threshold:
        return REGRESSION
    return "improvement" if shift >= threshold else "shift"


def _drawn(point: dict, metric: str, label: str, sublabel: str, mark: str) -> TrendPoint:
    value = point.get(metric)
    tooltip = (
        f"{point['date']} · commit {point.get('commit') or 'unknown'} · run {point['run_id']} · "
        f"{ratio_text(point, metric) if value else 'no ' + BY_RATIO[metric].label} · {point.get('status')}"
        + (f": {point['reason']}" if point.get("reason") else "")
    )
    return TrendPoint(
        value,
        point.get(f"{metric}_lo"),
        point.get(f"{metric}_hi"),
        label,
        sublabel,
        point.get("status") == "ok" and value is not None,
        mark,
        tooltip,
    )


def trend(
    cell: str,
    points: Sequence[dict],
    base_cell: dict | None,
    rule: SpeedupRule = clock_rule(DEFAULT_RULES),  # noqa: B008 (a frozen rule, made once)
) -> Trend:
    """One cell's trend chart and texts for `rule`'s clock from its history (oldest first), its baseline cell
    (or None) and the gate's rule for that clock (the wall rule by default). The wall trend's texts read as
    they always did; another clock's name it ("device speedup -3.1% at ...")."""
    metric = rule.metric
    clock = BY_RATIO[metric]
    ok, seg = series_changes(points, metric)
    levels = [TrendLevel(ok[a], ok[b - 1], value) for a, b, value in seg.levels]
    labels = _axis_labels(points)
    threshold = rule.nominal_threshold(points[-1])
    named = "" if clock is WALL else f"{clock.label} "
    changes, texts, bisects = [], [], []
    for cp in seg.change_points:
        index, kind = ok[cp.index], _change_kind(cp.shift, threshold)
        changes.append(TrendChange(index, cp.shift, kind))
        texts.append(
            f"{named}{cp.shift:+.1%} at {labels[index][0]} ({labels[index][1]}): {cp.before:.3f}× → "
            f"{cp.after:.3f}×, {kind}"
        )
        if kind == REGRESSION:
            bisects.append(f"{cell} {named}{cp.shift:+.1%}: {bisect_hint(points, ok, cp.index, rule=metric)}")
    marks = [_point_mark(p, base_cell, rule) for p in points]
    drawn = [_drawn(p, metric, label, sub, mark) for p, (label, sub), mark in zip(points, labels, marks)]
    marked = tuple(
        f"{cell} at {labels[i][0]} ({labels[i][1]}): {named}{ratio_text(p, metric)}, {m} against the baseline"
        for i, (p, m) in enumerate(zip(points, marks))
        if m
    )
    baseline = (base_cell or {}).get(metric)
    word = "speedup" if clock is WALL else metric.replace("_", " ")
    svg = trend_chart(drawn, levels, changes, label=f"{word} history {cell}", baseline=baseline)
    spark = sparkline(p.get(metric) for p in points)
    return Trend(cell, svg, len(points), tuple(texts), marked, spark, baseline, tuple(bisects), metric, clock.label)


def count_changes(cell: str, points: Sequence[dict]) -> tuple[list[str], list[str]]:
    """(each change point of the cell's count series, each with its level before and after; the bisect command
    for each count that grew) from its history, oldest first: the counts' change points on their band's scale
    (perfgate.judge.changepoint.COUNT_BANDS), the same method as a clock's. A count that grew is more work a
    step (a regression, bisected under the gate's rules); one that shrank, a gain that wants a baseline update."""
    labels = _axis_labels(points)
    texts, bisects = [], []
    for count in COUNTS:
        for side, metric in zip(("eager", "compiled"), count.fields):
            ok, seg = series_changes(points, metric)
            for cp in seg.change_points:
                index = ok[cp.index]
                grew = cp.shift > 0
                texts.append(
                    f"{cell} {side} {count.label} {cp.shift:+.1%} at {labels[index][0]} ({labels[index][1]}): "
                    f"{cp.before:,.0f} → {cp.after:,.0f} a step, {'more work' if grew else 'less work'}"
                )
                if grew:
                    bisects.append(
                        f"{cell} {side} {count.label} {cp.shift:+.1%}: {bisect_hint(points, ok, cp.index, rule='gate')}"
                    )
    return texts, bisects


def sparkline(values) -> str:
    """Unicode blocks, lowest to highest; x for a run without a value."""
    values = list(values)
    known = [v for v in values if v]
    if not known:
        return ""
    lo, hi = min(known), max(known)
    scale = (len(SPARK) - 1) / (hi - lo) if hi > lo else 0.0
    return "".join(SPARK[round((v - lo) * scale)] if v else "×" for v in values)
