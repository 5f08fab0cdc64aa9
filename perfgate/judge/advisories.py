"""When a finding only advises: it is reported and never fails the gate, nor is it measured again. The gate
(perfgate.judge.gate) passes each rule's finding through both: a wall finding on a host-bound cell measured on a host
CPU the baseline never ran on (docs/gate-power.md says why), and a figure that scales with the batch of a cell whose
batch changed. Imports no torch.
"""

from __future__ import annotations

from dataclasses import replace

from perfgate.judge.finding import ADVISORY, IMPROVEMENT, REGRESSION, Advisory, Finding
from perfgate.judge.rules import CountRule, NumericsRule, StatusRule


def foreign_cpu_advisory(rule, finding: Finding, cur: dict, host_cpus) -> Finding:
    """The finding as the gate should count it: the wall rule's finding on a host-bound cell measured on a
    host CPU the baseline never ran on becomes ADVISORY (docs/gate-power.md says why); anything else as is."""
    cpu = (cur.get("env") or {}).get("cpu_model")
    if (
        not getattr(rule, "follows_host_cpu", False)
        or finding.kind not in (REGRESSION, IMPROVEMENT)
        or finding.current is None
        or not cpu
        or not host_cpus
        or cpu in host_cpus
        or cur.get("bound") != "host"
    ):
        return finding
    why = Advisory("foreign_cpu", tuple(host_cpus), cpu, cur.get("busy_compiled"))
    return replace(finding, kind=ADVISORY, advisories=(*finding.advisories, why))


def changed_batch_advisory(rule, finding: Finding, base: dict, cur: dict) -> Finding:
    """The finding as the gate should count it: a figure that scales with the batch (a speedup, host time,
    memory, compile time) of a cell whose batch differs from the baseline's is ADVISORY, since the zoo
    changed the cell rather than the code changing its speed. Counts, numerics and status judge as usual.
    Either batch unknown (records before the field): as is."""
    was, now = base.get("batch"), cur.get("batch")
    if (
        isinstance(rule, (CountRule, NumericsRule, StatusRule))
        or finding.kind not in (REGRESSION, IMPROVEMENT)
        or was is None
        or now is None
        or was == now
    ):
        return finding
    return replace(finding, kind=ADVISORY, advisories=(*finding.advisories, Advisory("changed_batch", was, now)))
