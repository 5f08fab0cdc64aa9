"""A bisection's probe on the paired engine, the PR gate's: one pytest run of this tree in which side A (the
range's good end) and side B (the probed step) each keep a warm worker on one GPU, their rounds alternated,
each cell judged B against A with three outcomes (perfgate.ab.duet). Its exit is the probe's reading: 0 good,
1 bad (a regression on a judged clock or count), 2 unsure. Imports no torch.

    probes/07-1a2b3c4d/results.jsonl    B's records, each with its paired summary (A's in results.against.jsonl)
    probes/07-1a2b3c4d/pytest.log       the run's output
    cache/                              one inductor cache for every probe: A's compiles are made once
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Callable

from perfgate.ab import process_env, sides
from perfgate.ab.bisect_run import BisectError, Step, install, save, settled
from perfgate.ab.bisect_verdict import BAD, GOOD, UNSURE, probes_left
from perfgate.ab.process_env import ABError
from perfgate.core.exits import PASS


def command(a: Step, b: Step, common: list[str], directory: Path, cache: Path) -> list[str]:
    """The probe's pytest: this interpreter and tree coordinate, A and B are sides of their own. Environment
    steps (no revision: an upgrade) judge eager's wall step too, as perfgate ab does."""
    words = [sys.executable, "-m", "pytest", *common, "--perf-results", str(directory / "results.jsonl")]
    words += ["--perf-report", str(directory)]
    if not any(w == "--perf-cache-dir" or w.startswith("--perf-cache-dir=") for w in common):
        words += ["--perf-cache-dir", str(cache)]
    for step, prefix in ((a, "--perf-against"), (b, "--perf-b")):
        rev_option = prefix if prefix == "--perf-against" else f"{prefix}-rev"
        words += [rev_option, step.rev] if step.rev else []
        words += [f"{prefix}-python", step.python]
        words += [w for key, value in step.env for w in (f"{prefix}-env", f"{key}={value}")]
    if a.rev is None and b.rev is None:
        words.append("--perf-judge-eager-wall")
    return words


def reading(directory: Path, code: int) -> tuple[str, str, list[dict], int]:
    """(verdict, why, per-cell rows, cells compared) of a finished probe, from B's records' paired outcomes:
    bad where one shows a regression, good only where every cell was compared and none is unsure or failed and
    the run judged (exit 0). A run that compared no cell (every one skipped: no CUDA for this interpreter's
    torch, say) is unsure, never good; so is a cell that failed, whatever the clocks read."""
    from perfgate.core.records_file import RecordFileError, load_records

    path = directory / "results.jsonl"
    try:
        records = load_records([path]) if path.exists() else []
    except RecordFileError as err:
        return UNSURE, f"its records cannot be read: {err}", [], 0
    rows = [row for record in records for row in _rows(record)]
    compared = [r for r in records if r.get("paired")]
    log = directory / "pytest.log"
    if not compared:
        return UNSURE, f"no cell was compared beside the good end (pytest exit {code}; its log: {log})", rows, 0
    outcomes = {r["paired"].get("outcome") for r in compared}
    failed = [r for r in records if r.get("status") != "ok"]
    if "regression" in outcomes:
        verdict = BAD
    elif "unsure" in outcomes or failed or code != PASS:
        verdict = UNSURE
    else:
        return GOOD, f"no regression in {len(compared)} cell(s), paired", rows, len(compared)
    named = [r for r in rows if r["kind"] == "regression"] if verdict == BAD else [r for r in rows if r["kind"] != "ok"]
    if not named:
        return verdict, f"pytest exit {code} with every compared cell ok (its log: {log})", rows, len(compared)
    first, more = named[0], f" (+{len(named) - 1} more)" if len(named) > 1 else ""
    why = f"{first['cell']}: {first['label']} {first['kind']}{_change(first)}{_note(first)}{more}"
    return verdict, why, rows, len(compared)


def _change(row: dict) -> str:
    return "" if row.get("change") is None else f", {row['change']:+.1%} [{row['lo']:+.1%}, {row['hi']:+.1%}]"


