"""History: every run's records in one SQLite file, so a cell's speedup can be followed over commits and days.

Imports no torch. One row per (run_id, cell): appending the same run twice changes nothing, and a later
record of a cell within a run (the gate's confirm round) replaces the earlier one, as in
perfgate.core.records_file.load_records. Each row carries the commit, the date, the environment fingerprint and the
cell; the record fields a trend needs as columns (those perfgate.core.record.FIELDS marks `column`, so `sqlite3
history.sqlite` answers questions without parsing JSON); and the record itself as JSON, minus the per-tensor
numerics checks (a few KB a cell that would make a year of nightlies weigh hundreds of MB).

    perfgate history add RESULTS... --db PATH [--commit SHA]
    perfgate history show CELL --db PATH [--fingerprint F] [--metric speedup]

A database of an older HISTORY_SCHEMA gains the columns added since (schema 2: the device speedup and the
counts of a step's work) when it is next opened, each filled from its rows' stored records, so its history
keeps every run.
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path
from typing import Iterable, Iterator

from perfgate.core.clocks import COUNTS
from perfgate.core.record import FIELD, names
from perfgate.core.text import parse_json

HISTORY_SCHEMA = 2  # 2: device_speedup (with its interval) and the counts as columns

# Where the CLI keeps the database when --db is not given: beside the default results files.
DEFAULT_DB = ".perfgate/history.sqlite"

# The record fields kept as columns (perfgate.core.record.FIELDS, `column`), in table order, with their SQLite types.
# A database made before a column was added lacks it: adding one bumps HISTORY_SCHEMA, and _upgrade adds it.
SQL_TYPES = {str: "TEXT", float: "REAL", int: "INTEGER"}
COLUMNS = tuple((name, SQL_TYPES[FIELD[name].type]) for name in names(column=True))
COLUMN_NAMES = tuple(name for name, _ in COLUMNS)

# Metrics `perfgate history show --metric` can print; mem_ratio = peak_mem_compiled_mb / peak_mem_eager_mb. The
# device speedup follows the GPU's work alone, where the wall speedup of a host-bound step follows the host CPU.
METRICS = (
    "speedup",
    "device_speedup",
    "eager_ms",
    "compiled_ms",
    "compile_s",
    "compile_warm_s",
    "peak_mem_eager_mb",
    "peak_mem_compiled_mb",
    "mem_ratio",
    "graph_breaks",
    "recompiles",
    *(name for count in COUNTS for name in count.fields),
)

_DDL = f"""
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS results (
    run_id TEXT NOT NULL,
    cell TEXT NOT NULL,
    commit_sha TEXT,
    date TEXT NOT NULL,
    fingerprint TEXT NOT NULL,
    {", ".join(f"{name} {kind}" for name, kind in COLUMNS)},
    record TEXT NOT NULL,
    PRIMARY KEY (run_id, cell)
);
CREATE INDEX IF NOT EXISTS results_series ON results (cell, fingerprint, date);
"""


class HistoryError(Exception):
    """A history database that cannot be used; the message names the file."""


@contextlib.contextmanager
def _connect(db_path: str | os.PathLike, create: bool) -> Iterator[sqlite3.Connection]:
    path = Path(db_path)
    if not create and not path.is_file():
        raise HistoryError(f"no history database at {path}; make one with: perfgate history add RESULTS... --db {path}")
    if not create and os.access(path, os.W_OK) and _older_schema(path):
        create = True  # a reader of an older history that may write it upgrades it in place (_upgrade); else refused
    try:
        if create:
            path.parent.mkdir(parents=True, exist_ok=True)
            # 30 s: xdist workers or shards appending at once wait for the write lock instead of failing.
            conn = sqlite3.connect(path, timeout=30)
        else:  # a reader opens it read-only: a mode-444 history (an artifact, a shared copy) is still readable
            conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", timeout=30, uri=True)
    except (OSError, sqlite3.Error) as err:  # a directory in the way, a read-only place
        raise HistoryError(f"history database {path} cannot be opened: {err}") from None
    conn.row_factory = sqlite3.Row
    try:
        with conn:  # one transaction: a crash midway leaves the previous state
            _ensure_schema(conn, path) if create else _check_schema(conn, path)
            yield conn
    except sqlite3.DatabaseError as err:
        raise HistoryError(f"history database {path}: {err}") from None
    finally:
        conn.close()


def _older_schema(path: Path) -> bool:
    """Whether `path` is a perfgate history of an older schema than this one (read-only; False if unsure)."""
    try:
        conn = sqlite3.connect(f"{path.absolute().as_uri()}?mode=ro", timeout=30, uri=True)
        try:
            row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
        finally:
            conn.close()
        return row is not None and str(row[0]).isdigit() and int(row[0]) < HISTORY_SCHEMA
    except sqlite3.Error:
        return False


def _ensure_schema(conn: sqlite3.Connection, path: Path) -> None:
    conn.executescript(_DDL)
    # OR IGNORE: two appends creating one database both found no schema row, and the second insert failed
    # ("UNIQUE constraint failed: meta.key", about 1 in 100), losing that run's records. Read what won.
    conn.execute("INSERT OR IGNORE INTO meta (key, value) VALUES ('schema', ?)", (str(HISTORY_SCHEMA),))
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row["value"] in {str(schema) for schema in range(1, HISTORY_SCHEMA)}:
        _upgrade(conn)
    elif row["value"] != str(HISTORY_SCHEMA):
        raise HistoryError(f"history database {path} has schema {row['value']}, expected {HISTORY_SCHEMA}")


def _check_schema(conn: sqlite3.Connection, path: Path) -> None:
    """A reader's check, writing nothing: the file is a perfgate history of this schema."""
    if not conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta'").fetchone():
        raise HistoryError(f"history database {path} is no perfgate history (it has no meta table)")
    row = conn.execute("SELECT value FROM meta WHERE key = 'schema'").fetchone()
    if row is None or row["value"] != str(HISTORY_SCHEMA):
        raise HistoryError(f"history database {path} has schema {row and row['value']}, expected {HISTORY_SCHEMA}")


