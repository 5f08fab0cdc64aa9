"""Does a refactor of the measuring side leave a cell's record whole? Compares which fields two results files
set, cell by cell: a field set (not null) in the old run's record and null or missing in the new one's, or the
other way round, or of another JSON kind. Values are not compared (two runs time differently).

usage: python tools/probes/record_fields.py OLD.jsonl NEW.jsonl
       e.g. baselines/runs/paired/h100-20261128-06ce1001-aa-warm.jsonl against a run of today's code

Exit 1 where a cell's record lost a field the old one had; 0 otherwise (fields gained are listed, not failed).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def last_records(path: Path) -> dict[str, dict]:
    """The last record of each cell that finished (a checkpoint's 'did not finish' lines are superseded)."""
    out: dict[str, dict] = {}
    for line in path.read_text().splitlines():
        if line.strip():
            record = json.loads(line)
            if not str(record.get("reason", "")).startswith("did not finish"):
                out[record["cell"]] = record
    return out


def kind(value) -> str:
    return "null" if value is None else type(value).__name__


def main(old_path: Path, new_path: Path) -> int:
    old, new = last_records(old_path), last_records(new_path)
    lost_any = False
    for cell in sorted(old.keys() & new.keys()):
        a, b = old[cell], new[cell]
        lost = sorted(k for k in a if a[k] is not None and b.get(k) is None)
        gained = sorted(k for k in b if b[k] is not None and a.get(k) is None)
        changed = sorted(k for k in a.keys() & b.keys() if None not in (a[k], b[k]) and kind(a[k]) != kind(b[k]))
        lost_any |= bool(lost)
        status = f"{a.get('status')} -> {b.get('status')}"
        print(f"{cell} ({status}): lost {lost or '-'}; gained {gained or '-'}; kind changed {changed or '-'}")
    for cell in sorted(old.keys() ^ new.keys()):
        print(f"{cell}: only in {'old' if cell in old else 'new'}")
    return 1 if lost_any else 0


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
