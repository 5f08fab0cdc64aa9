"""`perfgate bisect`: the first bad step of an ordered range (this repository's commits, or environments:
interpreters, directories put first on PYTHONPATH, pip requirement sets), each probe an A/B run
(perfgate.ab.process_run) of the range's good end (A) against the step (B), read by perfgate.ab.bisect_verdict.
Imports no torch. Everything lands in one directory as it happens, so `--resume DIR` carries on:

    bisect.json             the steps, the rule, the pytest args, each probe's processes and verdict (atomic)
    probes/07-1a2b3c4d/     one probe: an A/B run's directory (manifest, results, logs, caches, report)
    envs/03/                a pip step's packages (pip install --target), made when that step is probed
    report.md, report.json  the bisection's report
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shlex
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from perfgate.ab import process_env, process_manifest, process_run
from perfgate.ab.bisect_verdict import (
    PAIRED,
    PROCESSES,
    UNSURE,
    BadRule,
    BisectError,
    cell_summary,
    classify,
    manifest_problem,
    probes_left,
    search,
)
from perfgate.ab.process_env import ABEnvironment, ABError
from perfgate.core.text import parse_json

MANIFEST_SCHEMA = 1
MORE_PROCESSES = 2  # an unsure probe gets this many more processes a side, up to --max-processes
PIP_TIMEOUT_S = 1800  # a CUDA torch wheel is ~1 GB


@dataclass(frozen=True)
class Step:
    """One step of the range: what side B runs when it is probed (side A when it is the good end)."""

    name: str  # short, for a directory: "1a2b3c4d" or "03"
    label: str  # for a reader: "1a2b3c4d fix the loss" or a path
    python: str
    rev: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    pip: str | None = None  # a requirement set installed into env's PYTHONPATH dir

    def side(self, label: str) -> ABEnvironment:
        return ABEnvironment(label, self.python, self.rev, self.env)

    def to_json(self) -> dict:
        return {
            "name": self.name,
            "label": self.label,
            "python": self.python,
            "rev": self.rev,
            "env": dict(self.env),
            "pip": self.pip,
        }

    @classmethod
    def from_json(cls, data: dict) -> "Step":
        return cls(
            data["name"],
            data["label"],
            data["python"],
            data.get("rev"),
            tuple((data.get("env") or {}).items()),
            data.get("pip"),
        )


# ---------------------------------------------------------------------------------------------- the range


def _git(repo: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True)
    if proc.returncode != 0:
        raise BisectError(f"git {' '.join(args)}: {proc.stderr.strip() or 'failed'}")
    return proc.stdout.strip()


def commit_steps(cwd: Path, good: str, bad: str, python: str) -> list[Step]:
    """GOOD and every first-parent commit after it up to BAD, oldest first (git rev-list)."""
    repo = process_env.repo_root(cwd)
    if repo is None:
        raise BisectError(f"--good/--bad name commits, but {cwd} is not in a git checkout of this repository")
    shas = []
    for flag, rev in (("--good", good), ("--bad", bad)):
        proc = subprocess.run(
            ["git", "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"], cwd=repo, capture_output=True, text=True
        )
        if proc.returncode != 0:
            kind = subprocess.run(["git", "cat-file", "-t", rev], cwd=repo, capture_output=True, text=True)
            if kind.returncode == 0:  # it exists: "no such commit" sent the reader looking for a missing one
                raise BisectError(f"{flag} {rev!r} names a {kind.stdout.strip()}, not a commit: name a commit")
            raise BisectError(
                f"{flag} {rev!r}: no such commit in {repo} (git fetch it, or name a branch, tag or commit that exists)"
            )
        shas.append(proc.stdout.strip())
    if subprocess.run(["git", "merge-base", "--is-ancestor", *shas], cwd=repo).returncode != 0:
        raise BisectError(f"--good {good} is not an ancestor of --bad {bad}: the range must run forward in history")
    after = _git(repo, "rev-list", "--first-parent", "--reverse", f"{shas[0]}..{shas[1]}").split()
    steps = []
    for sha in [shas[0], *after]:
        label = _git(repo, "log", "-1", "--format=%h %s", sha)
        steps.append(Step(sha[:10], label, python, rev=sha))
    return steps


def env_steps(pythons: Sequence[str], paths: Sequence[str], pips: Sequence[str], python: str, out: Path) -> list[Step]:
    """Steps of one kind, in the order given: interpreters, PYTHONPATH directories or pip requirement sets."""
    kinds = [k for k, v in (("--step-python", pythons), ("--step-path", paths), ("--step-pip", pips)) if v]
    for kind, values in (("--step-python", pythons), ("--step-path", paths), ("--step-pip", pips)):
        if any(not str(v).strip() for v in values or ()):  # an unset shell variable: two blank, identical steps
            raise BisectError(f"{kind} {''!r}: a step is empty; give each step an interpreter, folder or requirement")
    if not kinds:
        raise BisectError(
            "nothing to bisect: give --good and --bad revisions, or steps of one kind "
            "(--step-python, --step-path or --step-pip)"
        )
    if len(kinds) != 1:
        raise BisectError(f"give one kind of step, not {' and '.join(kinds)}: a range is ordered along one thing")
    steps = []
    for i, py in enumerate(pythons):
        if not Path(py).is_file() or not os.access(py, os.X_OK):
            raise BisectError(f"--step-python {py}: no such interpreter (a venv's bin/python)")
        steps.append(Step(f"{i:02d}", py, str(Path(py).absolute())))
    for i, path in enumerate(paths):
        if not Path(path).is_dir():
            raise BisectError(f"--step-path {path}: no such directory (e.g. one made by pip install --target)")
        steps.append(Step(f"{i:02d}", path, python, env=(("PYTHONPATH", str(Path(path).resolve())),)))
    for i, reqs in enumerate(pips):
        target = (out / "envs" / f"{i:02d}").resolve()
        steps.append(Step(f"{i:02d}", reqs, python, env=(("PYTHONPATH", str(target)),), pip=reqs))
    return steps


def steps_from(
    cwd: Path,
    out: Path,
    python: str,
    good: str | None,
    bad: str | None,
    pythons: Sequence[str],
    paths: Sequence[str],
    pips: Sequence[str],
) -> list[Step]:
    """The range the command line names: commits (--good/--bad) or environments of one kind."""
    if bool(good) != bool(bad):
        raise BisectError("--good and --bad go together: the last good and the first known bad commit")
    if good and (pythons or paths or pips):
        raise BisectError(
            "give commits (--good/--bad) or environments (--step-python, --step-path, --step-pip), "
            "not both: a range is ordered along one thing"
        )
    return commit_steps(cwd, good, bad, python) if good else env_steps(pythons, paths, pips, python, out)


def install(step: Step, pip_args: Sequence[str], progress: Callable[[str], None]) -> None:
    """A pip step's packages into its directory, once (a marker file says it finished)."""
    target = Path(dict(step.env)["PYTHONPATH"])
    if (target / ".perfgate-installed").exists():
        return
    command = [
        step.python,
        "-m",
        "pip",
        "install",
        "--no-deps",
        "--upgrade",
        "--target",
        str(target),
        *pip_args,
        *shlex.split(step.pip or ""),
    ]
    progress(f"installing {step.label}: {shlex.join(command)}")
    proc = subprocess.run(command, capture_output=True, text=True, timeout=PIP_TIMEOUT_S)
    if proc.returncode != 0:
        raise ABError(f"pip could not install {step.label!r}: {(proc.stderr.strip().splitlines() or ['?'])[-1]}")
    (target / ".perfgate-installed").write_text(step.pip or "", encoding="utf-8")


