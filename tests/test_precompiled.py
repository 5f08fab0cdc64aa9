"""The markers that let a later run skip the precompile of cells a kept cache already holds."""

import os
import subprocess
import sys
from types import SimpleNamespace

import pytest

from perfgate.core.matrix import Cell
from perfgate.measure import precompile, precompiled
from perfgate.plugin.session_plan import SessionPlan

CELLS = [
    Cell("gpt2", "train", "inductor_default", "amp_bf16", "gpu"),
    Cell("gpt2", "infer", "inductor_default", "amp_bf16", "gpu"),
]
REGISTRY = "fixtures.zoo:REGISTRY"


def _keys(**changes):
    args = dict(tf32=True, gpu="NVIDIA H100 80GB HBM3", registry=REGISTRY) | changes
    return {cell.id: precompiled.key(cell, **args) for cell in CELLS}


def test_a_cell_precompiled_ok_is_held_and_one_that_failed_is_compiled_again(tmp_path):
    keys = _keys()
    assert precompiled.split(CELLS, str(tmp_path), keys) == (CELLS, [])
    precompiled.mark(
        [{"cell": CELLS[0].id, "status": "ok"}, {"cell": CELLS[1].id, "status": "failed"}], str(tmp_path), keys
    )
    assert precompiled.split(CELLS, str(tmp_path), keys) == ([CELLS[1]], [CELLS[0]])


@pytest.mark.parametrize("change", [{"tf32": False}, {"gpu": "NVIDIA H200"}])
def test_a_marker_of_another_environment_is_not_held(tmp_path, change):
    precompiled.mark([{"cell": c.id, "status": "ok"} for c in CELLS], str(tmp_path), _keys())
    assert precompiled.split(CELLS, str(tmp_path), _keys(**change)) == (CELLS, [])


def test_two_trees_sharing_a_cache_keep_each_others_markers(tmp_path, monkeypatch):
    ours = _keys()
    monkeypatch.setattr(precompiled, "sources_digest", lambda registry: "another tree")
    theirs = _keys()
    for keys in (ours, theirs):
        precompiled.mark([{"cell": c.id, "status": "ok"} for c in CELLS], str(tmp_path), keys)
    assert precompiled.split(CELLS, str(tmp_path), ours) == ([], CELLS)
    assert precompiled.split(CELLS, str(tmp_path), theirs) == ([], CELLS)


def test_a_source_change_changes_the_key(monkeypatch):
    before = _keys()
    monkeypatch.setattr(precompiled, "sources_digest", lambda registry: "another tree")
    assert _keys() != before


def test_a_torn_marker_is_compiled_again(tmp_path):
    keys = _keys()
    (tmp_path / precompiled.MARKERS).mkdir()
    precompiled.marker(str(tmp_path), CELLS[0].id, keys[CELLS[0].id]).write_text('{"ke')
    assert precompiled.split(CELLS[:1], str(tmp_path), keys) == (CELLS[:1], [])


def test_the_key_is_the_same_in_another_process():
    """A set of paths iterates in hash-seed order: the key must not (an H100 run's markers never matched)."""
    code = (
        "from perfgate.core.matrix import Cell; from perfgate.measure import precompiled; "
        "print(precompiled.key(Cell('gpt2', 'train', 'inductor_default', 'amp_bf16', 'gpu'), True, 'G', "
        f"{REGISTRY!r}))"
    )
    keys = {
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    }
    assert len(keys) == 1


def test_the_launch_configs_a_precompile_timed_are_forgotten_and_older_ones_kept(tmp_path):
    """Precompile processes share the GPU while inductor times each kernel's launch configs: the picks they
    wrote (`*.best_config`) go, so a cell picks again alone; picks from before it began, and kernels, stay."""
    from perfgate.measure.precompile import forget_timed_picks

    old = tmp_path / "amp_bf16" / "ab" / "old.best_config"
    new = tmp_path / "amp_bf16" / "cd" / "new.best_config"
    kernel = tmp_path / "amp_bf16" / "cd" / "new.py"
    for path in (old, new, kernel):
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
    os.utime(old, (1_000.0, 1_000.0))
    assert forget_timed_picks(str(tmp_path), since=2_000.0) == 1
    assert old.exists() and kernel.exists() and not new.exists()


