"""One field of the result record (Field), and the fields a clock or a count brings: the building blocks of
the record's one table, perfgate.core.record.FIELDS. Kept apart from the table so that a group of fields in a
module of its own (perfgate.core.record_ddp_fields, which the table splices in) builds on Field without importing
the table back. Imports no torch.
"""

from __future__ import annotations

from dataclasses import dataclass

from perfgate.core.clocks import DEVICE, WALL, Clock, Count


@dataclass(frozen=True)
class Field:
    """One field of a record.

    check     what validate asks of a non-null value: "text", "choice" (one of `choices`), "object" (a JSON
              object), "> 0" or ">= 0" (a finite number), "count" (a whole number >= 0), "rounds" (a list of
              ms > 0), or "" (nothing)
    required  never null: on every record for a choice, on an ok record for a figure (else a failed cell)
    fold      how a baseline cell holds it over runs (perfgate.judge.baseline_fold.fold_cell): "verbatim" (the
              last run's), "median", "max", "clock" (a ratio: median, per-run values, run-to-run spread and the
              envelope of the runs' intervals), "custom" (fold_cell says how), or "" (not kept)
    column    the history keeps it as an SQLite column (of `type`), not only inside the stored JSON
    """

    name: str
    type: type  # str | int | float | list | dict: its JSON kind when not null
    unit: str = ""  # ms are per step; "x" is an eager / compiled ratio
    check: str = ""
    required: bool = False
    fold: str = ""
    column: bool = False
    choices: tuple[str, ...] = ()
    default: object = None  # its value in a new record, before the cell measures it
    doc: str = ""


def clock_fields(clock: Clock, doc: str, rounds_doc: str = "", ms_doc: str = "") -> tuple[Field, ...]:
    """A clock's fields (perfgate.core.clocks.Clock): eager's and compiled's rounds and their medians, and the
    ratio with its 95 % interval. The wall clock's are required and history columns: every ok record has them.
    The device clock's ratio is a history column too: its trend and change points sit beside the wall's, since
    the wall ratio of a host-bound step follows the host CPU."""
    wall = clock is WALL
    trend = clock in (WALL, DEVICE)
    return (
        Field(clock.eager_rounds, list, "ms", "rounds", required=wall, default=[], doc=rounds_doc),
        Field(clock.compiled_rounds, list, "ms", "rounds", required=wall, default=[]),
        Field(clock.eager_ms, float, "ms", "> 0", required=wall, fold="median", column=wall, doc=ms_doc),
        Field(clock.compiled_ms, float, "ms", "> 0", required=wall, fold="median", column=wall),
        Field(clock.ratio, float, "x", "> 0", required=wall, fold="clock", column=trend, doc=doc),
        Field(f"{clock.ratio}_lo", float, "x", "> 0", required=wall, column=trend, doc="its 95 % interval"),
        Field(f"{clock.ratio}_hi", float, "x", "> 0", required=wall, column=trend),
    )


def count_fields(count: Count) -> tuple[Field, ...]:
    """A count's fields (perfgate.core.clocks.Count): eager's and compiled's, per step (a mean over the counted
    steps: a whole number where every step did the same work), folded as a median and kept as history columns."""
    doc = f"{count.label} per step (perfgate.measure.counts); null where not countable here (counts_note)"
    eager, compiled = count.fields
    return (
        Field(eager, float, "per step", ">= 0", fold="median", column=True, doc=doc),
        Field(compiled, float, "per step", ">= 0", fold="median", column=True),
    )