# ---------------------------------------------------------------------------------------------- manifest


def save(out: Path, manifest: dict) -> None:
    process_manifest.save_manifest(out, manifest, "bisect.json")  # atomic: a kill mid-write keeps the previous one


def load(out: Path) -> dict:
    """The bisection's manifest, its shape checked: a hand-edited or corrupt bisect.json (`[]`, binary bytes,
    `{"schema": 1}`, a step with no label) is BisectError naming the file and field, where it was a KeyError or
    AttributeError mid-run (exit 3)."""
    path = out / "bisect.json"
    try:
        manifest = parse_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # ValueError: bad JSON, and bytes that are no UTF-8
        raise BisectError(
            f"{path}: not a bisection's manifest ({err}); --resume wants a directory that perfgate bisect started"
        ) from None
    if not isinstance(manifest, dict) or manifest.get("schema") != MANIFEST_SCHEMA:
        found = manifest.get("schema") if isinstance(manifest, dict) else type(manifest).__name__
        raise BisectError(f"{path}: manifest schema {found!r}, expected {MANIFEST_SCHEMA}")
    problem = manifest_problem(manifest, process_manifest.MIN_PROCESSES)
    if problem:
        raise BisectError(f"{path}: not a bisection's manifest: {problem}; it was edited, or written by another tool")
    return manifest


