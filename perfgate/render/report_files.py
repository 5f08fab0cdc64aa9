"""A gated run's reports as files: the Markdown digest and the JSON report, written where asked.

Shared by both faces (`perfgate compare` and the plugin's --perf-report), so neither imports the other.
Imports no torch.
"""

from __future__ import annotations

import json

from perfgate.core.output import write_atomic
from perfgate.render.report import markdown, md_text, to_json


def write_reports(outcome, markdown_path: str | None, json_path: str | None, paired=None) -> str:
    """The markdown (returned, and written where asked) and JSON reports of a gated run; a run that could not
    be compared gets a report saying why, so a PR comment never reads as an empty pass. `paired`: a paired
    run's verdict on the clocks (perfgate.ab.verdict.PairedVerdict), shown first; the exit code is both's."""
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
    unjudged = [
        (outcome.unfinished, "did not finish** (the run was stopped; not judged, so the run is unsure unless a "
         "regression shows)"),
        (outcome.broken, "were not measured: perfgate's own paired engine failed** (exit 3, a crash in perfgate, "
         "never a verdict on the code)"),
    ]  # fmt: skip
    for cells, why in unjudged:
        listed = "".join(f"- {md_text(line)}\n" for line in cells)
        text = f"**{len(cells)} cell(s) {why}:\n\n{listed}\n{text}" if cells else text
    exit_code = outcome.exit_code
    if paired is not None and paired.cells:
        text = paired.markdown() + "\n---\n\n" + text
        exit_code = paired.combined_exit(exit_code)
    _write(markdown_path, text)
    _write(
        json_path,
        json.dumps(
            {
                "report_schema": 1,
                "exit_code": exit_code,
                "errors": list(outcome.errors),
                "unfinished": list(outcome.unfinished),
                "broken": list(outcome.broken),
                "reports": [to_json(r) for r in outcome.reports],
                "paired": paired.as_json() if paired is not None else None,
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
