"""perfgate.render.wording: the judge's findings are data, and their words live in render alone."""

from __future__ import annotations

import ast
from dataclasses import fields
from pathlib import Path

import pytest

from perfgate.ab import process_rules, process_verdict
from perfgate.ab.process_rows import Process
from perfgate.ab.process_verdict import judge_ab
from perfgate.judge import advisories, rules
from perfgate.judge import finding as judge_finding
from perfgate.judge.finding import Finding
from perfgate.judge.rules import SpeedupRule
from perfgate.render import wording

import synthetic as syn

# Phrases of the findings' sentences: none may be spelled in the judge's rule modules again.
PHRASES = (
    "noise sds",
    "advisory only",
    "refresh the baseline",
    "clock missing now",
    "vs baseline",
    "processes), past",
    "in the baseline, ",
    " -> fail",
    "drop' if",
    "GPU-busy",
)


def test_the_wordings_names_are_the_judges():
    assert wording.AB == judge_finding.AB


@pytest.mark.parametrize("module", [judge_finding, advisories], ids=["finding", "advisories"])
def test_the_finding_and_its_advisories_spell_no_sentence(module):
    """Finding and the advisories were rules.py's until it was split: no sentence moved out with them."""
    assert [p for p in PHRASES if p in Path(module.__file__).read_text()] == []


@pytest.mark.parametrize(
    "module", [rules, process_rules, process_verdict], ids=["rules", "process_rules", "process_verdict"]
)
def test_the_rule_modules_build_no_finding_sentence(module):
    source = Path(module.__file__).read_text()
    assert [p for p in PHRASES if p in source] == []
    rule_classes = [c for c in vars(module).values() if isinstance(c, type) and hasattr(c, "check")]
    assert rule_classes and not [c.__name__ for c in rule_classes if hasattr(c, "describe") or hasattr(c, "line_text")]


@pytest.mark.parametrize("module", [rules, judge_finding, advisories], ids=["rules", "finding", "advisories"])
def test_rules_fstrings_are_names_not_sentences(module):
    """Field keys (f"{m}_lo") and labels ("device speedup") only: a sentence has more than one literal word."""
    tree = ast.parse(Path(module.__file__).read_text())
    literal = [
        "".join(v.value for v in n.values if isinstance(v, ast.Constant))
        for n in ast.walk(tree)
        if isinstance(n, ast.JoinedStr)
    ]
    assert [text for text in literal if len(text.split()) > 1] == []


def test_a_finding_has_no_message_field_but_reads_as_words():
    assert "message" not in {f.name for f in fields(Finding)}
    base = {"cell": "c", "status": "ok", "speedup": 2.0, "speedup_lo": 1.98, "speedup_hi": 2.02}
    cur = {**base, "speedup": 1.8, "speedup_lo": 1.78, "speedup_hi": 1.82}
    finding = SpeedupRule().check(base, cur)
    assert (finding.form, finding.change, finding.lo, finding.hi) == ("ratio", pytest.approx(-0.1), 1.78, 1.82)
    assert finding.sd > 0 and finding.sds > 2 and finding.loss
    assert finding.message == wording.finding_text(finding)
    assert finding.message.startswith("wall speedup 1.800x [1.780, 1.820] vs baseline 2.000x (-10.0%); ")


def test_an_ab_finding_is_worded_for_the_sides_not_rewritten():
    gpt2 = syn.cells(models=["gpt2"], phases=["train"])

    def side(label, **kwargs):
        return [
            Process(label, rep, tuple(syn.run(10 * rep + (label == "B"), cell_list=gpt2, **kwargs)), cold=rep == 1)
            for rep in range(1, 4)
        ]

    report = judge_ab(side("A", graph_breaks=2) + side("B"))
    (finding,) = [f for f in report.improvements if f.metric == "graph_breaks"]
    assert finding.sides == judge_finding.AB and wording.finding_text(finding) == "graph breaks 2 -> 0"
    as_json = wording.finding_json(finding)
    assert list(as_json) == ["cell", "metric", "kind", "baseline", "current", "threshold", "message"]
    assert as_json["message"] == "graph breaks 2 -> 0"
