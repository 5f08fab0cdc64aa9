"""Files of records: one JSON line per record, appended crash-safely as each cell finishes, read back and
checked (perfgate.core.validate). Imports no torch."""

from __future__ import annotations

import json
import os
import re
import warnings
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from perfgate.core.record_reading import unfinished
from perfgate.core.text import TOO_DEEP, parse_json
from perfgate.core.validate import checked, shape_problems


def append_record(path: str | os.PathLike, record: dict) -> None:
    """Append one record as a JSON line and flush it to disk, so a crash keeps what was measured: the one
    writer of results files (the session, an isolated child's checkpoints, the xdist merge, the paired base
    side). The line goes in one os.write on an O_APPEND descriptor, so appenders in several processes at once
    (a session and its isolated child) never interleave within a line. After a torn last line (a writer
    killed mid-line, a full disk) the record starts a line of its own: glued onto the torn half it would make
    both unreadable, and every reader would refuse the whole file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    line = (json.dumps(record, sort_keys=True) + "\n").encode("utf-8")
    # O_BINARY: Windows would otherwise write "\r\n"; elsewhere it is 0.
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | getattr(os, "O_BINARY", 0), 0o666)
    try:
        if os.lseek(fd, 0, os.SEEK_END) > 0:
            os.lseek(fd, -1, os.SEEK_END)
            if os.read(fd, 1) != b"\n":
                line = b"\n" + line
        written = os.write(fd, line)
        while written < len(line):  # a short write (a disk filling up): the rest, or the OSError that says why
            written += os.write(fd, line[written:])
        os.fsync(fd)
    finally:
        os.close(fd)


def precompile_path(results: str | os.PathLike) -> Path:
    """Where a run's --perf-precompile writes each cell's first call or why it did not compile, beside its
    results file (results.jsonl -> results.precompile.json): a JSON list, not records, so no *.jsonl."""
    results = Path(results)
    return results.with_name(f"{results.stem}.precompile.json")


class RecordFileError(ValueError):
    """A results file that cannot be read as records; the message names the file and line."""


def iter_records(path: str | os.PathLike) -> Iterator[dict]:
    """The records of one results file, each checked (perfgate.core.validate): a value of the wrong kind raises
    RecordFileError naming the file, line, cell and field; impossible figures on an ok record make it a
    failed cell. A torn record (a writer killed mid-line) is skipped with a warning naming its line, wherever
    it sits, and a whole record a later writer glued onto it is kept; any other line that is no record is
    unusable input."""
    path = Path(path)
    final: dict[tuple, int] = {}  # (run_id, tier, cell) -> the line of its finished record
    for lineno, line in enumerate(_lines(path), 1):
        if not line.strip():
            continue
        record = _parse(path, lineno, line)
        if record is None:
            continue
        problems = shape_problems(record)
        if problems:
            cell = record.get("cell") if isinstance(record, dict) else None
            raise RecordFileError(f"{path}:{lineno}: cell {cell!r:.80}: {'; '.join(problems)}")
        _warn_if_duplicated(path, lineno, record, final)
        yield checked(record)  # an ok record with NaN, inf or missing figures becomes a failed cell


def _warn_if_duplicated(path: Path, lineno: int, record: dict, final: dict[tuple, int]) -> None:
    """A run's cell finishes once; a second finished record (a line pasted twice, files concatenated) is
    kept over the first by every reader, so say which lines. A checkpoint before the final record, and the
    gate's re-measure of a cell (`remeasure`), are how a run writes, not duplicates."""
    if unfinished(record):
        return
    key = (record.get("run_id"), record.get("tier"), record["cell"])
    if key in final and not record.get("remeasure"):
        run = f" of run {key[0]}" if key[0] else ""
        warnings.warn(
            f"{path}:{lineno}: cell {key[2]}{run} already finished on line {final[key]}; the later "
            f"record (line {lineno}) is the one kept",
            stacklevel=3,
        )
    final[key] = lineno


def _lines(path: Path) -> list[str]:
    """The file's lines; a path that is no readable UTF-8 file is unusable input naming the path."""
    if not path.exists():
        raise RecordFileError(f"results file {path} does not exist")
    if not path.is_file():
        raise RecordFileError(f"results file {path} is not a file (a directory?); give a .jsonl file of records")
    try:
        with path.open(encoding="utf-8") as fh:
            return fh.readlines()
    except UnicodeDecodeError as err:
        raise RecordFileError(
            f"results file {path} is not UTF-8 text (byte {err.start}: a binary file?); give a .jsonl file of records"
        ) from None
    except OSError as err:
        raise RecordFileError(f"results file {path} cannot be read: {err.strerror or err}") from None


