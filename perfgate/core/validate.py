"""What makes a record's figures usable, checked wherever records enter the data side. Imports no torch.

Which check a field gets is the record table's (perfgate.core.record.FIELDS: `check`, `required`). A value of
the wrong kind is unusable input: `shape_problems` names the field, and the reader raises (exit code 2). A
figure that cannot be a measurement (NaN, inf, a time <= 0, a missing speedup) on an ok record is a failed
measurement: `checked` makes the record a failed cell whose reason names the fields. Non-finite numbers, and
counts that are no count (2.5, -1, past 2**53), become null on every record; a count written 3.0 is the
count 3. docs/reliability.md lists the cases and their tests.
"""

from __future__ import annotations

import math
import re
from typing import TypeGuard

from perfgate.core.clocks import COUNT_OF, range_field
from perfgate.core.record import CLOCKS, FIELD, FIELDS, STATUSES, names

BAD_FIGURES = "bad figures"  # a reason's first words when `checked` failed the record

# Each list below is the record table's (perfgate.core.record.FIELDS) fields with that check, in table order.
CHOICE_FIELDS = tuple(FIELD[name] for name in names(check="choice"))
TEXT_FIELDS = names(check="text")
OBJECT_FIELDS = names(check="object")
# Figures every ok record has, each a finite number > 0: a run that timed and compiled made them ...
REQUIRED_POSITIVE = names(check="> 0", required=True)
# ... and counts, each an integer >= 0.
REQUIRED_COUNTS = names(check="count", required=True)
# Figures that may be null (not measured here: no device clock on a CPU), and otherwise > 0 ...
OPTIONAL_POSITIVE = names(check="> 0", required=False)
# ... or >= 0 (0 MiB of CUDA-graph pool, a busy fraction, a count, a tiny model's TFLOP/s rounded to 0).
OPTIONAL_NONNEGATIVE = names(check=">= 0", required=False)
# Throughput on world_size ranks / on one device: at most world_size (each rank does the one device's step
# and more: the all-reduce). Above it the two steps compared were not the same step, or not timed alike
# (compiled autograd read 2.57 on 2 ranks, issue 56): a figure that cannot be a measurement.
SCALING_FIELDS = tuple(name for name in names(check="> 0") if name.startswith("scaling_"))
REQUIRED_ROUNDS = names(check="rounds", required=True)  # non-empty lists of ms > 0 on an ok record
OPTIONAL_ROUNDS = names(check="rounds", required=False)
NUMBER_FIELDS = REQUIRED_POSITIVE + REQUIRED_COUNTS + OPTIONAL_POSITIVE + OPTIONAL_NONNEGATIVE
ROUND_FIELDS = REQUIRED_ROUNDS + OPTIONAL_ROUNDS
# The largest whole number every JSON reader keeps exact (RFC 8259, section 6); a larger count is no count.
MAX_COUNT = 2**53 - 1


# A name from a record that becomes part of a file or directory name (a baseline's <fingerprint>_<tier>.json,
# a cell's why-artifacts directory) or of every report line (the cell id): letters, digits and . _ + -, not
# starting with "." (no "..", no hidden file), no separator, at most 200 characters (a file name stops at 255
# bytes; the longest cell id in the zoo is 69).
SAFE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._+-]{0,199}")
SAFE_NAME_RULE = "letters, digits, '.', '_', '+', '-', not starting with '.', at most 200 characters"


def name_problem(field: str, value) -> str | None:
    """Why `value` cannot be a name that a file is named by, as "field: what is wrong"; None when it can."""
    if isinstance(value, str) and SAFE_NAME.fullmatch(value):
        return None
    shown = (
        f"{value[:60]!r}... ({len(value)} characters)" if isinstance(value, str) and len(value) > 60 else repr(value)
    )
    return f"{field}: {shown} is not a safe name ({SAFE_NAME_RULE})"


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _finite(value) -> TypeGuard[float]:
    return is_number(value) and math.isfinite(value)