def _note(row: dict) -> str:
    return f": {row['note']}" if row.get("note") else ""


def _rows(record: dict) -> list[dict]:
    """Per cell, every judged rule and count of its paired summary, or why it has none."""
    summary = record.get("paired") or {}
    cell = record["cell"]
    if summary.get("error") or record.get("status") != "ok":
        why = summary.get("error") or record.get("reason") or "failed"
        return [{"cell": cell, "metric": "cell", "label": "cell", "kind": "unsure", "note": why}]
    rows = [
        {
            "cell": cell,
            "metric": rule["rule"],
            "label": f"{rule['side']} {rule['clock']} ms",
            "change": rule["change"],
            "lo": rule["lo"],
            "hi": rule["hi"],
            "line": rule["threshold"],
            "kind": rule["outcome"],
        }
        for rule in summary.get("rules", [])
        if rule["outcome"] != "shown"
    ]
    rows += [
        {
            "cell": cell,
            "metric": f"{count['side']}_{count['count']}",
            "label": f"{count['side']} {count['label']}",
            "kind": "regression",
            "note": f"{count['a']:g} → {count['b']:g} a step",
        }
        for count in summary.get("counts", [])
        if count["outcome"] == "regression"
    ]
    return rows


def probe(manifest: dict, out: Path, index: int, progress: Callable[[str], None]) -> None:
    """Probe one step beside the good end, paired; a probe stopped mid-run (its process killed) runs again
    whole on --resume. The range's ends must run: a first probe that cannot is the bisection's error."""
    steps = [Step.from_json(s) for s in manifest["steps"]]
    step = steps[index]
    entry = manifest["probes"].setdefault(str(index), {"dir": f"probes/{index:02d}-{step.name}", "readings": []})
    save(out, manifest)
    directory = out / entry["dir"]
    directory.mkdir(parents=True, exist_ok=True)
    for path in directory.glob("results*.jsonl"):
        path.unlink()
    left = probes_left(len(manifest["steps"]), settled(manifest))
    progress(f"probe step {index} ({step.label}) beside step 0, paired; at most {left} probe(s) left")
    first = not manifest["probes"].keys() - {str(index)}  # the range's ends must run
    try:
        for s in (steps[0], step):
            if s.pip:
                install(s, manifest["pip_args"], progress)
    except (ABError, subprocess.TimeoutExpired) as err:
        if first:
            raise BisectError(f"the range's ends cannot be compared: {err}") from None
        entry.update(verdict=UNSURE, why=f"cannot run: {err}")
        save(out, manifest)
        return
    words = command(steps[0], step, manifest["common_args"], directory, out / "cache")
    with (directory / "pytest.log").open("w", encoding="utf-8") as log:
        code = subprocess.run(words, cwd=manifest["cwd"], stdout=log, stderr=subprocess.STDOUT).returncode
    if code < 0:  # killed from outside (a signal): no reading; --resume probes the step again
        raise BisectError(
            f"step {index}'s probe was killed (signal {-code}); perfgate bisect --resume {out} carries on"
        )
    verdict, why, rows, compared = reading(directory, code)
    if first and not compared:
        tail = (directory / "pytest.log").read_text(errors="replace").strip().splitlines()[-3:]
        raise BisectError(f"the range's ends cannot be compared: {why}: {' / '.join(tail)}")
    entry["readings"].append({"verdict": verdict, "why": why})
    entry.update(verdict=verdict, why=why, cells=rows)
    progress(f"step {index} reads {verdict}: {why}")
    save(out, manifest)
    if step.rev and step.rev != steps[0].rev:  # a settled step's checkout (the plugin's, under .perfgate/) goes;
        repo = process_env.repo_root(Path(manifest["cwd"]))  # the good end's serves every probe and stays
        tree = Path(repo or ".") / ".perfgate" / f"against-{step.rev[:12]}"
        process_env.remove_worktree(repo, tree)
        sides.checkout_lock(tree).unlink(missing_ok=True)
