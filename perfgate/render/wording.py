"""The words of a finding: what every report, the plugin's terminal lines and the A/B and bisect reports print
for what a gate rule found. Imports no torch.

The rules (perfgate.judge.rules, perfgate.ab.process_verdict) return findings as data: the rule's terms (`form`),
its figures (value, baseline, change, interval, line, noise sd) and why it is advisory; this module alone
turns them into sentences. A gate finding compares the baseline with now; an A/B finding (`sides == "ab"`)
compares side A with side B, so its words are chosen here rather than rewritten from the gate's.

It imports perfgate.core only: `Finding.message` (perfgate.judge.rules) reads it lazily, for callers that hold
a finding and want its text, and an import of perfgate.judge from here would close a cycle
(tests/test_layers.py; docs/architecture.md says why this one arrow is allowed).
"""

from __future__ import annotations

from perfgate.core.clocks import COUNT_OF

# perfgate.judge.finding.AB, Finding.sides of an A/B finding (this module may not import judge: tests/test_wording.py
# keeps the two equal).
AB = "ab"
REFRESH = "refresh the baseline (perfgate baseline update)"
REFRESH_TAIL = f"; {REFRESH}"


def finding_text(finding) -> str:
    """The finding as one sentence: the rule's words for its figures, then why it is only advisory."""
    text = FORMS[finding.form](finding)
    return text + "".join(ADVISORIES[a.why](a) for a in finding.advisories)


def finding_json(finding) -> dict:
    """The finding as the JSON reports write it: its identity and figures, and its sentence."""
    return {
        "cell": finding.cell,
        "metric": finding.metric,
        "kind": finding.kind,
        "baseline": finding.baseline,
        "current": finding.current,
        "threshold": finding.threshold,
        **({"baseline_range": list(finding.spanned), "change": finding.change} if finding.spanned else {}),
        "message": finding_text(finding),
    }


# ---------------------------------------------------------------------------------------------- each form


def _refresh(f) -> str:
    """A gate improvement asks for a baseline refresh; an A/B run has no baseline to refresh."""
    return "" if f.loss or f.sides == AB else REFRESH_TAIL


def _line(f) -> str:
    """The line a ratio rule's figure crossed, in the rule's terms: a speedup's drop or gain; a time's growth
    (+) or fall (-)."""
    if f.form == "ratio":
        return f"the {f.threshold:.1%} {'drop' if f.loss else 'gain'} line"
    return f"the {'+' if f.loss else '-'}{f.threshold:.1%} line"


def _host_ms(pair) -> str:
    """ "20.10 -> 39.40 ms": host ms to issue one step, eager -> compiled ("?" where unknown)."""
    return " -> ".join("?" if v is None else f"{v:.2f}" for v in pair) + " ms"


def _figures(f) -> str:
    """A gate ratio finding's figures: now against the baseline, in the rule's terms."""
    ref, now = f.baseline, f.current
    if f.form == "host":
        now_ms, base_ms = f.host_ms
        return (
            f"compiled host time per step relative to eager {f.change:+.1%} (host ms eager -> compiled "
            f"{_host_ms(now_ms)} now, {_host_ms(base_ms)} in the baseline; host speedup {now:.3f}x "
            f"[{f.lo:.3f}, {f.hi:.3f}] vs {ref:.3f}x)"
        )
    if f.form == "step":
        return f"{f.label} {now:.3f} vs {ref:.3f} ({f.change:+.1%})"
    return f"{f.label} {now:.3f}x [{f.lo:.3f}, {f.hi:.3f}] vs baseline {ref:.3f}x ({f.change:+.1%})"


def _timed(f) -> str:
    """A ratio or time rule's finding: how far the figure moved, in noise sds (gate) or Student's t (A/B)."""
    if f.sides == AB:
        n_a, n_b = f.processes
        return (
            f"{f.label} {f.baseline:.4g} → {f.current:.4g} ({f.change:+.1%}, {f.confidence:.0%} interval "
            f"{f.lo:+.1%} to {f.hi:+.1%}; t {f.t:+.1f} on {f.df} df, {n_a} vs {n_b} processes), past {_line(f)}"
        )
    unknown = "" if f.noise_known else ", run-to-run noise unknown"
    return f"{_figures(f)}; {f.sds:.1f} noise sds (sd {f.sd:.1%}{unknown}), past {_line(f)}{_refresh(f)}"


