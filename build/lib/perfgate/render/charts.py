"""Hand-written inline SVG charts for the HTML report: horizontal bars with error bars, and trend lines.

Imports no torch and nothing outside the standard library: the report is one self-contained page (no
scripts, no external URLs), and SVG text stays selectable and searchable. Colours and fonts come from the
page's stylesheet through class names, so the charts carry no styling of their own. Every drawn value also
sits in a data-* attribute (data-cell, data-value), so a test in a real browser can check that what is drawn
matches the records.
"""

from __future__ import annotations

import html
import math
from dataclasses import dataclass
from typing import Callable, Sequence

from perfgate.core.text import visible


def escape(text) -> str:
    """Text for SVG: control characters shown escaped (perfgate.core.text.visible), then HTML-escaped."""
    return html.escape(visible(text))


BAR_WIDTH_PX = 1280  # the bar charts' drawing width; the page is laid out for a ~1400 px window
CHAR_PX = 7.0  # average advance of a 12 px DejaVu Sans label character, to size the label column
LABEL_MIN_PX, LABEL_MAX_PX = 200, 560  # the left column for "model · variant · precision"
VALUE_PX = 230  # right column for the value text, e.g. "2.249× [2.239, 2.265]"
ROW_PX = 22  # one bar per row
TOP_PX = 18  # room above the bars for the reference line's label
AXIS_PX = 26  # tick labels under the bars
TREND_WIDTH_PX, TREND_HEIGHT_PX = 620, 210


@dataclass(frozen=True)
class Bar:
    label: str
    value: float
    text: str  # the value as printed beside the bar
    cell: str
    lo: float | None = None  # error bar, in the value's unit
    hi: float | None = None
    secondary: float | None = None  # a thinner bar inside the main one (e.g. warm compile seconds)
    css: str = ""  # extra classes, e.g. "verdict-regression"
    tooltip: str = ""
    group: str | None = ""  # a thin rule separates consecutive groups (models; None: a record without one)


@dataclass(frozen=True)
class TrendPoint:
    value: float | None  # None: the run failed before it measured anything
    lo: float | None
    hi: float | None
    label: str  # x-axis text, e.g. "11-22 06:41"
    sublabel: str  # second x-axis line, e.g. a short commit
    ok: bool  # status ok (only ok points are segmented)
    mark: str = ""  # "regression" | "improvement" (the gate's rule vs the baseline) | ""
    tooltip: str = ""


@dataclass(frozen=True)
class TrendLevel:
    first: int  # index of the segment's first point in the drawn series
    last: int  # index of its last point
    value: float


@dataclass(frozen=True)
class TrendChange:
    index: int  # the first point of the new level
    shift: float  # fraction, -0.1 = 10 % lower
    kind: str  # "regression" | "improvement" | "shift"


