"""The two environments of an A/B run (`perfgate ab`): what each side is, and the checks that refuse a side
the run cannot use before any GPU time is spent. Imports no torch: each side's own interpreter is asked.

A side is a Python interpreter (a venv), optionally a git revision of this repository (checked out with
`git worktree add` into the run's directory, so a change to the zoo or the engine is testable), extra
environment variables, and extra pytest arguments for that side alone (how a fault is planted in B only).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from perfgate.ab import sides
from perfgate.core.children import measuring_environ

# Options the A/B run sets for every process itself: a side or the common args must not.
OWNED_OPTIONS = ("--perf-results", "--perf-cache-dir", "--perf-baseline", "--perf-precompile")
PROBE_TIMEOUT_S = 300  # importing a CUDA torch from a cold disk can take a minute
COLLECT_TIMEOUT_S = 600  # collection imports the zoo (transformers, timm)
# The probe imports torch and reports the versions a reader of the verdict wants to see.
PROBE = (
    "import importlib.metadata as m, json, torch\n"
    "def v(d):\n"
    "    try:\n        return m.version(d)\n"
    "    except m.PackageNotFoundError:\n        return None\n"
    "print(json.dumps({'torch': torch.__version__, 'transformers': v('transformers'), 'timm': v('timm'),"
    " 'triton': v('triton') or v('pytorch-triton'), 'cuda': torch.cuda.is_available()}))\n"
)


class ABError(Exception):
    """Input an A/B run cannot use; the message says which side, what is wrong and how to fix it."""


@dataclass(frozen=True)
class ABEnvironment:
    label: str  # "A" | "B"
    python: str  # the interpreter, e.g. /opt/venv-base/bin/python
    rev: str | None = None  # a git revision of this repository, or None: the checkout
    env: tuple[tuple[str, str], ...] = ()  # extra environment variables
    args: tuple[str, ...] = ()  # pytest arguments for this side only

    def describe(self) -> str:
        parts = [self.python, f"revision {self.rev}" if self.rev else "this checkout"]
        parts += [f"{key}={value}" for key, value in self.env]
        if self.args:
            parts.append(f"pytest args: {shlex.join(self.args)}")
        return "; ".join(parts)

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "python": self.python,
            "rev": self.rev,
            "env": dict(self.env),
            "args": list(self.args),
        }

    @classmethod
    def from_json(cls, data: dict) -> "ABEnvironment":
        return cls(
            data["label"],
            data["python"],
            data.get("rev"),
            tuple((data.get("env") or {}).items()),
            tuple(data.get("args") or ()),
        )


def side_from_options(label: str, python: str | None, rev: str | None, env: Sequence[str], args: str) -> ABEnvironment:
    """A side from the command line: --a-python (default: this interpreter), --a-rev, --a-env NAME=VALUE
    (repeatable) and --a-args (one shell-quoted string of pytest args)."""
    for option, value in ((f"--{label.lower()}-python", python), (f"--{label.lower()}-rev", rev)):
        if value is None:
            continue
        try:  # an unset $BASE_SHA must not make this side this tree
            sides.nonblank(option, value)
        except sides.SideError as err:
            raise ABError(str(err)) from None
    try:
        pytest_args = tuple(shlex.split(args or ""))
    except ValueError as err:
        raise ABError(f"--{label.lower()}-args {args!r}: {err}") from None
    return ABEnvironment(label, python or sys.executable, rev, parse_env(env, label), pytest_args)


def parse_env(items: Sequence[str], label: str) -> tuple[tuple[str, str], ...]:
    """KEY=VALUE strings as pairs; a malformed one is refused with its side named (perfgate.ab.sides.parse_env)."""
    try:
        return tuple(sides.parse_env(f"--{label.lower()}-env", list(items)).items())
    except sides.SideError as err:
        raise ABError(str(err)) from None


def check_args(args: Sequence[str], where: str) -> None:
    """Refuse the options the A/B run owns (one results file and one compile cache per process)."""
    owned = sorted({a.split("=")[0] for a in args if a.split("=")[0] in OWNED_OPTIONS})
    if owned:
        raise ABError(
            f"{where} set {', '.join(owned)}: perfgate ab sets these itself for each process "
            f"(a results file per process, a compile cache per side, a side's first process precompiling "
            f"with --precompile N); drop them"
        )


def check_precompile(precompile: int, args: Sequence[str]) -> None:
    """`perfgate ab --precompile N`: N of 0 or more, and no pytest-xdist (-n), under which a precompile
    does not run (perfgate.plugin.options.check_precompile)."""
    if precompile < 0:
        raise ABError(f"--precompile {precompile}: give 0 (each cell compiles in its own process) or more")
    xdist = [a for a in args if a in ("-n", "--numprocesses") or a.startswith("--numprocesses=") or _short_n(a)]
    if precompile and xdist:
        raise ABError(
            f"--precompile {precompile} with {xdist[0]}: a side's first process precompiles, which pytest-xdist "
            f"workers cannot; give --precompile 0 to run the sides under -n"
        )


def _short_n(arg: str) -> bool:
    return arg.startswith("-n") and not arg.startswith("--") and len(arg) > 2


def check_python(side: ABEnvironment) -> None:
    if not Path(side.python).is_file() or not os.access(side.python, os.X_OK):
        raise ABError(
            f"side {side.label}: the interpreter {side.python} does not exist or is not executable "
            f"(--{side.label.lower()}-python wants a venv's bin/python)"
        )


def probe(side: ABEnvironment) -> dict:
    """The versions the side's interpreter sees; ABError when it cannot import torch."""
    try:
        proc = subprocess.run(
            [side.python, "-c", PROBE],
            capture_output=True,
            text=True,
            timeout=PROBE_TIMEOUT_S,
            env={**os.environ, **dict(side.env)},
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise ABError(f"side {side.label}: could not run {side.python}: {err}") from None
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["no error output"])[-1]
        raise ABError(
            f"side {side.label}: {side.python} cannot import torch ({last}); install torch (and the "
            f'zoo\'s packages: pip install -e ".[models,test]") into that environment'
        )
    return json.loads(proc.stdout.strip().splitlines()[-1])