def whole_count(value) -> int | None:
    """`value` as a count (3 or 3.0 -> 3), or None where it is none (2.5, -1, nan, 1e308, True, "3")."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_COUNT:
        return value
    return None


def shape_problems(record) -> list[str]:
    """Fields whose value is of the wrong kind, as "field: what is wrong"; [] for a usable record."""
    if not isinstance(record, dict):
        return [f"a record is a JSON object, not {type(record).__name__}"]
    problems = [problem for problem in (name_problem("cell", record.get("cell")),) if problem]
    for field in CHOICE_FIELDS:
        value = record.get(field.name)
        if value not in field.choices and (value is not None or field.required):
            problems.append(f"{field.name}: {value!r} is not one of {', '.join(field.choices)}")
    for name in TEXT_FIELDS:
        if record.get(name) is not None and not isinstance(record[name], str):
            problems.append(f"{name}: {record[name]!r} is not text")
    for name in NUMBER_FIELDS:
        if record.get(name) is not None and not is_number(record[name]):
            problems.append(f"{name}: {record[name]!r} is not a number")
    for name in ROUND_FIELDS:
        value = record.get(name)
        if value is not None and not (isinstance(value, list) and all(is_number(v) for v in value)):
            problems.append(f"{name}: {value!r:.60} is not a list of numbers")
    for name in OBJECT_FIELDS:
        if record.get(name) is not None and not isinstance(record[name], dict):
            problems.append(f"{name}: {record[name]!r:.60} is not an object")
    # Both name the baseline file a record is gated against and written to; "" or null: none given.
    env = record.get("env")
    names_a_file = (
        ("env.fingerprint", env.get("fingerprint") if isinstance(env, dict) else None),
        ("tier", record.get("tier")),
    )
    problems += [
        problem for name, value in names_a_file if value not in (None, "") and (problem := name_problem(name, value))
    ]
    return problems


def _value_problems(record: dict) -> list[str]:
    """Figures of an ok record that cannot be a measurement, as "field value" (e.g. "speedup nan")."""
    problems = []
    for name in REQUIRED_POSITIVE + REQUIRED_COUNTS + REQUIRED_ROUNDS:
        if record.get(name) is None or record.get(name) == []:
            problems.append(f"{name} missing")
    for name in REQUIRED_POSITIVE + OPTIONAL_POSITIVE:
        value = record.get(name)
        if value is not None and not (_finite(value) and value > 0):
            problems.append(f"{name} {value!r} (must be a finite number > 0)")
    for name in OPTIONAL_NONNEGATIVE:
        value = record.get(name)
        if value is not None and not (_finite(value) and value >= 0):
            problems.append(f"{name} {value!r} (must be a finite number >= 0)")
    for name in REQUIRED_COUNTS:
        value = record.get(name)
        if value is not None and whole_count(value) is None:
            problems.append(f"{name} {value!r} (must be a whole number >= 0)")
    for name in ROUND_FIELDS:
        bad = [v for v in record.get(name) or () if not (_finite(v) and v > 0)]
        if bad:
            problems.append(f"{name} holds {bad[0]!r} (ms per step must be finite and > 0)")
    for clock in CLOCKS:
        lo, hi = record.get(f"{clock}_lo"), record.get(f"{clock}_hi")
        if _finite(lo) and _finite(hi) and lo > hi:
            problems.append(f"{clock} interval [{lo!r}, {hi!r}] is upside down")
    return problems + _scaling_problems(record)


# How far above its world a scaling figure may read and still be a measurement: it is world x one device's
# median step / the DDP step's median, timed minutes apart in the same ranks, and a near-ideal step's ratio
# moves with the host. gpt2's eager DDP step, whose all-reduce hides behind its backward (0.9-1.8 ms exposed of
# 62-64 ms), read 61.81, 64.16 and 62.71 ms in three cells of one run and eager scaling 2.01-2.06 (2 x H200,
# 2aa41d77, 2026-11-27; docs/ddp.md). Figures 10-28 % above the world (compiled: 2.20, 2.38, 2.57) are not the
# same step on one device.
SCALING_ALLOWANCE = 0.05


def _scaling_problems(record: dict) -> list[str]:
    """Scaling figures above the ideal of the record's world (its rank count) by more than SCALING_ALLOWANCE; a
    record without a usable world_size claims no ideal (its scaling figures are checked as > 0 alone)."""
    world = record.get("world_size")
    if not (_finite(world) and world > 0):
        return []
    return [
        f"{name} {record[name]!r} (above {world} ranks' ideal of {world} by more than "
        f"{SCALING_ALLOWANCE:.0%}: not the same step on one device)"
        for name in SCALING_FIELDS
        if _finite(record.get(name)) and record[name] > world * (1 + SCALING_ALLOWANCE)
    ]


def _cleaned(record: dict) -> dict:
    """Non-finite numbers and counts that are no count become null; whole floats among counts become ints."""
    clean = dict(record)
    for name in NUMBER_FIELDS:
        if is_number(clean.get(name)) and not math.isfinite(clean[name]):
            clean[name] = None
    for name in REQUIRED_COUNTS:
        if clean.get(name) is not None:
            clean[name] = whole_count(clean[name])
    for name in ROUND_FIELDS:
        if isinstance(clean.get(name), list):
            clean[name] = [v for v in clean[name] if _finite(v)]
    return clean


def checked(record: dict) -> dict:
    """The record as the data side may use it: an ok record with figures that cannot be a measurement
    becomes a failed cell ("bad figures: speedup nan (must be ...)"), non-finite numbers become null, and
    counts become ints or null (see the module's docstring).
    Call `shape_problems` first: this assumes every figure is a number or null."""
    problems = _value_problems(record) if record.get("status") == "ok" else []
    clean = _cleaned(record)
    if problems:
        clean.update(status="failed", reason=f"{BAD_FIGURES}: {'; '.join(problems)}")
    return clean


# A baseline cell (perfgate.judge.baseline_fold.fold_cell): each clock's ratio, interval ends and run-to-run spread,
# and the record figures a baseline folds as a median or a max over runs, checked as the record checks them.
_FOLDED = [f for f in FIELDS if f.fold in ("median", "max")]
BASELINE_POSITIVE = tuple(f"{clock}{end}" for clock in CLOCKS for end in ("", "_lo", "_hi")) + tuple(
    f.name for f in _FOLDED if f.check == "> 0"
)
BASELINE_NONNEGATIVE = (
    tuple(f"{clock}_spread" for clock in CLOCKS) + tuple(f.name for f in _FOLDED if f.check == ">= 0") + ("runs_ok",)
)
BASELINE_COUNTS = tuple(f.name for f in _FOLDED if f.check == "count") + ("runs_ok",)
# A clock's spread is the sd of the log ratio between runs: 10 is a factor of e**10 (about 22 000) in the
# speedup, past anything measured, and it keeps exp() of the gate's lines (z * sd) inside the float range;
# a hand-edited 308 made `compare` die in an OverflowError (found by tests/test_properties.py).
MAX_SPREAD = 10.0


def baseline_cell_problems(cell) -> list[str]:
    """Why a stored baseline cell cannot be compared with, as "field: what is wrong"; [] when usable. A
    baseline is a committed file that people edit: a hand-edited figure must not pass or crash the gate."""
    if not isinstance(cell, dict):
        return [f"a cell is a JSON object, not {type(cell).__name__}"]
    if cell.get("status") not in STATUSES:
        return [f"status: {cell.get('status')!r} is not one of {', '.join(STATUSES)}"]
    problems = []
    for name in BASELINE_POSITIVE + BASELINE_NONNEGATIVE:
        value, floor = cell.get(name), 0 if name in BASELINE_NONNEGATIVE else None
        if value is not None and not (_finite(value) and (value >= 0 if floor == 0 else value > 0)):
            problems.append(f"{name}: {value!r} is not a finite number {'>= 0' if floor == 0 else '> 0'}")
    for name in BASELINE_COUNTS:
        value = cell.get(name)
        if value is not None and not (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
            problems.append(f"{name}: {value!r} is not a whole number >= 0")
    for clock in CLOCKS:
        spread = cell.get(f"{clock}_spread")
        if _finite(spread) and spread > MAX_SPREAD:
            problems.append(f"{clock}_spread: {spread!r} is past {MAX_SPREAD:g} (an sd of log ratios between runs)")
        runs = cell.get(f"{clock}_runs")
        if runs is not None and not (isinstance(runs, list) and all(_finite(v) and v > 0 for v in runs)):
            problems.append(f"{clock}_runs: {runs!r:.60} is not a list of finite numbers > 0")
    for count in COUNT_OF:  # the range of a count the runs disagreed on, around their median
        spanned, median = cell.get(range_field(count)), cell.get(count)
        if spanned is not None and not (
            isinstance(spanned, list)
            and len(spanned) == 2
            and all(_finite(v) and v >= 0 for v in spanned)
            and spanned[0] <= spanned[1]
            and (not _finite(median) or spanned[0] <= median <= spanned[1])
        ):
            problems.append(
                f"{range_field(count)}: {spanned!r:.60} is not [least, most], two finite numbers >= 0 "
                f"around {count} {median!r}"
            )
    if cell.get("status") == "ok" and cell.get("speedup") is None:
        problems.append("speedup: missing on an ok cell")
    return problems