def new_manifest(
    out: Path,
    steps: Sequence[Step],
    common: Sequence[str],
    rule: BadRule,
    processes: int,
    max_processes: int,
    pip_args: Sequence[str],
    cwd: Path,
    engine: str = PROCESSES,
) -> dict:
    if (out / "bisect.json").exists():
        raise BisectError(
            f"{out} holds a bisection already: continue it with perfgate bisect --resume {out}, or give another --out"
        )
    if engine == PAIRED and rule.metric != "gate":
        raise BisectError(
            f"--rule {rule.text()}: a paired probe judges by the PR gate's rules (docs/gate.md); a rule of one "
            "metric needs the process engine: give --processes N"
        )
    if processes < process_manifest.MIN_PROCESSES:
        raise BisectError(
            f"--processes {processes}: a probe needs {process_manifest.MIN_PROCESSES} processes a side at "
            f"least, 3 for a verdict that matters (docs/ab.md)"
        )
    if max_processes < processes:
        raise BisectError(f"--max-processes {max_processes} is below --processes {processes}")
    if len(steps) < 2:
        raise BisectError(f"the range holds {len(steps)} step(s): it needs a good and a bad end")
    process_env.check_args(common, "the pytest args")
    return {
        "schema": MANIFEST_SCHEMA,
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "cwd": str(cwd),
        "engine": engine,
        "common_args": list(common),
        "rule": rule.text(),
        "processes": processes,
        "max_processes": max_processes,
        "pip_args": list(pip_args),
        "steps": [s.to_json() for s in steps],
        "probes": {},
    }


def settled(manifest: dict) -> dict[int, str]:
    return {int(i): p["verdict"] for i, p in manifest["probes"].items() if p.get("verdict")}


def process_seconds(manifest: dict, out: Path) -> list[float]:
    """How long each finished process of every probe took (s): the measured cost a process."""
    seconds = []
    for probe in manifest["probes"].values():
        path = out / probe["dir"] / "manifest.json"
        runs = json.loads(path.read_text(encoding="utf-8"))["runs"] if path.exists() else []
        for run in runs:
            if run["state"] in process_manifest.COMPLETE and run["started"] and run["finished"]:
                start, end = (_dt.datetime.fromisoformat(run[k]) for k in ("started", "finished"))
                seconds.append((end - start).total_seconds())
    return seconds


def cost_line(manifest: dict, out: Path) -> str:
    left = probes_left(len(manifest["steps"]), settled(manifest))
    if manifest.get("engine") == PAIRED:
        return f"cost: at most {left} probe(s) left, each one pytest run with both sides alive (paired)"
    per_probe = 2 * manifest["processes"]
    seconds = process_seconds(manifest, out)
    text = (
        f"cost: at most {left} probe(s) left x {per_probe} processes (up to {2 * manifest['max_processes']} "
        f"where a probe is unsure) = {left * per_probe} processes"
    )
    if not seconds:
        return text + "; a process's cost is measured by the first one"
    mean = sum(seconds) / len(seconds)
    return (
        text + f" x {mean:.0f} s a process (mean of {len(seconds)} measured) = ~{left * per_probe * mean / 60:.1f} "
        f"min; spent so far {sum(seconds) / 60:.1f} min"
    )


