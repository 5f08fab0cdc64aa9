"""Files of records: one JSON line per record, appended crash-safely as each cell finishes, read back and
checked (perfgate.core.validate). Imports no torch."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Iterable, Iterator

from perfgate.core.record import unfinished
from perfgate.core.validate import checked, shape_problems


def append_record(path: str | os.PathLike, record: dict) -> None:
    """Append one record as a JSON line and flush it to disk, so a crash keeps what was measured."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a", encoding="utf-8") as fh:
        fh.write(json.dumps(record, sort_keys=True) + "\n")
        fh.flush()
        os.fsync(fh.fileno())


class RecordFileError(ValueError):
    """A results file that cannot be read as records; the message names the file and line."""


def iter_records(path: str | os.PathLike) -> Iterator[dict]:
    """The records of one results file, each checked (perfgate.core.validate): a value of the wrong kind raises
    RecordFileError naming the file, line, cell and field; impossible figures on an ok record make it a
    failed cell. A torn last line (a writer killed mid-line) is skipped with a warning."""
    path = Path(path)
    if not path.exists():
        raise RecordFileError(f"results file {path} does not exist")
    with path.open(encoding="utf-8") as fh:
        lines = fh.readlines()
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as err:
            if lineno == len(lines) and not line.endswith("\n"):
                # A torn tail: the writer died mid-line (append_record writes whole lines, then fsyncs).
                # Every whole line before it is a record that was measured; keep them.
                warnings.warn(f"{path}:{lineno}: an unfinished last line (a run killed while writing?) "
                              f"was skipped", stacklevel=2)
                return
            raise RecordFileError(f"{path}:{lineno}: not a JSON record ({err.msg})") from None
        problems = shape_problems(record)
        if problems:
            cell = record.get("cell") if isinstance(record, dict) else None
            raise RecordFileError(f"{path}:{lineno}: cell {cell!r}: {'; '.join(problems)}")
        yield checked(record)  # an ok record with NaN, inf or missing figures becomes a failed cell


def load_records(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Records of several files (xdist workers, shards), one per cell: a later record of a cell replaces
    an earlier one (a re-run or a gate's confirm round), so merged files carry no duplicates. Except: the
    checkpoint of another run's cell that was cut off ("did not finish": a call's limit, a kill) is no result
    and never hides a finished record, whatever the order of the files."""
    by_cell: dict[str, dict] = {}
    for path in paths:
        for record in iter_records(path):
            old = by_cell.get(record["cell"])
            if old is None or old.get("run_id") == record.get("run_id") or unfinished(old) or not unfinished(record):
                by_cell[record["cell"]] = record
    return list(by_cell.values())