# A torn record followed by the whole record an older writer glued onto it: `{"a": 1, "b{"a": 2, ...}`.
# Records are written with sorted keys, so each starts with `{"`.
_RECORD_START = re.compile(r'\{"')


def _parse(path: Path, lineno: int, line: str) -> dict | None:
    """One line's record; None (with a warning naming the line) for a torn record, keeping a whole record
    glued onto it; RecordFileError for a line that was never a record."""
    try:
        return parse_json(line)
    except json.JSONDecodeError as err:
        if err.msg == TOO_DEEP:  # no record: and looking for one glued inside would parse it deep again
            raise RecordFileError(f"{path}:{lineno}: not a JSON record ({TOO_DEEP})") from None
        # A whole record glued onto a torn one may even parse as the torn one's unfinished value, so look
        # for it first. Else the text ended mid-record (mid-string, or where a value or delimiter was due):
        # a writer killed mid-line.
        glued = _glued_record(line)
        torn = _torn(line, err)
        if not torn and glued is None:
            raise RecordFileError(f"{path}:{lineno}: not a JSON record ({err.msg})") from None
    kept = "; the whole record written after it on that line was kept" if glued is not None else ""
    # Every whole line around it is a record that was measured: keep them, and say what was lost.
    warnings.warn(
        f"{path}:{lineno}: an unfinished record (a run killed while writing?) was skipped{kept}", stacklevel=3
    )
    return glued


# What may follow the point where a torn record stops parsing: the rest of its last token (a cut literal
# `tru`, number `1e` or `-`, or escape `\u12`), nothing else. After a cut string the decoder says so itself.
_LAST_TOKEN = re.compile(r'[\w.+\-"\\]*')


def _torn(line: str, err: json.JSONDecodeError) -> bool:
    """Whether a line that does not parse is a record cut short: an object whose text stops mid-token."""
    text = line.rstrip()
    # A record is an object with sorted keys, so it starts `{"`; a whole value with more after it was never cut.
    if not (text.startswith('{"') or text == "{") or err.msg == "Extra data":
        return False
    return err.msg.startswith("Unterminated string") or bool(_LAST_TOKEN.fullmatch(text, err.pos))


def _glued_record(line: str) -> dict | None:
    """The last whole record on a line that starts with a torn one: a JSON object from a `{"` to the line's
    end that has a cell and a status (a torn record's nested object, such as its env, has neither)."""
    for start in _RECORD_START.finditer(line, 1):
        try:
            record = parse_json(line[start.start() :])
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "cell" in record and "status" in record:
            return record
    return None


def load_records(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Records of several files (xdist workers, shards), one per cell: a later record of a cell replaces
    an earlier one (a re-run or a gate's confirm round), so merged files carry no duplicates. Except: the
    checkpoint of a cell that was cut off ("did not finish": a call's limit, a kill) is no result and never
    hides a finished record of another run, whatever the order of the files, nor of its own run where the cut
    was the gate's re-measure of the cell (a confirm round stopped by a CI step's limit)."""
    return latest(all_records(paths))


def all_records(paths: Iterable[str | os.PathLike]) -> list[dict]:
    """Every record of these files, checkpoints and re-measures included, in the order they were written."""
    return [record for path in paths for record in iter_records(path)]


def latest(records: Iterable[dict]) -> list[dict]:
    """load_records' choice of one record per cell, over records in the order they were written."""
    by_cell: dict[str, dict] = {}
    for record in records:
        old = by_cell.get(record["cell"])
        same_run = old is not None and old.get("run_id") == record.get("run_id") and not record.get("remeasure")
        if old is None or same_run or unfinished(old) or not unfinished(record):
            by_cell[record["cell"]] = record
    return list(by_cell.values())


CONFIRM = "confirm"  # a record's `remeasure` in the gate's confirm round (perfgate.plugin.session_end)


def gated_rounds(records: Sequence[dict]) -> tuple[list[dict], dict[str, dict]]:
    """What the gate judged in a run's records (all_records): its first round (one record per cell, as
    load_records chooses, the gate's re-measures left out) and its confirm round (cell id -> the re-measured
    record), so that a reader gates them as the gate did (gate.gate_run's `remeasure`) rather than judging a
    confirm round's record on its own. A re-measure for why-artifacts, made after the verdict for a reader, is
    in neither."""
    first = latest(r for r in records if not r.get("remeasure"))
    again = latest(r for r in records if r.get("remeasure") == CONFIRM)
    return first, {r["cell"]: r for r in again if not unfinished(r)}