def nice_ticks(lo: float, hi: float, count: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]: steps of 1, 2, 2.5 or 5 times a power of ten."""
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(count - 1, 1)
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 2.5, 5, 10) if m * power >= raw)
    first = math.floor(lo / step) * step
    ticks, tick = [], first
    while tick <= hi + step * 1e-9:
        ticks.append(round(tick, 10))
        tick += step
    if ticks[-1] < hi:
        ticks.append(round(tick, 10))
    return ticks


def _fmt_tick(value: float) -> str:
    return f"{value:g}"


def _text(x: float, y: float, body: str, css: str, anchor: str = "start", extra: str = "") -> str:
    return f'<text class="{css}" x="{x:.1f}" y="{y:.1f}" text-anchor="{anchor}"{extra}>{escape(body)}</text>'


def _line(x1: float, y1: float, x2: float, y2: float, css: str, extra: str = "") -> str:
    return f'<line class="{css}" x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}"{extra}/>'


def _svg(width: int, height: int, body: Sequence[str], css: str, label: str) -> str:
    return (
        f'<svg class="chart {css}" role="img" aria-label="{escape(label)}" width="{width}" '
        f'height="{height}" viewBox="0 0 {width} {height}" xmlns="http://www.w3.org/2000/svg">'
        + "".join(body)
        + "</svg>"
    )


# ---------------------------------------------------------------------------------------------- bars


def _bar_axis(
    ticks: Sequence[float], x_of: Callable[[float], float], top: float, bottom: float, unit: str
) -> list[str]:
    parts = []
    for tick in ticks:
        x = x_of(tick)
        parts.append(_line(x, top, x, bottom, "grid"))
        parts.append(_text(x, bottom + 16, _fmt_tick(tick) + unit, "tick", "middle"))
    return parts


def _bar_row(bar: Bar, y: float, x_of: Callable[[float], float]) -> list[str]:
    mid = y + ROW_PX / 2
    x0, x1 = x_of(0.0), x_of(bar.value)
    tip = f"<title>{escape(bar.tooltip or bar.label + ': ' + bar.text)}</title>"
    parts = [
        f'<g class="row" data-cell="{escape(bar.cell)}">{tip}',
        _text(x0 - 8, mid + 4, bar.label, "label", "end"),
        f'<rect class="bar {bar.css}" x="{x0:.1f}" y="{mid - 6:.1f}" width="{max(x1 - x0, 0.5):.2f}" '
        f'height="12" data-cell="{escape(bar.cell)}" data-value="{bar.value:.6g}"/>',
    ]
    if bar.secondary is not None:
        parts.append(
            f'<rect class="bar-secondary" x="{x0:.1f}" y="{mid - 2:.1f}" '
            f'width="{max(x_of(bar.secondary) - x0, 0.5):.2f}" height="4" '
            f'data-value="{bar.secondary:.6g}"/>'
        )
    right = x1
    if bar.lo is not None and bar.hi is not None:
        lo, hi = x_of(bar.lo), x_of(bar.hi)
        parts += [
            _line(lo, mid, hi, mid, "err"),
            _line(lo, mid - 5, lo, mid + 5, "err"),
            _line(hi, mid - 5, hi, mid + 5, "err"),
        ]
        right = max(right, hi)
    parts.append(_text(right + 6, mid + 4, bar.text, "value", extra=f' data-cell="{escape(bar.cell)}"'))
    parts.append("</g>")
    return parts


def bar_chart(bars: Sequence[Bar], *, label: str, unit: str = "", ref: float | None = None, ref_label: str = "") -> str:
    """Horizontal bars, one row per Bar, from 0 to a round maximum; `ref` draws a dashed reference line
    (e.g. 1.0x: compiled as fast as eager)."""
    if not bars:
        return ""
    top = TOP_PX
    height = top + ROW_PX * len(bars) + AXIS_PX
    span = max([b.hi or b.value for b in bars] + [b.value for b in bars] + [ref or 0.0]) * 1.04
    ticks = nice_ticks(0.0, span, 6)
    left = min(max(LABEL_MIN_PX, CHAR_PX * max(len(b.label) for b in bars) + 16), LABEL_MAX_PX)
    plot = BAR_WIDTH_PX - left - VALUE_PX

    def x_of(value: float) -> float:
        return left + plot * value / ticks[-1]

    bottom = top + ROW_PX * len(bars)
    parts = _bar_axis(ticks, x_of, top, bottom, unit)
    previous = None
    for i, bar in enumerate(bars):
        y = top + i * ROW_PX
        if previous is not None and bar.group != previous:
            parts.append(_line(8, y, BAR_WIDTH_PX - 8, y, "group-rule"))
        previous = bar.group
        parts += _bar_row(bar, y, x_of)
    if ref is not None:
        x = x_of(ref)
        parts += [_line(x, top - 6, x, bottom, "ref"), _text(x, top - 8, ref_label, "ref-label", "middle")]
    return _svg(BAR_WIDTH_PX, height, parts, "bars", label)


# ---------------------------------------------------------------------------------------------- trends

_LEFT, _RIGHT, _TOP, _BOTTOM = 52, 14, 22, 40


def _trend_scale(points: Sequence[TrendPoint], baseline: float | None):
    values = [v for p in points for v in (p.value, p.lo, p.hi) if v is not None]
    values += [baseline] if baseline else []
    lo, hi = (min(values), max(values)) if values else (0.0, 1.0)
    pad = max((hi - lo) * 0.15, hi * 0.01, 1e-9)
    ticks = nice_ticks(lo - pad, hi + pad, 4)
    plot_h = TREND_HEIGHT_PX - _TOP - _BOTTOM
    plot_w = TREND_WIDTH_PX - _LEFT - _RIGHT

    def y_of(value: float) -> float:
        return _TOP + plot_h * (ticks[-1] - value) / (ticks[-1] - ticks[0])

    def x_of(index: float) -> float:
        return _LEFT + plot_w * (index + 0.5) / max(len(points), 1)

    return ticks, x_of, y_of


def _trend_axes(points: Sequence[TrendPoint], ticks, x_of, y_of) -> list[str]:
    parts = []
    for tick in ticks:
        parts += [
            _line(_LEFT, y_of(tick), TREND_WIDTH_PX - _RIGHT, y_of(tick), "grid"),
            _text(_LEFT - 6, y_of(tick) + 4, f"{tick:g}×", "tick", "end"),
        ]
    every = max(1, math.ceil(len(points) / 8))  # at most ~8 labels fit under 560 px
    base = TREND_HEIGHT_PX - _BOTTOM
    for i, point in enumerate(points):
        if i % every == 0 or i == len(points) - 1:
            parts.append(_text(x_of(i), base + 14, point.label, "tick", "middle"))
            parts.append(_text(x_of(i), base + 27, point.sublabel, "tick sub", "middle"))
    return parts


def _trend_marks(levels, changes, baseline, x_of, y_of) -> list[str]:
    parts = []
    if baseline:  # its value is printed above the chart: a label here would sit on the newest point
        y = y_of(baseline)
        parts.append(_line(_LEFT, y, TREND_WIDTH_PX - _RIGHT, y, "baseline", f' data-value="{baseline:.6g}"'))
    for level in levels:
        y = y_of(level.value)
        parts.append(
            _line(x_of(level.first - 0.4), y, x_of(level.last + 0.4), y, "level", f' data-value="{level.value:.6g}"')
        )
    for change in changes:
        x = x_of(change.index - 0.5)
        parts += [
            _line(
                x,
                _TOP,
                x,
                TREND_HEIGHT_PX - _BOTTOM,
                f"cp cp-{change.kind}",
                f' data-index="{change.index}" data-shift="{change.shift:.6g}"',
            ),
            _text(x + 3, _TOP - 6, f"{change.shift:+.1%}", f"cp-label cp-{change.kind}"),
        ]
    return parts


def _trend_point(i: int, point: TrendPoint, x_of, y_of, floor: float) -> list[str]:
    x = x_of(i)
    tip = f"<title>{escape(point.tooltip)}</title>" if point.tooltip else ""
    if not point.ok:
        y = y_of(point.value if point.value is not None else floor)
        return [
            f'<g class="pt-failed" data-index="{i}">{tip}',
            _line(x - 4, y - 4, x + 4, y + 4, "fail"),
            _line(x - 4, y + 4, x + 4, y - 4, "fail"),
            "</g>",
        ]
    parts = [f'<g class="pt" data-index="{i}" data-value="{point.value:.6g}">{tip}']
    if point.lo is not None and point.hi is not None:
        parts.append(_line(x, y_of(point.lo), x, y_of(point.hi), "err"))
    css = f"dot mark-{point.mark}" if point.mark else "dot"
    parts += [
        f'<circle class="{css}" cx="{x:.1f}" cy="{y_of(point.value):.1f}" r="{5 if point.mark else 3.5}"/>',
        "</g>",
    ]
    return parts


def trend_chart(
    points: Sequence[TrendPoint],
    levels: Sequence[TrendLevel],
    changes: Sequence[TrendChange],
    *,
    label: str,
    baseline: float | None = None,
) -> str:
    """One cell's speedup over runs (oldest left): points with their intervals, a line through the ok
    points, each segment's level, change points as vertical lines with their step, failed runs as x."""
    if not points:
        return ""
    ticks, x_of, y_of = _trend_scale(points, baseline)
    parts = _trend_axes(points, ticks, x_of, y_of)
    ok = [(i, p) for i, p in enumerate(points) if p.ok and p.value is not None]
    if len(ok) > 1:
        path = " ".join(f"{x_of(i):.1f},{y_of(p.value):.1f}" for i, p in ok)
        parts.append(f'<polyline class="trend" points="{path}"/>')
    parts += _trend_marks(levels, changes, baseline, x_of, y_of)
    for i, point in enumerate(points):
        parts += _trend_point(i, point, x_of, y_of, ticks[0])
    return _svg(TREND_WIDTH_PX, TREND_HEIGHT_PX, parts, "trend", label)
