"""A gated run's reports as files: the Markdown digest and the JSON report, written where asked.

Shared by both faces (`perfgate compare` and the plugin's --perf-report), so neither imports the other.
Imports no torch.
"""

from __future__ import annotations

import json

from perfgate.core.output import write_atomic
from perfgate.render.report import markdown, md_text, to_json


def write_reports(outcome, markdown_path: str | None, json_path: str | None) -> str:
    """The markdown (returned, and written where asked) and JSON reports of a gated run; a run that could not
    be compared gets a report saying why, so a PR comment never reads as an empty pass."""
    text = "\n\n---\n\n".join(markdown(r) for r in outcome.reports)
    if outcome.errors:
        text = (
            "\n".join(
                [
                    f"**perfgate: cannot compare** (exit {outcome.exit_code}): nothing was judged",
                    "",
                    *(f"- {md_text(error)}" for error in outcome.errors),
                ]
            )
            + "\n"
        )
    _write(markdown_path, text)
    _write(
        json_path,
        json.dumps(
            {
                "exit_code": outcome.exit_code,
                "errors": list(outcome.errors),
                "reports": [to_json(r) for r in outcome.reports],
            },
            indent=2,
            sort_keys=True,
        )
        + "\n",
    )
    return text


def _write(path: str | None, text: str) -> None:
    if path:
        write_atomic(path, text)  # OutputError names a path that cannot be written
