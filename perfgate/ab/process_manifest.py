"""An A/B run's manifest.json: its schema, written atomically, read back and checked (manifest_problem,
resume_problem); a new run's manifest prepared from both sides, checked before any cell runs; and the
processes planned in turn (A-1, B-1, A-2, ...). Imports no torch; perfgate.ab.process_run runs what it lists.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import tempfile
from pathlib import Path
from typing import Sequence

from perfgate.ab import process_env
from perfgate.ab.process_env import ABEnvironment, ABError
from perfgate.ab.process_rows import AB_SIDES

MANIFEST_SCHEMA = 1
MIN_PROCESSES = 2  # a side's spread between processes needs 2 at least
COMPLETE = ("done", "crashed")


def now_text() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def save_manifest(out: Path, manifest: dict, name: str = "manifest.json") -> None:
    """Atomically (temp file, fsync, rename): a kill mid-write leaves the previous manifest."""
    out.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".manifest.", suffix=".tmp", dir=out)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=2, sort_keys=True)
        fh.write("\n")
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, out / name)


def load_manifest(out: Path) -> dict:
    path = out / "manifest.json"
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as err:  # ValueError: not JSON, or not UTF-8 text
        raise ABError(
            f"{path}: not an A/B run's manifest ({err}); --resume wants the directory of a run that perfgate ab started"
        ) from None
    problem = manifest_problem(manifest)
    if problem:
        raise ABError(
            f"{path}: not an A/B run's manifest: {problem}; --resume and --judge want the directory "
            f"of a run that perfgate ab started"
        )
    return manifest


def manifest_problem(manifest) -> str | None:
    """What makes a manifest unusable, or None: its shape, and each process's files, which must lie inside
    the run's directory (a crafted `"results": "../../x"` would be read, and under --resume written)."""
    if not isinstance(manifest, dict):
        return f"a JSON object expected, not {type(manifest).__name__}"
    if manifest.get("schema") != MANIFEST_SCHEMA:
        return f"schema {manifest.get('schema')!r}, expected {MANIFEST_SCHEMA}"
    sides, runs = manifest.get("sides"), manifest.get("runs")
    if not (
        isinstance(sides, dict)
        and all(isinstance(sides.get(s), dict) and isinstance(sides[s].get("python"), str) for s in AB_SIDES)
    ):
        return f"'sides' must hold {' and '.join(AB_SIDES)}, each with its 'python'"
    for label in AB_SIDES:
        side = sides[label]
        if not isinstance(side.get("env") or {}, dict) or not isinstance(side.get("args") or [], list):
            return f"side {label}: 'env' (an object) and 'args' (a list) expected"
    if not (
        isinstance(runs, list)
        and isinstance(manifest.get("processes"), int)
        and isinstance(manifest.get("common_args"), list)
    ):
        return "'runs' (a list), 'processes' (a number) and 'common_args' (a list) expected"
    if not all(isinstance(arg, str) for arg in manifest["common_args"]):
        return "'common_args' must be strings, pytest's args"
    names = [run.get("name") for run in runs if isinstance(run, dict)]
    if len(names) != len(set(names)):
        return f"process {next(n for n in names if names.count(n) > 1)!r:.40} is listed twice"
    for run in runs:
        if not (
            isinstance(run, dict)
            and run.get("side") in AB_SIDES
            and isinstance(run.get("rep"), int)
            and isinstance(run.get("name"), str)
            and isinstance(run.get("state"), str)
        ):
            return f"process {run!r:.80}: needs a name, a side ({', '.join(AB_SIDES)}), a rep number and a state"
        for key in ("results", "log"):
            if not _inside_run(run.get(key)):
                return f"process {run['name']!r:.40}: {key} {run.get(key)!r:.80} is not a relative path inside the run"
    return None


def resume_problem(manifest: dict) -> str | None:
    """What keeps a well-formed manifest's run from going on here: a side whose interpreter or checkout is gone
    (a run moved to another machine can still be judged, not resumed)."""
    for label in AB_SIDES:
        side = manifest["sides"][label]
        for key in ("root", "import_root"):
            if not isinstance(side.get(key), str) or not Path(side[key]).is_dir():
                return f"side {label}: '{key}' {side.get(key)!r:.80} is no directory here"
        if not Path(side["python"]).is_file():
            return f"side {label}: its interpreter {side['python']!r:.80} is gone"
    return None