# ---------------------------------------------------------------------------------------------- probing


def probe(manifest: dict, out: Path, index: int, progress: Callable[[str], None]) -> None:
    """Probe one step (A = the good end, B = the step) until its verdict is settled: re-measured with more
    processes while unsure, up to --max-processes; kept unsure (a skip) past that."""
    steps = [Step.from_json(s) for s in manifest["steps"]]
    step, rule = steps[index], BadRule.parse(manifest["rule"])
    entry = manifest["probes"].setdefault(
        str(index), {"dir": f"probes/{index:02d}-{step.name}", "processes": manifest["processes"], "readings": []}
    )
    save(out, manifest)
    directory = out / entry["dir"]
    cwd = Path(manifest["cwd"])
    while True:
        started = (directory / "manifest.json").exists()
        progress(
            f"probe step {index} ({step.label}) against step 0, {entry['processes']} processes a side; "
            f"{cost_line(manifest, out)}"
        )
        try:
            for s in (steps[0], step):
                if s.pip:
                    install(s, manifest["pip_args"], progress)
            report = process_run.run_ab(
                directory,
                lambda m: progress(f"  {m}"),
                sides=[steps[0].side("A"), step.side("B")],
                common=manifest["common_args"],
                processes=entry["processes"],
                resume=started,
                cwd=cwd,
                rules=rule.rules(),
            )
        except ABError as err:
            if not manifest["probes"].keys() - {str(index)} and not started:
                raise BisectError(f"the range's ends cannot be compared: {err}") from None
            entry.update(verdict=UNSURE, why=f"cannot run: {err}")
            break
        from perfgate.ab import bisect_report, process_report

        process_report.write(report, directory)
        reading = classify(report, rule)
        why = bisect_report.reading_why(reading)
        entry["readings"].append({"processes": entry["processes"], "verdict": reading.verdict, "why": why})
        progress(f"step {index} reads {reading.verdict} at {entry['processes']} processes a side: {why}")
        if reading.verdict != UNSURE or entry["processes"] >= manifest["max_processes"]:
            entry.update(verdict=reading.verdict, why=why, cells=cell_summary(report, rule))
            break
        entry["processes"] = min(manifest["max_processes"], entry["processes"] + MORE_PROCESSES)
        save(out, manifest)
    save(out, manifest)
    repo = process_env.repo_root(cwd)
    for label in ("A", "B"):  # a settled probe's checkouts are not needed again (its sha is in bisect.json)
        process_env.remove_worktree(repo, (directory / "worktrees" / label).resolve())


def run_bisect(
    out: Path, progress: Callable[[str], None], *, manifest: dict | None = None, prober: Callable = probe
) -> dict:
    """Carry the bisection in `out` to its end (a new one: `manifest` from new_manifest); returns the manifest
    with its outcome. `prober` runs one probe: this module's `probe` (the process engine's), a paired
    bisection's perfgate.ab.bisect_paired.probe (the face chooses by the manifest's engine), or a test's fake."""
    if manifest is None:
        manifest = load(out)
    save(out, manifest)
    paired = manifest.get("engine") == PAIRED
    means = "a regression in the paired verdict" if paired else BadRule.parse(manifest["rule"]).describe()
    progress(
        f"{len(manifest['steps'])} steps, {manifest['steps'][0]['label']} (good) .. "
        f"{manifest['steps'][-1]['label']} (bad); bad means {means}"
    )
    progress(cost_line(manifest, out))
    while (state := search(len(manifest["steps"]), settled(manifest))).next is not None:
        prober(manifest, out, state.next, progress)
        save(out, manifest)
    manifest["outcome"] = {
        "outcome": state.outcome,
        "last_good": state.last_good,
        "first_bad": state.first_bad,
        "suspects": list(state.suspects),
    }
    save(out, manifest)
    return manifest