def test_the_cells_a_cache_holds_are_read_from_its_markers_under_any_key(tmp_path):
    assert precompiled.marked(str(tmp_path)) == set()
    precompiled.mark([{"cell": CELLS[0].id, "status": "ok"}], str(tmp_path), _keys())
    precompiled.mark([{"cell": CELLS[0].id, "status": "ok"}], str(tmp_path), _keys(gpu="another"))
    assert precompiled.marked(str(tmp_path)) == {CELLS[0].id}


def test_picks_are_held_once_a_cell_timed_them_and_gone_once_a_precompile_compiled_it_again(tmp_path):
    """A compiled marker alone says the picks are gone (the precompile removed the ones it timed); a cell that
    ran whole marks them, under its key and its two sides only; the next precompile of the cell takes that marker
    away."""
    keys, ids, cache, pair = _keys(), [c.id for c in CELLS], str(tmp_path), "abc123 | this tree"
    precompiled.mark([{"cell": i, "status": "ok"} for i in ids], cache, keys)
    assert precompiled.picks_timed(ids, cache, keys, pair) == set()
    precompiled.mark_picked(cache, ids[0], keys[ids[0]], pair)
    assert precompiled.picks_timed(ids, cache, keys, pair) == {ids[0]}
    assert precompiled.picks_timed(ids, cache, _keys(gpu="NVIDIA H200"), pair) == set()
    assert precompiled.picks_timed(ids, cache, keys, "def456 | this tree") == set()  # another base's kernels
    assert precompiled.marked(cache) == set(ids)  # the picks markers are no compiled markers
    precompiled.mark([{"cell": ids[0], "status": "ok"}], cache, keys)
    assert precompiled.picks_timed(ids, cache, keys, pair) == set()


def test_a_precompile_killed_before_its_end_leaves_no_picks_for_the_next_run(tmp_path):
    """Its mark (its pid, written as it began) outlives a SIGKILL: the next run removes the picks written since,
    which it timed on a shared GPU, and the picks markers that would vouch for them; a live one's mark stays."""
    cache, keys = tmp_path, _keys()
    kernel = cache / "ab" / "k.best_config"
    kernel.parent.mkdir()
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (cache / precompile.RUNNING).mkdir()
    (cache / precompile.RUNNING / dead.stdout.strip()).touch()
    (cache / precompile.RUNNING / str(os.getpid())).touch()  # this process: alive, precompiling
    kernel.write_text("{}")
    precompiled.mark_picked(str(cache), CELLS[0].id, keys[CELLS[0].id], "pair")
    assert precompile.forget_abandoned(str(cache)) == 1
    assert not kernel.exists() and precompiled.picks_timed([CELLS[0].id], str(cache), keys, "pair") == set()
    assert [p.name for p in (cache / precompile.RUNNING).iterdir()] == [str(os.getpid())]


class _Session(SessionPlan):
    """A session's plan alone: its paired cells, its kept cache and its two sides."""

    def __init__(self, cache_dir: str):
        self.config = SimpleNamespace(getoption={"--perf-cache-dir": cache_dir}.get)
        self.tf32, self.registry, self.picked, self.keys = True, REGISTRY, set(), {}
        self.pairing = SimpleNamespace(described=lambda: "abc123 | this tree")

    def measures_paired(self, cell):
        return True


def test_a_paired_session_reads_the_picks_its_cells_timed_in_an_earlier_run(tmp_path):
    """The first run's cells prepare one side after the other and mark their picks; the next run's prepare at
    once (duet.measure's `picked`), but a cell that failed, or whose base failed, marks nothing."""
    pytest.importorskip("torch")
    cells = [Cell("gpt2", p, "inductor_default", "fp32", "cpu") for p in ("train", "infer")]
    cells.append(Cell("vit_b16", "infer", "inductor_default", "fp32", "cpu"))
    first = _Session(str(tmp_path))
    first.find_picked(cells)
    assert first.picked == set() and set(first.keys) == {c.id for c in cells}
    first.keep_picks(cells[0], {"status": "ok", "paired": {"outcome": "ok"}})
    first.keep_picks(cells[1], {"status": "failed", "paired": {"outcome": "ok"}})
    first.keep_picks(cells[2], {"status": "ok", "paired": {"outcome": "unsure", "error": "side A failed: ran eager"}})
    second = _Session(str(tmp_path))
    second.find_picked(cells)
    assert second.picked == {cells[0].id}
