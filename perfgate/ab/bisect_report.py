"""A bisection (perfgate.ab.bisect_run's manifest with its outcome) as Markdown for a PR comment or an issue, and
as JSON. Imports no torch. The Markdown leads with the answer (the first bad step and the last good one, no
bad step, or the steps it could not settle between), then the rule that defined "bad", every probe with
its verdict and, per cell, the rule's change with its 95 % interval and line, and the commands that
reproduce the final pair.
"""

from __future__ import annotations

import shlex
from pathlib import Path

from perfgate.ab.bisect_verdict import PAIRED, BadRule, ProbeReading
from perfgate.ab.process_report import escape, write_pair
from perfgate.core import exits
from perfgate.render.wording import finding_text

# A bisection's outcome as the gate's exit code: a bad step found is a regression, an unsettled range cannot say.
EXIT_CODES = {"found": exits.REGRESSION, "no_bad_step": exits.PASS, "unsettled": exits.UNUSABLE}


def reading_why(reading: ProbeReading) -> str:
    """Why a probe reads as it does: a bad probe's first regression (and how many more), else its reason."""
    if reading.finding is None:
        return reading.why
    more = f" (+{reading.more} more)" if reading.more else ""
    return f"{reading.finding.cell}: {finding_text(reading.finding)}{more}"


def ab_command(manifest: dict, a: int, b: int) -> str:
    """The `perfgate ab` command that measures step b (as B) against step a (as A): the pair to reproduce,
    with as many processes a side as the probes of either needed (an unsure one was measured again)."""
    words = ["perfgate", "ab"]
    for label, index in (("a", a), ("b", b)):
        step = manifest["steps"][index]
        words += [f"--{label}-python", step["python"]] + ([f"--{label}-rev", step["rev"]] if step.get("rev") else [])
        words += [w for key, value in (step.get("env") or {}).items() for w in (f"--{label}-env", f"{key}={value}")]
    if manifest.get("engine") == PAIRED:  # perfgate ab's default, the engine the probes ran on
        return shlex.join([*words, "--", *manifest["common_args"]])
    processes = max([manifest["processes"], *(manifest["probes"].get(str(i), {}).get("processes", 0) for i in (a, b))])
    return shlex.join([*words, "--processes", str(processes), "--", *manifest["common_args"]])


def _label(manifest: dict, index: int | None) -> str:
    return "–" if index is None else f"step {index}: `{escape(manifest['steps'][index]['label'])}`"


def headline(manifest: dict) -> str:
    outcome = manifest["outcome"]
    kind = outcome["outcome"]
    if kind == "found":
        return (
            f"**perfgate bisect: first bad {_label(manifest, outcome['first_bad'])}**, last good "
            f"{_label(manifest, outcome['last_good'])}"
        )
    if kind == "no_bad_step":
        return (
            f"**perfgate bisect: no bad step**: the last step is not worse than the first by the rule "
            f"({len(manifest['steps'])} steps)"
        )
    suspects = ", ".join(str(i) for i in outcome["suspects"])
    budget = (
        "the paired engine's budget"
        if manifest.get("engine") == PAIRED
        else (f"{manifest['max_processes']} processes a side")
    )
    return (
        f"**perfgate bisect: unsettled**: the first bad step is one of steps {suspects} (after last good "
        f"{_label(manifest, outcome['last_good'])}); the probes there stayed unsure at {budget}"
    )


def _change(row: dict) -> str:
    if row.get("change") is None:
        return escape(row.get("note") or f"{row.get('a')} → {row.get('b')}")
    if row.get("a") is None:  # a paired rule: B's step time against A's, its interval and line
        return f"{row['change']:+.1%} [{row['lo']:+.1%}, {row['hi']:+.1%}] / line {row['line']:.1%}, {row['kind']}"
    star = "\\*" if row.get("noise_limited") else ""
    return (
        f"{row['a']:.4g} → {row['b']:.4g}, {row['change']:+.1%} [{row['lo']:+.1%}, {row['hi']:+.1%}] / "
        f"line {row['line']:.1%}{star}"
    )


