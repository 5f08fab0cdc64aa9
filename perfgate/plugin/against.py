"""The plugin's paired mode: `--perf-against REV` (and/or `--perf-against-python`, `--perf-against-env`) measures
every cell beside the base side on this runner through the paired engine (perfgate.ab), and the session end
judges the clocks by the paired verdict and the rest by the committed baseline. Imports no torch.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from dataclasses import replace
from pathlib import Path

import pytest

from perfgate.ab import sides
from perfgate.ab.sides import Side, SideError

OPTIONS = ("--perf-against", "--perf-against-python", "--perf-against-env")


def base_side(config: pytest.Config) -> Side | None:
    """The base side the options name, checked before any cell runs; None when no --perf-against* is given.
    A given-but-empty value is a usage error naming the option (an unset $BASE_SHA must not pass a PR)."""
    opt = config.getoption
    given = [name for name in OPTIONS if opt(name) is not None]
    if not given:
        return None
    if getattr(config.option, "numprocesses", None):
        raise SideError("--perf-against runs both sides on one GPU: it cannot run under -n (xdist)")
    here = sides.repo_root(str(config.rootpath))
    root, revision = here, ""
    if opt("--perf-against") is not None:
        root, revision = sides.checkout("--perf-against", opt("--perf-against"), here, Path(here) / ".perfgate")
    python = sys.executable
    if opt("--perf-against-python") is not None:
        python = sides.check_python("--perf-against-python", opt("--perf-against-python"))
    env = sides.parse_env("--perf-against-env", opt("--perf-against-env"))
    return Side("A", root, python, env, revision)


class Pairing:
    """A session's paired state: the two sides' warm workers (their stderr in <results>.duet/), one compile
    cache both read, and where side A's records go (<results>.against.jsonl: never read as this tree's)."""

    def __init__(self, base: Side, results_path: Path, cache_dir: str | None, here: str):
        import perfgate
        from perfgate.ab.pair_workers import Duet
        from perfgate.measure.launch import import_path

        self.owned_cache = cache_dir is None
        self.cache_dir = cache_dir or tempfile.mkdtemp(prefix="perfgate-paired-cache-")
        self.against_path = results_path.with_name(f"{results_path.stem}.against.jsonl")
        # The two workers' stderr (compile logs, a crash's traceback) beside the results, kept after the run.
        scratch = results_path.with_name(f"{results_path.stem}.duet")
        b = Side("B", here, sys.executable, {})
        engine = os.path.dirname(perfgate.__file__)
        self.duet = Duet(base, b, scratch, here, import_path(), engine)

    def spawn(self) -> None:
        """Start both sides' first workers now, not waiting for them: their imports overlap the precompile."""
        self.duet.spawn_spares()

    def run(self, job, progress, warm: bool = False) -> dict:
        """B's record of one cell, carrying the paired summary; A's record appended to against_path. `warm`: the
        cell was precompiled into the shared cache, so the two sides prepare at once."""
        from perfgate.ab import duet
        from perfgate.core.records_file import append_record

        job = replace(job, options=replace(job.options, cache_dir=self.cache_dir))
        try:
            record_b, record_a, summary = duet.measure(self.duet, job, progress, warm=warm)
        except Exception as err:  # noqa: BLE001 - a paired cell that cannot run fails alone, never the session
            from perfgate.core.record import error_line, new_record

            self.duet.renew()
            record = new_record(job.cell, {}, job.run_id, process="worker")
            record.update(status="failed", reason=f"the paired engine could not run the cell: {error_line(err)}")
            return record
        if record_a is not None:
            append_record(self.against_path, {**record_a, "run_id": job.run_id})
        record_b["paired"] = summary
        return record_b

    def close(self) -> None:
        self.duet.close()
        if self.owned_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
