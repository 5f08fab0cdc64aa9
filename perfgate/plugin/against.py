"""The plugin's paired mode: `--perf-against REV` (and/or `--perf-against-python`, `--perf-against-env`) measures
every cell beside the base side on this runner through the paired engine (perfgate.ab), and the session end
judges the clocks by the paired verdict and the rest by the committed baseline. Side B is this checkout, unless
`--perf-b-rev`, `--perf-b-python` or `--perf-b-env` name another. Imports no torch.
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
from perfgate.core.matrix import PAIRED_OPTIONS

OPTIONS = PAIRED_OPTIONS[:3]
# Side B's, where it is not this checkout as this pytest runs it: a revision (a bisection's step), another
# interpreter, or variables of its own (an upgrade's new release on PYTHONPATH). The session, its collection
# and the coordinator stay this tree's; only B's worker runs B.
B_OPTIONS = PAIRED_OPTIONS[3:]


def base_side(config: pytest.Config) -> Side | None:
    """The base side the options name, checked before any cell runs; None when no --perf-against* (nor
    --perf-b-*) is given. A given-but-empty value is a usage error naming the option (an unset $BASE_SHA must not
    pass a PR)."""
    if not any(config.getoption(name) is not None for name in OPTIONS + B_OPTIONS):
        return None
    if getattr(config.option, "numprocesses", None):
        raise SideError("--perf-against (and --perf-b-*) run both sides on one GPU: not under -n (xdist)")
    return _side(config, "A", OPTIONS)


def tree_side(config: pytest.Config) -> Side:
    """Side B: this checkout and interpreter unless --perf-b-rev, --perf-b-python or --perf-b-env say
    otherwise, checked as side A's options are."""
    return _side(config, "B", B_OPTIONS)


def _side(config: pytest.Config, name: str, options: tuple[str, str, str]) -> Side:
    opt = config.getoption
    rev_option, python_option, env_option = options
    # This tree is pytest's rootdir, which may sit below the checkout's top (a suite in a subfolder of a
    # larger repository, or a copy of the tree inside another checkout): a revision's side is that same folder
    # of its worktree. Started in the checkout's top instead, this tree's worker ran that folder's code.
    root, revision = str(config.rootpath), ""
    if opt(rev_option) is not None:
        here = sides.repo_root(root)
        tree, revision = sides.checkout(rev_option, opt(rev_option), here, Path(here) / ".perfgate")
        inside = Path(root).resolve().relative_to(Path(here).resolve())
        root = str(Path(tree) / inside)
        if not Path(root).is_dir():  # pytest's rootdir is untracked there, or was added since
            raise SideError(
                f"{rev_option} {opt(rev_option)!r}: that revision has no {inside}/, the folder pytest runs this "
                f"suite from ({config.rootpath}); run from a folder that both revisions hold"
            )
    python = sys.executable
    if opt(python_option) is not None:
        python = sides.check_python(python_option, opt(python_option))
    env = sides.parse_env(env_option, opt(env_option))
    if env.get("PYTHONPATH"):  # a worker starts in its side's checkout: relative entries would resolve there
        env["PYTHONPATH"] = os.pathsep.join(os.path.abspath(e) for e in env["PYTHONPATH"].split(os.pathsep) if e)
    return Side(name, root, python, env, revision)


class Pairing:
    """A session's paired state: the two sides' warm workers (their stderr in <results>.duet/), one compile
    cache both read, and where side A's records go (<results>.against.jsonl: never read as this tree's)."""

    def __init__(
        self,
        base: Side,
        results_path: Path,
        cache_dir: str | None,
        here: str,
        tree: Side | None = None,
        eager_wall: bool = False,
    ):
        import perfgate
        from perfgate.ab.pair_workers import Duet
        from perfgate.measure.launch import import_path

        self.owned_cache, self.eager_wall = cache_dir is None, eager_wall
        self.cache_dir = cache_dir or tempfile.mkdtemp(prefix="perfgate-paired-cache-")
        self.against_path = results_path.with_name(f"{results_path.stem}.against.jsonl")
        # The two workers' stderr (compile logs, a crash's traceback) beside the results, kept after the run.
        scratch = results_path.with_name(f"{results_path.stem}.duet")
        b = tree or Side("B", here, sys.executable, {})
        # Side B runs other code than this session (a revision, interpreter or variables of its own).
        self.b_elsewhere = bool(b.revision or b.python != sys.executable or b.env)
        engine = os.path.dirname(perfgate.__file__)
        self.duet = Duet(base, b, scratch, here, import_path(), engine)

    def described(self) -> str:
        """Both sides, as a picks marker keeps them (perfgate.measure.precompiled.picks_timed): their code decides
        which kernels the cache holds picks for."""
        return " | ".join(side.describe() for side in self.duet.sides)

    def spawn(self) -> None:
        """Start both sides' first workers now, not waiting for them: their imports overlap the precompile."""
        self.duet.spawn_spares()

    def run(self, job, progress, picked: bool = False) -> dict:
        """B's record of one cell, carrying the paired summary; A's record appended to against_path. `picked`:
        the shared cache holds the cell's compiles and launch-config picks (duet.measure)."""
        from perfgate.ab import duet
        from perfgate.core.records_file import append_record
        from perfgate.measure import record_builder

        job = replace(job, options=replace(job.options, cache_dir=self.cache_dir))
        try:
            record_b, record_a, summary = duet.measure(
                self.duet, job, progress, picked=picked, eager_wall=self.eager_wall
            )
        except Exception as err:  # noqa: BLE001 - a paired cell that cannot run fails alone, never the session
            from perfgate.core.record import ENGINE_FAILED, error_line, failed_record

            self.duet.renew()
            return failed_record(job.cell, f"{ENGINE_FAILED}: {error_line(err)}", job.run_id)
        if record_a is not None:
            append_record(self.against_path, record_builder.in_run(record_a, job.run_id, record_a.get("remeasure", "")))
        record_builder.merge_paired(record_b, summary)
        return record_b

    def close(self) -> None:
        self.duet.close()
        if self.owned_cache:
            shutil.rmtree(self.cache_dir, ignore_errors=True)