def probe_table(manifest: dict) -> list[str]:
    lines = [
        "| step | what | verdict | processes a side | cell | rule's clock: A → B, change [95 %] / line |",
        "|---|---|---|---|---|---|",
    ]
    for index in sorted(map(int, manifest["probes"])):
        probe = manifest["probes"][str(index)]
        cells = probe.get("cells") or [{}]
        for n, row in enumerate(cells):
            verdict = probe.get("verdict") or "running"
            head = (
                (
                    f"| {index} | `{escape(manifest['steps'][index]['label'])}` | **{verdict}** | "
                    f"{probe.get('processes', 'paired')} |"
                )
                if n == 0
                else "| | | | |"
            )
            what = f"{escape(row['cell'])} ({escape(row['label'])})" if row else escape(probe.get("why") or "")
            lines.append(f"{head} {what} | {_change(row) if row else ''} |")
    return lines


def commands(manifest: dict, out: Path) -> list[str]:
    outcome = manifest["outcome"]
    lines = []
    if outcome["outcome"] == "found":
        lines += [
            "The final pair (last good as A, first bad as B) on one machine:",
            "",
            "```bash",
            ab_command(manifest, outcome["last_good"], outcome["first_bad"]),
            "```",
        ]
    probe = manifest["probes"].get(str(outcome.get("first_bad")))
    if probe and manifest.get("engine") == PAIRED:
        lines += ["", f"The probe that read it bad, its records and report: `{escape(str(out / probe['dir']))}`"]
    elif probe:
        lines += [
            "",
            f"The probe that read it bad (step 0 against it), judged again by the gate's own thresholds "
            f"or drawn as HTML: `perfgate ab --judge {escape(shlex.quote(str(out / probe['dir'])))} "
            f"--html report.html`",
        ]
    lines += ["", f"This bisection, carried on or re-read: `perfgate bisect --resume {escape(shlex.quote(str(out)))}`"]
    return lines


def _how(manifest: dict) -> str:
    if manifest.get("engine") == PAIRED:
        return "Each probe is `perfgate ab` paired: A = step 0 and B = the step alive in one run, rounds alternated."
    return (
        f"Each probe is `perfgate ab` with A = step 0 and B = the step, {manifest['processes']} processes a side "
        f"(up to {manifest['max_processes']} while unsure)."
    )


def _bad_means(manifest: dict, rule: BadRule) -> str:
    if manifest.get("engine") == PAIRED:
        return (
            "a regression in the paired verdict, the PR gate's (compiled wall 5 %, device 1 %, a count past its "
            "band; docs/gate.md); unsure where it is"
        )
    return f"`--rule {escape(rule.text())}`, {escape(rule.describe())}"


def markdown(manifest: dict, out: Path) -> str:
    rule = BadRule.parse(manifest["rule"])
    steps = manifest["steps"]
    lines = [
        headline(manifest),
        "",
        f"Range: {len(steps)} steps, {_label(manifest, 0)} (good) to {_label(manifest, len(steps) - 1)} "
        f"(bad). {_how(manifest)}",
        f"Bad means: {_bad_means(manifest, rule)}.",
        f"Pytest args: `{escape(shlex.join(manifest['common_args']))}`",
        "",
        *probe_table(manifest),
        "",
        *(
            []
            if manifest.get("engine") == PAIRED
            else ["\\* noise-limited: the line was wider than the rule's threshold.", ""]
        ),
        *commands(manifest, out),
    ]
    return "\n".join(lines) + "\n"


def to_json(manifest: dict, out: Path) -> dict:
    outcome = manifest["outcome"]
    pair = ab_command(manifest, outcome["last_good"], outcome["first_bad"]) if outcome["outcome"] == "found" else None
    return {
        "outcome": outcome,
        "exit_code": EXIT_CODES[outcome["outcome"]],
        "rule": manifest["rule"],
        "steps": manifest["steps"],
        "probes": manifest["probes"],
        "common_args": manifest["common_args"],
        "reproduce": pair,
        "dir": str(out),
    }


def write(manifest: dict, out: Path, markdown_path: str | None = None, json_path: str | None = None) -> str:
    text = markdown(manifest, out)
    write_pair(out, text, to_json(manifest, out), markdown_path, json_path)
    return text
