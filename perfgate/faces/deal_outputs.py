"""A dealt run's outputs in DIR (perfgate.faces.deal): cleared before it, its sessions' records merged after, its
one report, and that report marked where a session ended without its verdict. Imports no torch."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Sequence

from perfgate.core import exits
from perfgate.core.output import OutputError, write_atomic

NO_CELLS = 5  # pytest.ExitCode.NO_TESTS_COLLECTED, without importing pytest here: a session dealt no cell
VERDICTS = (exits.PASS, exits.REGRESSION, exits.UNUSABLE, NO_CELLS)  # a session's exits that can be its verdict


def clear(out: Path, folders: Sequence[Path]) -> None:
    """An earlier run's outputs in DIR: the plugin appends to a results file, and a merge must hold this run's."""
    for path in (out / "results.jsonl", out / "report.md", out / "report.json"):
        path.unlink(missing_ok=True)
    for folder in {*folders, out / "data-parallel"}:
        shutil.rmtree(folder, ignore_errors=True)


def merge(folders: Sequence[Path], out: Path) -> Path | None:
    """Every session's records in one file, session by session: what the later steps (report, history) read;
    None where no session wrote one."""
    texts = [p.read_text(encoding="utf-8") for folder in folders if (p := folder / "results.jsonl").exists()]
    if not any(texts):
        return None
    merged = out / "results.jsonl"
    merged.write_text("".join(texts), encoding="utf-8")
    return merged


def judge(merged: Path, baseline: str | None, paired_run: bool, out: Path) -> int:
    """The run's one report: compare against the baseline, else the paired verdict over every session (a run
    neither paired nor gated has none)."""
    if baseline is not None:
        from perfgate.faces.compare import compare_files

        return compare_files([str(merged)], baseline, str(out / "report.md"), str(out / "report.json"))
    if not paired_run:
        return exits.PASS
    from perfgate.ab.verdict import PairedVerdict
    from perfgate.core.records_file import RecordFileError, load_records

    try:  # each cell's final record, as each session judged it: a checkpoint is no verdict
        paired = PairedVerdict.of(load_records([str(merged)]), baseline=False)
        if not (paired.cells or paired.unjudged):  # every cell skipped: nothing compared, never a pass
            return exits.UNUSABLE
        paired.write_reports(str(out))
    except (RecordFileError, OutputError) as err:
        print(f"perfgate deal: no report of the run: {err}", file=sys.stderr)
        return exits.UNUSABLE
    # The paired cells' verdicts as one; unjudged cells (no baseline anywhere) are the data-parallel session's own
    # exit, 2.
    return PairedVerdict(paired.cells).exit_code


def exit_of(code: int) -> int:
    """A session's return code as one of its exits: ended by a signal (-N) is 2, never a pass."""
    return code if code >= 0 else exits.UNUSABLE


def mark_lost(out: Path, ended: Sequence[tuple[str, int]], judged: int, final: int, interrupted: bool) -> None:
    """The run's report where a session ended without its verdict in the records (killed by a signal, crashed,
    or the run `interrupted`) and the run's exit, `final`, is worse than the report's, `judged`: the report judged
    only what the others kept. It then says so above its verdict, naming those sessions (`ended`: each one's where
    and return code), and its JSON carries the run's exit: a PR comment posted from it never reads PASS for a run
    that was not. A session's own verdict (an unsure data-parallel session's 2) marks nothing."""
    lost = [(where, code) for where, code in ended if code < 0 or code not in VERDICTS]
    if judged >= final or not (lost or interrupted):
        return
    named = ", ".join(
        f"{where} {'killed by signal ' + str(-code) if code < 0 else f'exit {code}'}" for where, code in lost
    )
    named = named or "the run was interrupted"
    banner = (
        f"**perfgate deal: exit {final}, not this report's {judged}**: the report below judges only the records "
        f"the sessions kept, and not every session ended with its verdict ({named}).\n\n---\n\n"
    )
    markdown, report = out / "report.md", out / "report.json"
    try:
        if markdown.exists():
            write_atomic(str(markdown), banner + markdown.read_text(encoding="utf-8"))
        if report.exists():
            body = json.loads(report.read_text(encoding="utf-8"))
            body.update(exit_code=final, sessions=[{"session": where, "exit": code} for where, code in ended])
            write_atomic(str(report), json.dumps(body, indent=2, sort_keys=True) + "\n")
    except (OSError, OutputError, ValueError) as err:
        print(f"perfgate deal: could not mark the report of a run with lost sessions: {err}", file=sys.stderr)
