"""What a side of a paired comparison is, checked before any cell runs: the tree it imports (a git revision
checked out as a worktree, or this checkout), its interpreter and its environment variables. An empty or
blank value is refused by name: an unset `$BASE_SHA` must never make the base side this tree (the PR would
be compared with itself and pass). Imports no torch.
"""

from __future__ import annotations

import fcntl
import os
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path


class SideError(ValueError):
    """A side that cannot be measured; the message names the option and the bad value (exit 2)."""


@dataclass(frozen=True)
class Side:
    """One side: `root` the tree whose perfgate, zoo and tests it imports; `python` its interpreter; `env` the
    variables its processes get on top of this one's; `name` how reports call it."""

    name: str
    root: str
    python: str = sys.executable
    env: dict = field(default_factory=dict)
    revision: str = ""  # the commit `root` holds, where it is a checkout of one

    def describe(self) -> str:
        parts = [self.revision[:12] if self.revision else "this tree"]
        if self.python != sys.executable:
            parts.append(self.python)
        parts += [f"{k}={v}" for k, v in sorted(self.env.items())]
        return ", ".join(parts)


def nonblank(option: str, value: str | None) -> str:
    """`value` stripped; a usage error naming `option` when it is empty or blank."""
    if value is None or not value.strip():
        raise SideError(
            f"{option} is empty ({value!r}): give a revision, interpreter or value; an unset shell variable "
            "here would compare this tree with itself"
        )
    return value.strip()


def parse_env(option: str, items: list[str] | None) -> dict:
    """NAME=VALUE items as a dict; a malformed item is an error naming it."""
    out = {}
    for item in items or []:
        name, sep, value = item.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
            raise SideError(f"{option} {item!r}: want NAME=VALUE, NAME a shell variable name")
        out[name] = value
    return out


def check_python(option: str, python: str) -> str:
    """An interpreter that exists and imports torch (asked in a subprocess)."""
    python = nonblank(option, python)
    path = Path(python)
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise SideError(f"{option} {python!r}: no such executable")
    done = subprocess.run([python, "-c", "import torch"], capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        last = (done.stderr.strip().splitlines() or ["no output"])[-1]
        raise SideError(f"{option} {python!r} cannot import torch: {last}")
    return str(path.absolute())  # a worker starts in its side's checkout: a relative path would not be found there


def git(repo: str, *args: str) -> str:
    done = subprocess.run(["git", "-C", repo, *args], capture_output=True, text=True)
    if done.returncode != 0:
        raise SideError(f"git {' '.join(args)}: {(done.stderr.strip() or 'failed').splitlines()[-1]}")
    return done.stdout.strip()


def commit_of(option: str, revision: str | None, repo: str) -> str:
    """The full sha `revision` names, which must be a commit (HEAD^{tree} exists, but is no commit)."""
    revision = nonblank(option, revision)
    try:
        git(repo, "rev-parse", "--show-toplevel")
    except (SideError, OSError) as err:
        raise SideError(f"{option} {revision!r} needs a git checkout; {repo} is none") from err
    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{revision}^{{commit}}")
    except SideError:
        raise SideError(f"{option} {revision!r}: no commit of that name in {repo}") from None


def checkout(option: str, revision: str, repo: str, into: Path) -> tuple[str, str]:
    """(root, sha): `revision` checked out as a detached worktree under `into`, reused while it holds that sha.
    Sessions started at once against one base (one pytest a GPU of a runner) share it: the first adds it while
    the others wait on its lock. Without the lock, `git worktree add` failed in 3 of 6 sessions started together
    ("already exists"), and a session could find the worktree's .git before its files were checked out. A
    worktree a killed session left half made is not detected: its side A then fails, and its cells are unsure."""
    sha = commit_of(option, revision, repo)
    tree = into / f"against-{sha[:12]}"
    into.mkdir(parents=True, exist_ok=True)
    with open(checkout_lock(tree), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released as the file closes
        if not (tree / ".git").exists():
            git(repo, "worktree", "add", "--detach", "--force", str(tree), sha)
    return str(tree), sha


def checkout_lock(tree: Path) -> Path:
    """The lock file beside a base worktree that its sessions take while one of them adds it."""
    return tree.with_name(f"{tree.name}.lock")


def toplevel(start: str) -> str | None:
    """The top of the git checkout holding `start`, or None outside one."""
    try:
        return git(start, "rev-parse", "--show-toplevel")
    except (SideError, OSError):
        return None


def repo_root(start: str) -> str:
    """The top of the git checkout holding `start`, else `start` itself."""
    return toplevel(start) or start