def _inside_run(value) -> bool:
    return isinstance(value, str) and bool(value) and not Path(value).is_absolute() and ".." not in Path(value).parts


def check_processes(processes: int | None) -> None:
    """Refuse fewer than MIN_PROCESSES a side (None: the default); 0 once ran the default 3 and passed."""
    if processes is not None and processes < MIN_PROCESSES:
        raise ABError(
            f"--processes {processes}: a side needs {MIN_PROCESSES} processes at least (3 or more "
            f"advised: docs/ab.md says what each number can detect)"
        )


def process_turns(processes: int, runs: Sequence[dict] = ()) -> list[dict]:
    """The processes in order, A-1, B-1, A-2, B-2, ...: the existing `runs` kept, more appended up to
    `processes` a side."""
    check_processes(processes)
    planned = list(runs)
    have = {run["name"] for run in planned}
    for rep in range(1, processes + 1):
        for side in AB_SIDES:
            name = f"{side}-{rep}"
            if name not in have:
                planned.append(
                    {
                        "name": name,
                        "side": side,
                        "rep": rep,
                        "state": "pending",
                        "rc": None,
                        "cold": None,
                        "started": None,
                        "finished": None,
                        "results": f"results/{name}.jsonl",
                        "log": f"logs/{name}.log",
                    }
                )
    return planned


# ---------------------------------------------------------------------------------------------- set-up


def prepare(
    out: Path, sides: Sequence[ABEnvironment], common: Sequence[str], processes: int, cwd: Path, precompile: int = 0
) -> dict:
    """Check both sides and write a new run's manifest; ABError on anything an A/B run cannot use, before
    any cell runs. The cheap checks first (options, interpreters, revisions), then what takes seconds:
    importing torch in each interpreter and collecting the tests, once where both sides would ask alike.
    A refused run removes the worktrees it added (git would keep them registered)."""
    if (out / "manifest.json").exists():
        raise ABError(
            f"{out} holds an A/B run already: continue it with perfgate ab --resume {out}, or give another --out"
        )
    process_env.check_args(common, "the common pytest args")
    for side in sides:
        process_env.check_args(side.args, f"--{side.label.lower()}-args")
        process_env.check_precompile(precompile, [*common, *side.args])
    runs = process_turns(processes)
    for side in sides:
        process_env.check_python(side)
    repo = process_env.repo_root(cwd)
    shas = {side.label: process_env.resolve_rev(repo, side) if side.rev else None for side in sides}
    worktrees = {label: out.resolve() / "worktrees" / label for label, sha in shas.items() if sha}
    try:
        entries = _set_up(sides, common, repo, cwd, shas, worktrees)
    except ABError:
        for path in worktrees.values():
            process_env.remove_worktree(repo, path)
        raise
    manifest = {
        "schema": MANIFEST_SCHEMA,
        "created": now_text(),
        "cwd": str(cwd),
        "common_args": list(common),
        "sides": entries,
        "processes": processes,
        "precompile": precompile,
        "runs": runs,
    }
    save_manifest(out, manifest)
    return manifest


def _set_up(
    sides: Sequence[ABEnvironment], common: Sequence[str], repo: Path | None, cwd: Path, shas: dict, worktrees: dict
) -> dict[str, dict]:
    """Each side's manifest entry: its versions (probed), its checkout, the tests it selects (which must be
    the same on both sides)."""
    probed, collected, entries = {}, {}, {}
    for side in sides:
        key = (side.python, side.env)
        probed[key] = probed.get(key) or process_env.probe(side)
        versions = {name: value for name, value in probed[key].items() if name != "cuda"}
        sha, worktree = shas[side.label], worktrees.get(side.label)
        if sha:
            process_env.checkout(repo, sha, worktree)
        root, import_root = process_env.side_root(repo, cwd, worktree), worktree or repo or cwd
        same = (side.python, side.env, sha, side.args)
        collected[same] = collected.get(same) or process_env.collect(side, root, import_root, common)
        process_env.check_runnable(side, probed[key].get("cuda"), collected[same])
        entries[side.label] = {
            **side.to_json(),
            "sha": sha,
            "root": str(root),
            "import_root": str(import_root),
            "versions": versions,
            "tests": collected[same],
        }
    process_env.check_same_tests({label: entry["tests"] for label, entry in entries.items()})
    for entry in entries.values():
        entry["tests"] = len(entry["tests"])
    return entries