def repo_root(cwd: Path) -> Path | None:
    """The top of the git checkout holding `cwd`, or None outside one."""
    top = sides.toplevel(str(cwd))
    return Path(top).resolve() if top else None


def resolve_rev(repo: Path | None, side: ABEnvironment) -> str:
    """The commit a side's revision names; ABError when there is no such revision."""
    if repo is None:
        raise ABError(
            f"side {side.label}: --{side.label.lower()}-rev {side.rev} needs a git checkout of this "
            f"repository as the working directory"
        )
    proc = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{side.rev}^{{commit}}"], cwd=repo, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ABError(
            f"side {side.label}: revision {side.rev!r} does not exist in {repo} (git fetch it first, "
            f"or name a branch, tag or commit that does)"
        )
    return proc.stdout.strip()


def checkout(repo: Path, sha: str, path: Path) -> None:
    """`git worktree add --detach path sha`, once: a resumed run finds it there."""
    if (path / ".git").exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(
        ["git", "worktree", "add", "--detach", str(path), sha], cwd=repo, capture_output=True, text=True
    )
    if proc.returncode != 0:
        raise ABError(f"git worktree add {path} {sha[:12]} failed: {proc.stderr.strip()}")


def remove_worktree(repo: Path | None, path: Path) -> None:
    """Undo `checkout` (best effort: a refused run should not leave git a worktree to prune)."""
    if repo is not None and path.exists():
        subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=repo, capture_output=True)


def side_root(repo: Path | None, cwd: Path, worktree: Path | None) -> Path:
    """Where a side's pytest runs: the working directory, or the same place inside its revision's worktree
    (so `perftests` and other relative paths in the args mean the same on both sides)."""
    if worktree is None or repo is None:
        return cwd
    return worktree / cwd.resolve().relative_to(repo)


def side_environ(side: ABEnvironment, import_root: Path) -> dict[str, str]:
    """The process environment of a side: ours, its extra variables, and `import_root` first on PYTHONPATH so
    its perfgate and fixtures are the revision's (a venv's editable install of another checkout loses)."""
    env = measuring_environ(dict(side.env))  # CUPTI detached even where the revision's perfgate would not
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(import_root), env.get("PYTHONPATH")]))
    return env


def collect(side: ABEnvironment, root: Path, import_root: Path, common: Sequence[str]) -> list[str]:
    """The test ids a side's pytest selects (--collect-only); ABError when it selects none or errs."""
    # --verbosity last: a user's own -q or -v among the args would turn the id list into per-file counts
    # (-qq) or a tree (-v), where no id can be read
    command = [side.python, "-m", "pytest", "--collect-only", *common, *side.args, "--verbosity=-1"]
    try:
        proc = subprocess.run(
            command,
            cwd=root,
            capture_output=True,
            text=True,
            timeout=COLLECT_TIMEOUT_S,
            env=side_environ(side, import_root),
        )
    except subprocess.TimeoutExpired:
        raise ABError(f"side {side.label}: collecting took over {COLLECT_TIMEOUT_S} s: {shlex.join(command)}") from None
    ids = [line.strip() for line in proc.stdout.splitlines() if "::" in line and not line.startswith(" ")]
    if proc.returncode != 0 or not ids:
        tail = "\n  ".join((proc.stdout + proc.stderr).strip().splitlines()[-8:])
        raise ABError(
            f"side {side.label}: pytest selects no tests or cannot collect (exit {proc.returncode}) "
            f"in {root}: {shlex.join(command)}\n  {tail}"
        )
    return ids


def check_runnable(side: ABEnvironment, cuda: bool | None, ids: Sequence[str]) -> None:
    """Refuse a side without a CUDA device whose every selected cell is a GPU cell: each process would
    only skip them all (6 processes, 36 s on a CPU box, then every cell read as failed)."""
    if cuda is False and ids and all(_gpu_cell(test_id) for test_id in ids):
        raise ABError(
            f"side {side.label}: {side.python} sees no CUDA device, and all {len(ids)} selected cells are GPU "
            "cells, which would all skip: run on a GPU machine, or select the CPU tier (-m cpu)"
        )


def _gpu_cell(test_id: str) -> bool:
    """Whether a test id is a perf cell on a GPU: `test_x[<model>-<variant>-<precision>]`, no `cpu-` prefix."""
    from perfgate.core.matrix import PRECISIONS, VARIANTS

    param = test_id.partition("[")[2].rstrip("]")
    parts = param.split("-")
    return len(parts) >= 3 and parts[0] != "cpu" and parts[-1] in PRECISIONS and parts[-2] in VARIANTS


def check_same_tests(collected: dict[str, Sequence[str]]) -> None:
    """Both sides must select the same tests: a cell run on one side only has nothing to compare with,
    and dropping it silently would pass what was never judged."""
    a, b = (set(collected[label]) for label in ("A", "B"))
    if a != b:
        only_a, only_b = sorted(a - b), sorted(b - a)
        raise ABError(
            "A and B select different tests (narrow the common args, or make the sides agree):\n"
            + "".join(f"  only in A: {t}\n" for t in only_a)
            + "".join(f"  only in B: {t}\n" for t in only_b)
        )
