"""docs/glossary.md's words, spot-checked in the code: a word the glossary gives one meaning names nothing else
there, and the names it retired stay retired (issue 55). Reads source only."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

PERFGATE = Path(__file__).resolve().parents[1] / "perfgate"
SOURCES = sorted(PERFGATE.rglob("*.py"))


def module_assignments(name: str) -> list[str]:
    """The modules (paths under perfgate/) that bind `name` at their top level."""
    found = []
    for path in SOURCES:
        for node in ast.parse(path.read_text()).body:
            targets = node.targets if isinstance(node, ast.Assign) else [getattr(node, "target", None)]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                found.append(str(path.relative_to(PERFGATE)))
    return found


def test_device_is_the_clock_alone():
    """ "clock": DEVICE is the device clock (perfgate.core.clocks); triage's tuple of GPU-work ratios was
    named so too."""
    assert module_assignments("DEVICE") == ["core/clocks.py"]


@pytest.mark.parametrize(
    "retired, now",
    [
        (r"\bpeak_tflops\b|\bPEAK_TFLOPS\b|\bpeak_key\b", "'peak' is GPU memory: the TFLOP/s table is the datasheet's"),
        (r"perfgate\.measure\.peaks\b", "measure/datasheet.py"),
        (r"^def plan\(processes", "'plan' is a run's costs and dealing: A/B's order of processes is process_turns"),
    ],
)
def test_a_retired_name_is_not_used(retired, now):
    users = [str(p.relative_to(PERFGATE)) for p in SOURCES if re.search(retired, p.read_text(), re.MULTILINE)]
    assert not users, f"{retired} in {users}: {now}"
    assert not (PERFGATE / "measure" / "peaks.py").exists()