def is_database(path: str | os.PathLike) -> bool:
    """Whether the file begins as an SQLite database does (a history, or another program's database), not as
    the JSON lines of a costs file (perfgate.plan.costs.KEPT_COSTS)."""
    try:
        with open(path, "rb") as handle:
            return handle.read(16) == b"SQLite format 3\x00"
    except OSError:
        return False


def check(db_path: str | os.PathLike) -> None:
    """Raise HistoryError unless `db_path` is a history a reader can use (the plugin's start-up check)."""
    with _connect(db_path, create=False):
        pass


def _record(row: sqlite3.Row) -> dict:
    """A row's stored record; one that is no JSON object (a hand-edited row) is a HistoryError naming it."""
    try:
        record = parse_json(row["record"])
    except (json.JSONDecodeError, TypeError) as err:
        record = err
    if not isinstance(record, dict):
        raise HistoryError(f"history row ({row['run_id']}, {row['cell']}): field 'record' is no JSON object")
    return record


def _upgrade(conn: sqlite3.Connection) -> None:
    """An older database's missing columns added and filled from each row's stored record (which holds every
    field it had), in the open transaction: a crash midway leaves the older database as it was."""
    have = {row["name"] for row in conn.execute("PRAGMA table_info(results)")}
    added = [(name, kind) for name, kind in COLUMNS if name not in have]
    for name, kind in added:
        conn.execute(f"ALTER TABLE results ADD COLUMN {name} {kind}")
    if added:
        rows = conn.execute("SELECT rowid, record FROM results").fetchall()
        sets = ", ".join(f"{name} = ?" for name, _ in added)
        conn.executemany(
            f"UPDATE results SET {sets} WHERE rowid = ?",
            [(*(json.loads(row["record"]).get(name) for name, _ in added), row["rowid"]) for row in rows],
        )
    conn.execute("UPDATE meta SET value = ? WHERE key = 'schema'", (str(HISTORY_SCHEMA),))


def _now() -> str:
    return _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds")


def _run_id(record: dict) -> str:
    """The record's run id; a record without one (an old results file) is its own run, keyed by its content,
    so adding the same file twice still adds it once."""
    if record.get("run_id"):
        return str(record["run_id"])
    digest = hashlib.sha256(json.dumps(record, sort_keys=True).encode()).hexdigest()
    return f"content-{digest[:16]}"


def _stored(record: dict) -> str:
    """The record as JSON without the per-tensor numerics checks (the verdict and worst tensor stay)."""
    detail = {k: v for k, v in (record.get("numerics_detail") or {}).items() if k != "checks"}
    return json.dumps({**record, "numerics_detail": detail}, sort_keys=True)


