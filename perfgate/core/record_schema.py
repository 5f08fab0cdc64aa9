"""A JSON Schema (draft 2020-12) of one result record, generated from perfgate.core.record.FIELDS, for readers
outside perfgate (a dashboard's loader, a data warehouse). The package ships it as perfgate/core/record.schema.json;
tests/test_packaging.py fails when that file and FIELDS part. Regenerate it with
`python -m perfgate.core.record_schema`. Imports no torch.

It says what perfgate.core.validate checks of a record's shape (each field's JSON kind, choices, signs), not
every rule validate applies (finite numbers, an ok record's whole set of figures is checked there too, and a
record that fails it reads as a failed cell, not as an error).
"""

from __future__ import annotations

import json
from pathlib import Path

from perfgate.core.record import FIELDS, RECORD_SCHEMA
from perfgate.core.record_field import Field

PATH = Path(__file__).with_name("record.schema.json")
KINDS = {str: "string", int: "integer", float: "number", list: "array", dict: "object"}
# What each `check` of a Field asks of a non-null value, in JSON Schema words.
CHECKS: dict[str, dict[str, object]] = {
    "text": {"minLength": 1},
    "> 0": {"exclusiveMinimum": 0},
    ">= 0": {"minimum": 0},
    "count": {"minimum": 0},
    "rounds": {"items": {"type": "number", "exclusiveMinimum": 0}},
}


def _property(field: Field) -> dict:
    kind: dict[str, object] = {"type": [KINDS[field.type], "null"]}
    if field.check == "choice":
        kind["enum"] = [*field.choices, None]
    kind |= CHECKS.get(field.check, {})
    text = "; ".join(filter(None, (field.doc, f"unit: {field.unit}" if field.unit else "")))
    return kind | ({"description": text} if text else {})


def json_schema() -> dict:
    """The schema: every field of FIELDS as a property (null where not measured); a required choice on every
    record, a required figure on an ok record."""
    always = [f.name for f in FIELDS if f.required and f.check == "choice"]
    when_ok = [f.name for f in FIELDS if f.required and f.check != "choice"]
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "$id": f"https://perfgate/record.schema.json#schema-{RECORD_SCHEMA}",
        "title": f"perfgate result record, schema {RECORD_SCHEMA}",
        "description": "One cell's result: one JSON line of a perfgate results file (perfgate/core/record.py). "
        "Older records lack later fields, which read as null.",
        "type": "object",
        "properties": {f.name: _property(f) for f in FIELDS},
        "required": always,
        "if": {"properties": {"status": {"const": "ok"}}},
        "then": {"required": when_ok, "properties": {name: {"not": {"type": "null"}} for name in when_ok}},
    }


def render() -> str:
    return json.dumps(json_schema(), indent=1, sort_keys=True) + "\n"


if __name__ == "__main__":
    PATH.write_text(render(), encoding="utf-8")
    print(f"wrote {PATH}")
