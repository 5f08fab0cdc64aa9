"""The plugin's folders and output files: the folders a cell's process uses, made absolute from where pytest
started (a paired side's worker starts in its own tree), and every output and folder refused, before the first
cell runs, where it cannot be written.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# The folders a cell's process uses, by config.option name. A paired side's worker starts in its own tree (a base
# revision's worktree), where a relative folder is another one (anchor).
FOLDERS = {
    "perf_cache_dir": "--perf-cache-dir",
    "perf_reference_cache": "--perf-reference-cache",
    "perf_profile": "--perf-profile",
}


def anchor(config: pytest.Config) -> None:
    """Make the FOLDERS options absolute, from where pytest was started. Relative, given `--perf-cache-dir kept`,
    side A (the base's worktree under .perfgate/) compiled into a cache of its own, so the two sides shared no
    compile and each timed its own launch configs; and side A never read the references the precompile stored
    in the default reference cache. A blank value (an unset shell variable) is refused by name: a blank
    --perf-cache-dir meant cold compiles, and a blank reference cache wrote references into the working folder."""
    for dest, option in FOLDERS.items():
        value = getattr(config.option, dest)
        if value is None:
            continue
        if not value.strip():
            off = ", or off" if option == "--perf-reference-cache" else ""
            raise ValueError(f"{option}={value!r} is empty: give a folder{off}, or leave the option out")
        if not (option == "--perf-reference-cache" and value == "off"):
            setattr(config.option, dest, str(Path(config.invocation_params.dir) / value))


def check_outputs(results: str | None, save_dir: str | None, report_dir: str | None, history_db: str | None) -> None:
    """Refuse, before the first cell runs, an output that cannot be written: a directory given for a file, a
    file for a directory, a place that is read-only. Found at the first cell's append, it failed that cell
    after it ran (exit 1, read as a regression); found at the end, it lost the gate's report."""
    writable("--perf-results", results or str(Path(".perfgate") / "results.jsonl"), want_dir=False)
    for option, value, want_dir in (
        ("--perf-save-baseline", save_dir, True),
        ("--perf-report", report_dir, True),
        ("--perf-history", history_db, False),
    ):
        if value:
            writable(option, value, want_dir)


def check_folders(profile: str | None, cache_dir: str | None, references: str | None) -> None:
    """Refuse, before the first cell, a file where a directory is wanted: found by the cell, it failed every
    cell with NotADirectoryError (exit 1, read as a regression), and a reference cache under a file was
    silently never used."""
    for option, value in (
        ("--perf-profile", profile),
        ("--perf-cache-dir", cache_dir),
        ("--perf-reference-cache", None if references == "off" else references),
    ):
        if value:
            writable(option, value, want_dir=True)


def writable(option: str, value: str, want_dir: bool) -> None:
    """Refuse `value` where it cannot be written as a folder (`want_dir`) or a file, naming `option`."""
    path = Path(value)
    if path.is_symlink() and not path.exists():  # found at the end, where it failed with "File exists"
        raise ValueError(f"{option}={value}: is a broken symbolic link (to {os.readlink(path)})")
    if path.exists() and path.is_dir() != want_dir:
        raise ValueError(
            f"{option}={value}: is a {'directory' if path.is_dir() else 'file'}; give a "
            f"{'directory' if want_dir else 'file'} there"
        )
    if path.exists():
        place = path
    else:  # the nearest folder that exists: perfgate makes the rest
        place = next(p for p in path.absolute().parents if p.exists())
        if not place.is_dir():
            raise ValueError(f"{option}={value}: {place} is a file, so nothing can be made under it")
    if not os.access(place, os.W_OK | (os.X_OK if place.is_dir() else 0)):
        raise ValueError(f"{option}={value}: {place} cannot be written (read-only, or not yours)")