def _row(record: dict, commit: str | None, date: str | None) -> tuple:
    fingerprint = (record.get("env") or {}).get("fingerprint") or "unknown"
    when = date or record.get("started_at") or _now()
    return (
        _run_id(record),
        record["cell"],
        commit,
        when,
        fingerprint,
        *(record.get(name) for name in COLUMN_NAMES),
        _stored(record),
    )


def append(
    db_path: str | os.PathLike, records: Iterable[dict], commit: str | None = None, date: str | None = None
) -> int:
    """Add records to the history at `db_path` (created if missing); returns how many rows were written.

    `commit`: the commit measured (None: unknown; a later append of the same run may fill it in).
    `date`: ISO-8601 date or time to file the records under (None: each record's started_at, else now).
    Idempotent per (run_id, cell): a record already there is replaced by the newer one."""
    # One row per (run_id, cell), the last: a results file also holds each cell's mid-cell checkpoints.
    latest = {(row[0], row[1]): row for row in (_row(r, commit, date) for r in records)}
    rows = list(latest.values())
    columns = ("run_id", "cell", "commit_sha", "date", "fingerprint", *COLUMN_NAMES, "record")
    # A re-append keeps what it does not know: the commit and date given earlier survive a later append
    # (e.g. by the plugin) that passes none.
    kept = ("commit_sha",) if date is not None else ("commit_sha", "date")
    updates = [f"{n} = excluded.{n}" for n in columns[2:] if n not in kept]
    updates += [f"{n} = COALESCE(excluded.{n}, results.{n})" for n in kept if n == "commit_sha"]
    sql = (
        f"INSERT INTO results ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))}) "
        f"ON CONFLICT (run_id, cell) DO UPDATE SET {', '.join(updates)}"
    )
    with _connect(db_path, create=True) as conn:
        conn.executemany(sql, rows)
    return len(rows)


def _as_point(row: sqlite3.Row) -> dict:
    point = {key: row[key] for key in ("run_id", "cell", "commit_sha", "date", "fingerprint", *COLUMN_NAMES)}
    point["commit"] = point.pop("commit_sha")
    eager, compiled = point["peak_mem_eager_mb"], point["peak_mem_compiled_mb"]
    point["mem_ratio"] = compiled / eager if eager and compiled is not None else None
    record = _record(row)
    point["gate"] = record.get("gate") or {}
    point["env"] = record.get("env") or {}  # the versions around a change point (perfgate.judge.triage)
    return point


def series(db_path: str | os.PathLike, cell: str, fingerprint: str | None = None) -> list[dict]:
    """A cell's history, oldest first: one dict per run with run_id, cell, commit, date, fingerprint, the
    record fields in COLUMN_NAMES, mem_ratio and gate. All fingerprints unless one is given (then only it)."""
    sql = "SELECT * FROM results WHERE cell = ?"
    params: list = [cell]
    if fingerprint is not None:
        sql += " AND fingerprint = ?"
        params.append(fingerprint)
    with _connect(db_path, create=False) as conn:
        rows = conn.execute(sql + " ORDER BY date, started_at, rowid", params).fetchall()
    return [_as_point(row) for row in rows]


def records(db_path: str | os.PathLike) -> list[dict]:
    """Every stored record (without per-tensor numerics checks), oldest first: what cost estimates read."""
    with _connect(db_path, create=False) as conn:
        rows = conn.execute("SELECT run_id, cell, record FROM results ORDER BY date, rowid").fetchall()
        return [_record(row) for row in rows]


def cells(db_path: str | os.PathLike) -> list[tuple[str, str]]:
    """Every (cell, fingerprint) the history holds, sorted."""
    with _connect(db_path, create=False) as conn:
        rows = conn.execute("SELECT DISTINCT cell, fingerprint FROM results ORDER BY cell, fingerprint")
        return [(row["cell"], row["fingerprint"]) for row in rows]


def current_commit(cwd: str | os.PathLike | None = None) -> str | None:
    """The commit being measured: $GITHUB_SHA in GitHub Actions, else `git rev-parse HEAD`, else None."""
    if os.environ.get("GITHUB_SHA"):
        return os.environ["GITHUB_SHA"]
    try:
        out = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=10, check=True
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None
