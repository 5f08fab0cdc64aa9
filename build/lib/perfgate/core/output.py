"""Files perfgate writes where a user asked (baselines, reports, verdicts): whole or not at all. Imports no torch.

A full disk, a read-only filesystem or a directory in the way is no bug in perfgate but an output that cannot
be written: OutputError names the path and why (exit 2), and the file that was there before is left as it was
(a report half-written, or a 0-byte HTML page, would read as a result).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


class OutputError(Exception):
    """An output file that cannot be written; the message names the path and what the system said."""


def write_atomic(path: str | os.PathLike, text: str, mode: int = 0o644) -> Path:
    """Write `text` to `path` through a temp file beside it (`.<name>.XXXX.tmp`), fsync, then rename: a crash or
    an error midway leaves the previous file untouched and no temp file behind. A new file gets `mode`; an
    existing one keeps its own (mkstemp makes 0600, and a baseline is a shared, committed file)."""
    path = Path(path)
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, path.stat().st_mode & 0o777 if path.is_file() else mode)
        os.replace(tmp, path)
    except OSError as err:
        raise OutputError(f"cannot write {path}: {_blocker(path) or err.strerror or err}") from None
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                Path(tmp).unlink(missing_ok=True)
    return path


def _blocker(path: Path) -> str | None:
    """What stands where a folder of `path` must be, in words, or None: mkdir says only "File exists" for a
    file, a symlink to a file or a broken symlink, and the reader looked for a file of that name."""
    for folder in reversed(path.parents):
        if folder.is_symlink() and not folder.exists():
            return f"{folder} is a broken symbolic link (to {os.readlink(folder)}), not a directory"
        if folder.exists() and not folder.is_dir():
            link = f" (a symbolic link to {os.readlink(folder)})" if folder.is_symlink() else ""
            return f"{folder} is a file{link}, not a directory"
    return None