def _missing(f) -> str:
    """A clock the baseline has and this run lacks (gate), or a timed figure missing in B (A/B)."""
    if f.sides == AB:
        return f"{f.label}: {f.note}"
    why = f.note or (f"older record schema {f.schema}" if f.schema is not None else "no reason given")
    return f"{f.clock} clock missing now: {why}"


def _count(f) -> str:
    return f"{f.metric.replace('_', ' ')} {f.baseline} -> {f.current}{_refresh(f)}"


def _per_step(value: float) -> str:
    """A count per step: whole where it is ("412"), else to two decimals ("412.33")."""
    return f"{value:,.0f}" if float(value).is_integer() else f"{value:,.2f}"


def _band(f) -> str:
    """A count of a step's work past its band: "compiled step runs 412 GPU kernels, baseline 380 (+8.4 %, ...)";
    where the baseline's runs spanned a range, "baseline 380-390 over its runs" and the change from 390."""
    count, side = COUNT_OF[f.metric]
    change = "from none" if f.change == float("inf") else f"{f.change:+.1%}"
    # Where the baseline's runs (A's processes) disagreed, the count was judged from the nearer end of their range
    was = "-".join(_per_step(v) for v in f.spanned) if f.spanned else _per_step(f.baseline)
    if f.sides == AB:
        was = f"{was} in A" + (" over its processes" if f.spanned else "")
    else:
        was = f"baseline {was}" + (" over its runs" if f.spanned else "")
    now = " in B" if f.sides == AB else ""
    return (
        f"{side} step {count.verb} {_per_step(f.current)} {count.label}{now}, {was} ({change}, past the "
        f"±{f.threshold:.1%} band){_refresh(f)}"
    )


def _relative(f) -> str:
    return f"{f.metric} {f.baseline:.4g} -> {f.current:.4g} ({f.change:+.1%}, threshold {f.threshold:.0%}){_refresh(f)}"


def _numerics(f) -> str:
    if f.loss:
        return f"numerics {f.baseline} -> fail{f' (worst: {f.note})' if f.note else ''}"
    return f"numerics fail -> pass{_refresh(f)}"


def _status(f) -> str:
    was, now = ("in A", "in B") if f.sides == AB else ("in the baseline", "now")
    if f.loss:
        return f"ok {was}, {f.current} {now}: {f.note or 'no reason given'}"
    return f"{f.baseline} {was}, ok {now}{_refresh(f)}"


FORMS = {
    "ratio": _timed,
    "host": _timed,
    "step": _timed,
    "missing": _missing,
    "count": _count,
    "band": _band,
    "relative": _relative,
    "numerics": _numerics,
    "status": _status,
}


# ---------------------------------------------------------------------------------------------- advisories


def _foreign_cpu(a) -> str:
    busy = f" ({100 * a.busy:.0f} % GPU-busy)" if a.busy is not None else ""
    return f"; advisory only: host-bound{busy} and measured on {a.now}, while the baseline ran on {', '.join(a.was)}"


def _changed_batch(a) -> str:
    return f"; advisory only: batch {a.was} in the baseline, {a.now} now{REFRESH_TAIL}"


ADVISORIES = {"foreign_cpu": _foreign_cpu, "changed_batch": _changed_batch}


def ab_words(message: str) -> str:
    """A gate sentence reworded for an A/B run, for text that is all a caller holds (the A/B verdict words its
    own findings through `finding_text`): "the baseline" is A, "now" is B, and there is no baseline to refresh."""
    for gate_words, ab in (
        (REFRESH_TAIL, ""),
        ("in the baseline", "in A"),
        (" now: ", " in B: "),
        (", ok now", ", ok in B"),
    ):
        message = message.replace(gate_words, ab)
    return message
