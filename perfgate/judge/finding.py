"""What a rule found on one cell, as data: a Finding, its kinds (REGRESSION, IMPROVEMENT, ADVISORY), what it
compares (GATE: a baseline with now; AB: side A with side B) and why it only advises (Advisory). The rules
(perfgate.judge.rules) make findings, perfgate.judge.advisories turns some into advisories, and
perfgate.render.wording words them: a finding carries the figures a rule judged by, never a sentence. Imports no
torch.
"""

from __future__ import annotations

from dataclasses import dataclass

REGRESSION = "regression"
IMPROVEMENT = "improvement"
ADVISORY = "advisory"  # reported, never fails the gate, never re-measured
GATE, AB = "gate", "ab"  # what a finding compares: a baseline with now, or side A with side B


@dataclass(frozen=True)
class Advisory:
    """Why a finding only advises: `why` is foreign_cpu (`now` the run's host CPU, `was` the baseline's, `busy`
    the compiled step's busy fraction of the GPU) or changed_batch (`was`, `now`: the baseline's batch and
    this run's)."""

    why: str
    was: object
    now: object
    busy: float | None = None


@dataclass(frozen=True)
class Finding:
    """What one rule found on one cell, as data (perfgate.render.wording words it). `form` names the rule's
    terms: ratio (a speedup), host (compiled host time relative to eager's), step (ms per step), missing (a
    clock lacking now), count, relative, numerics, status. For a ratio, host or step finding `change` and
    `threshold` (the line crossed) are in the rule's terms; `lo`, `hi` bound the current ratio (gate) or the
    change (A/B, with Student's t on `df` and the sides' `processes`)."""

    cell: str
    metric: str
    kind: str  # REGRESSION | IMPROVEMENT | ADVISORY
    baseline: object  # the baseline's value (number or verdict); side A's in an A/B run
    current: object
    threshold: float | None  # fraction the rule used (effective, for the ratio rules); None for exact
    # rules and for a clock lacking now
    form: str = ""
    loss: bool = True  # the rule saw a loss (a regression, before any advisory)
    sides: str = GATE  # GATE | AB
    clock: str = ""  # the ratio rule's clock: "device"
    label: str = ""  # the ratio rule's figure: "device speedup", "eager ms per step"
    change: float | None = None
    lo: float | None = None
    hi: float | None = None
    sds: float | None = None  # gate: the drop in sds of noise (inf where the noise is 0)
    sd: float | None = None  # gate: the noise sd of the log drop, and whether the baseline knew its
    noise_known: bool = True  # run-to-run noise
    host_ms: tuple = ()  # host form: (eager, compiled) host ms now, and in the baseline
    note: str = ""  # why a clock is missing; a status's reason; numerics' worst tensor
    spanned: tuple = ()  # band form: (least, most) of a count the baseline's runs (A's processes) disagreed on
    schema: int | None = None  # missing form: the record's schema where older than RECORD_SCHEMA (1: none)
    confidence: float | None = None  # A/B: the interval's confidence
    t: float | None = None  # A/B: Student's t
    df: int | None = None
    processes: tuple = ()  # A/B: (n_a, n_b)
    advisories: tuple[Advisory, ...] = ()

    @property
    def message(self) -> str:
        """The finding in words, for a caller that holds only the finding; reports call the wording directly."""
        from perfgate.render.wording import finding_text  # render words judge's findings (docs/architecture.md)

        return finding_text(self)


def rule_finding(rule, base: dict, cur: dict, kind: str, threshold, form: str, **figures) -> Finding:
    """The finding of `rule` on a cell: the metric's value in the baseline cell and now, with the figures it
    judged by."""
    return Finding(
        cur["cell"],
        rule.metric,
        kind,
        base.get(rule.metric),
        cur.get(rule.metric),
        threshold,
        form=form,
        loss=kind == REGRESSION,
        **figures,
    )
