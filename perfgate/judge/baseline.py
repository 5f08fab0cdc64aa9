"""Baselines: many independent runs of the suite folded into one stored file per environment and tier.

Imports no torch. A baseline file is `<dir>/<fingerprint>_<tier>.json`, human-diffable (indent 2, sorted
keys). It folds RUNS, each a pytest session in its own process with its own compiles: records group into
runs by `run_id` whatever file they sit in, and records without one count one run per results file.
Run-to-run noise is what a gate must know (a compiled resnet50 step moved 24.9-28.3 ms across eight
processes while each process's own interval was narrower), so each clock keeps its per-run ratios and their
spread beside the median.

    header  schema, fingerprint, tier, device (env.gpu), versions (env minus fingerprint), created (UTC
            date), runs, host_cpus (the runs' distinct env.cpu_model, sorted: the gate's host-CPU advisory),
            processes (where the runs' cells ran, record_reading.process_of, sorted; [] where no record says: the
            gate's note on a run measured elsewhere)
    cells   {cell id: {runs_ok, and each record field that perfgate.core.record.FIELDS gives a `fold`: identity
            as the last run had it, medians and maxima over the ok runs (a compiled peak only from records
            whose schema measured it as today: record_reading.compiled_peak_is_right), status, reason, numerics,
            compile_cache and bound as fold_cell makes them (perfgate.judge.baseline_fold), and for each clock m
            in record.CLOCKS: m, m_runs, m_spread, m_lo, m_hi (the host clock from records of HOST_ROUNDS_SCHEMA
            or later where two or more runs have it), and for each count of a step's work its runs disagreed on,
            `<count>_range`: [least, most] (clocks.range_field)}}

A clock that no run measured (a CPU baseline has no device clock; one made before schema-3 records has
neither device nor host) is null with `m_runs` empty: the gate does not compare it. Baselines without the
clock fields load as they are (same BASELINE_SCHEMA).
"""

from __future__ import annotations

import contextlib
import datetime as _dt
import json
import os
import shlex
from pathlib import Path
from typing import Iterable, Sequence

from perfgate.core.clocks import COUNT_OF
from perfgate.core.output import write_atomic
from perfgate.core.record import FIELD, TIME_ALONE
from perfgate.core.record_reading import process_of, unfiled
from perfgate.core.text import parse_json
from perfgate.core.validate import baseline_cell_problems, name_problem
from perfgate.judge.baseline_fold import (
    band_spanned,
    counted_runs,
    fold_cell,
    measured_right,
    same_batch,
    values_of,
)

BASELINE_SCHEMA = 1


def update_commands(
    directory: str | os.PathLike = "baselines", fingerprint: str | None = None, tier: str | None = None
) -> tuple[str, str]:
    """How the baseline for (fingerprint, tier) in `directory` is made, named in every "missing baseline"
    message so the reader can act on it: the offline fold of results files, and a pytest run that selects
    that tier on that kind of device (a CPU fingerprint's cells are the `cpu` marker's) and saves there."""
    where = shlex.quote(str(directory))
    marks = "cpu" if (fingerprint or "").startswith("cpu-") else f"gpu and {tier or 'pr'}"
    return (
        f"perfgate baseline update RESULTS... --dir {where}",
        f'pytest perftests -m "{marks}" --perf-save-baseline {where}',
    )


UPDATE_COMMANDS = update_commands()


class BaselineError(Exception):
    """A baseline that cannot be used to compare; the message says which file and how to make it."""


def baseline_path(directory: str | os.PathLike, fingerprint: str | None, tier: str | None) -> Path:
    """`<directory>/<fingerprint>_<tier>.json`; both come from records, so each must be a safe name (None is
    not): a crafted records file once wrote a baseline outside --dir (a fingerprint of "../.." or an absolute
    path)."""
    problems = [p for p in (name_problem("env.fingerprint", fingerprint), name_problem("tier", tier)) if p]
    if problems:
        raise BaselineError(f"no baseline file can be named for these records: {'; '.join(problems)}")
    return Path(directory) / f"{fingerprint}_{tier}.json"


def key_of(record: dict) -> tuple[str, str]:
    """(fingerprint, tier) of a record: which baseline file it belongs to."""
    fingerprint = (record.get("env") or {}).get("fingerprint")
    if not fingerprint:
        raise BaselineError(f"record {record.get('cell')!r} has no env.fingerprint; cannot pick a baseline")
    return fingerprint, record.get("tier") or "pr"


def group_by_key(records: Iterable[dict]) -> dict[tuple[str, str], list[dict]]:
    groups: dict[tuple[str, str], list[dict]] = {}
    for record in records:
        groups.setdefault(key_of(record), []).append(record)
    return groups


# ---------------------------------------------------------------------------------------------- rounding


def round_sig(value, digits: int = 4):
    """4 significant digits: 1.2345 -> 1.234, 26.789 ms -> 26.79; ints and None pass through."""
    if isinstance(value, bool) or not isinstance(value, float):
        return value
    return float(f"{value:.{digits}g}")


def _round_places(value, places: int):
    """`places` decimals, through a list's items; None passes through."""
    if isinstance(value, list):
        return [_round_places(v, places) for v in value]
    return None if value is None else round(float(value), places)


def _round_cell(cell: dict) -> dict:
    rounded: dict[str, object] = {}
    for name, value in cell.items():
        if name in COUNT_OF or name.removesuffix("_range") in COUNT_OF:
            # A count a step (a mean over counted steps) at its own 2 decimals, its range's ends alike, so that
            # the median stays inside the range: 4 significant digits moved 123456.5 past 123463.
            rounded[name] = _round_places(value, 2)
        elif name.startswith("peak_mem"):
            # MiB: a tenth of a MiB is far below anything a gate looks at.
            rounded[name] = _round_places(value, 1)
        elif name.endswith("_spread"):
            rounded[name] = round_sig(value, 3)
        elif isinstance(value, list):
            rounded[name] = [round_sig(v) for v in value]
        else:
            rounded[name] = round_sig(value)
    return rounded


def _last_per_cell(run: Iterable[dict]) -> dict[str, dict]:
    """One record per cell within a run: a later record (a confirm round) replaces an earlier one."""
    return {record["cell"]: record for record in run}


def _header(fingerprint: str, tier: str, env: dict, run_maps: Sequence[dict[str, dict]]) -> dict:
    cpus = {(r.get("env") or {}).get("cpu_model") for run in run_maps for r in run.values()}
    processes = {process_of(r) for run in run_maps for r in run.values() if r.get("status") == "ok"}
    return {
        "schema": BASELINE_SCHEMA,
        "fingerprint": fingerprint,
        "tier": tier,
        "device": env.get("gpu"),
        "versions": {k: v for k, v in env.items() if k != "fingerprint"},
        "created": _dt.datetime.now(_dt.timezone.utc).date().isoformat(),
        "runs": len(run_maps),
        "host_cpus": sorted(cpu for cpu in cpus if cpu),
        "processes": sorted(p for p in processes if p),
    }


def split_runs(sources: Sequence[Iterable[dict]]) -> list[list[dict]]:
    """Runs from sources of records (each source one results file, in order): one run per run_id across
    all sources, and one run per source for its records without a run_id. Runs keep first-seen order."""
    runs: dict[tuple, list[dict]] = {}
    for index, source in enumerate(sources):
        for record in source:
            run_id = record.get("run_id")
            runs.setdefault(("file", index) if run_id is None else ("id", str(run_id)), []).append(record)
    return list(runs.values())


def _refuse_unfit(runs: Sequence[list[dict]]) -> None:
    unfit = [r for run in runs for r in run if r.get("unfit")]
    if unfit:
        raise BaselineError(
            f"{len(unfit)} record(s) are unfit for a baseline ({unfit[0]['cell']}: "
            f"{unfit[0]['unfit']}); make the baseline from runs timed alone: {TIME_ALONE}"
        )


def _runs_by_key(sources: Sequence[Iterable[dict]]) -> dict[tuple[str, str], list[dict[str, dict]]]:
    """{(fingerprint, tier): one {cell id: record} per run}, runs grouped by `split_runs`. Records marked
    unfit (timed by xdist workers that shared the machine) are refused: BaselineError."""
    per_key: dict[tuple[str, str], list[dict[str, dict]]] = {}
    runs = split_runs(sources)
    _refuse_unfit(runs)
    for run in runs:
        # A cell skipped with no environment (a GPU cell on a machine without CUDA) belongs to no baseline.
        for key, records in group_by_key(r for r in run if not unfiled(r)).items():
            per_key.setdefault(key, []).append(_last_per_cell(records))
    return per_key


def _by_cell(run_maps: Sequence[dict[str, dict]]) -> dict[str, list[dict]]:
    """{cell id: its record in each run that had it}."""
    by_cell: dict[str, list[dict]] = {}
    for run_map in run_maps:
        for cell_id, record in run_map.items():
            by_cell.setdefault(cell_id, []).append(record)
    return by_cell


def build_baseline(sources: Sequence[Iterable[dict]]) -> dict[tuple[str, str], dict]:
    """{(fingerprint, tier): baseline} from sources of records (results files), grouped by `split_runs`.
    Records marked unfit (timed by xdist workers that shared the machine) are refused: BaselineError."""
    baselines = {}
    for (fingerprint, tier), run_maps in _runs_by_key(sources).items():
        by_cell = _by_cell(run_maps)
        env = next(iter(run_maps[0].values()))["env"]
        baseline = _header(fingerprint, tier, env, run_maps)
        baseline["cells"] = {cid: _round_cell(fold_cell(recs)) for cid, recs in sorted(by_cell.items())}
        baselines[(fingerprint, tier)] = baseline
    return baselines


# Fields that a cell's runs should agree on: its peaks (allocator-deterministic; past this much apart the
# memory rule would flag it: 20 % and 32 MiB) and its graph counts. A run that disagrees is a different
# program or a misreading; the fold keeps the maximum, so it would set the baseline unseen (schema-4
# records read gpt2 infer's compiled peak 8.5x high, and a baseline holding one of them hid it).
AGREE_FIELDS = {
    "peak_mem_eager_mb": (0.20, 32.0),
    "peak_mem_compiled_mb": (0.20, 32.0),
    "graph_breaks": (0.0, 0.0),
    "recompiles": (0.0, 0.0),
}


def disagreements(sources: Sequence[Iterable[dict]]) -> list[str]:
    """One line per baseline cell whose ok runs disagree on an AGREE_FIELDS field, naming the values and
    how many runs read each: what `perfgate baseline update` warns of before anyone commits the max. And one per
    count of a step's work (perfgate.core.clocks.COUNTS) whose runs lie past its band from their median, which
    repeat where the code did not change: the fold keeps their range (baseline_fold.band_spanned), each named."""
    lines = []
    for (_, tier), run_maps in sorted(_runs_by_key(sources).items()):
        for cell, records in sorted(_by_cell(run_maps).items()):
            lines += _disagreeing(tier, cell, records)
    return lines


def _disagreeing(tier: str, cell: str, records: Sequence[dict]) -> list[str]:
    """The lines of one cell, over the runs the fold keeps (the last run's batch, whatever its status; its ok
    runs; for a count, its counted steps)."""
    lines, ok = [], [r for r in same_batch(records) if r.get("status") == "ok"]
    for name in [*AGREE_FIELDS, *COUNT_OF]:
        values = values_of(measured_right(counted_runs(ok) if name in COUNT_OF else ok, name), name)
        if not values:
            continue
        lo, hi = min(values), max(values)
        if name in COUNT_OF:
            apart = band_spanned(name, values)
        else:
            fraction, delta = AGREE_FIELDS[name]
            apart = hi - lo > delta and hi > lo * (1 + fraction)
        if apart:
            counts = ", ".join(
                f"{v:g} ({values.count(v)} run{'s' * (values.count(v) > 1)})" for v in sorted(set(values))
            )
            if name in COUNT_OF:  # the fold keeps the range: a count that follows the machine passes
                kept = f"judges {name} from the runs' range {lo:g}-{hi:g}"
            else:
                kept = f"keeps the {'median' if FIELD[name].fold == 'median' else 'maximum'}"
            lines.append(
                f"{tier} {cell}: runs disagree on {name}: {counts}; the baseline {kept}, "
                "so check the odd runs before committing it"
            )
    return lines


# ---------------------------------------------------------------------------------------------- files

# A temp file this old is a write that was killed (SIGKILL, power): a live write takes well under a second.
STALE_TEMP_S = 600


def _remove_stale_temps(path: Path) -> None:
    """Remove what killed writes of this baseline left behind (`.<name>.XXXX.tmp`, mode 0600); readers never
    open them (they read `<name>` only), so this is tidiness, not safety."""
    now = _dt.datetime.now().timestamp()
    for temp in path.parent.glob(f".{path.name}.*.tmp"):
        with contextlib.suppress(OSError):  # another writer may remove it first
            if now - temp.stat().st_mtime > STALE_TEMP_S:
                temp.unlink()


def write_baseline(path: str | os.PathLike, baseline: dict) -> Path:
    """Write atomically (perfgate.core.output.write_atomic): a crash, a full disk or a serialisation error
    midway leaves the previous file untouched (a half-written baseline would fail every PR); an output that
    cannot be written raises OutputError naming the path."""
    text = json.dumps(baseline, indent=2, sort_keys=True) + "\n"  # before any file: a bad value raises here
    path = Path(path)
    if path.parent.is_dir():
        _remove_stale_temps(path)
    return write_atomic(path, text)


def save_baselines(sources: Sequence[Iterable[dict]], directory: str | os.PathLike) -> list[Path]:
    """Build from sources of records (results files) and write one file per (fingerprint, tier); the CLI
    and the plugin both call this."""
    return [
        write_baseline(baseline_path(directory, fp, tier), baseline)
        for (fp, tier), baseline in sorted(build_baseline(sources).items())
    ]


def _how_to_make(path: Path | None = None, fingerprint: str | None = None, tier: str | None = None) -> str:
    commands = "\n  ".join(update_commands(path.parent if path else "baselines", fingerprint, tier))
    return (
        f"make one on this kind of machine (several runs, 5 or more, each a separate process, give the "
        f"gate the run-to-run noise) with:\n  {commands}"
    )


def load_baseline(path: str | os.PathLike, fingerprint: str | None = None, tier: str | None = None) -> dict:
    """Read and check a baseline; with `fingerprint`/`tier`, refuse one made for another environment."""
    path = Path(path)
    if not path.is_file():
        raise BaselineError(f"no baseline at {path}; {_how_to_make(path, fingerprint, tier)}")
    try:
        baseline = parse_json(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise BaselineError(
            f"baseline {path} is not valid JSON ({err}); restore it from git or remake it with: {UPDATE_COMMANDS[0]}"
        ) from None
    except OSError as err:
        raise BaselineError(f"baseline {path} cannot be read: {err.strerror or err}") from None
    if not isinstance(baseline, dict) or baseline.get("schema") != BASELINE_SCHEMA:
        found = f"schema {baseline.get('schema')!r}" if isinstance(baseline, dict) else _kind(baseline)
        raise BaselineError(
            f"baseline {path} has {found}, expected an object of schema {BASELINE_SCHEMA}; remake it with: "
            f"{UPDATE_COMMANDS[0]}"
        )
    if not isinstance(baseline.get("cells"), dict):  # the schema is right: say what is wrong instead
        raise BaselineError(
            f"baseline {path}: field 'cells' is {_kind(baseline.get('cells'))}, expected an object of cells "
            f"by id; restore it from git or remake it with: {UPDATE_COMMANDS[0]}"
        )
    bad = [
        f"cell {cid!r}: {problem}"
        for cid, cell in baseline["cells"].items()
        for problem in baseline_cell_problems(cell)
    ]
    if bad:
        more = f" (and {len(bad) - 3} more)" if len(bad) > 3 else ""
        raise BaselineError(
            f"baseline {path} holds figures the gate cannot use: {'; '.join(bad[:3])}{more}; "
            f"restore it from git or remake it with: {UPDATE_COMMANDS[0]}"
        )
    for name, expected in (("fingerprint", fingerprint), ("tier", tier)):
        if expected is not None and baseline.get(name) != expected:
            wanted = baseline_path(
                path.parent, fingerprint or baseline.get("fingerprint"), tier or baseline.get("tier")
            )
            # A file named for these results that holds another's (copied or edited by hand): naming it
            # as "the expected file" sent the reader to the very file that was refused.
            where = (
                f"its name is that of the {expected!r} baseline, but its {name} field is not: a copied or "
                f"hand-edited file?"
                if wanted.resolve() == path.resolve()
                else f"the expected file is {wanted}"
            )
            raise BaselineError(
                f"baseline {path} is for {name} {baseline.get(name)!r} but the results are "
                f"for {expected!r}; {where}: {_how_to_make(wanted, fingerprint, tier)}"
            )
    return baseline


def _kind(value) -> str:
    """A JSON value's kind in words: "a list", "null"."""
    if value is None:
        return "null"
    kind = {dict: "object", list: "list", str: "string", bool: "boolean"}.get(type(value), "number")
    return f"an {kind}" if kind[0] in "aeiou" else f"a {kind}"


def resolve_baseline(path_or_dir: str | os.PathLike, fingerprint: str, tier: str) -> dict:
    """A baseline file as given, or the file for (fingerprint, tier) inside a directory; one with no cells is
    refused (a gate against nothing would pass anything)."""
    path = Path(path_or_dir)
    # A directory, or a name that is plainly not a baseline file (e.g. a `baselines` dir not yet made).
    if path.is_dir() or (path.suffix != ".json" and not path.is_file()):
        path = baseline_path(path, fingerprint, tier)
    baseline = load_baseline(path, fingerprint, tier)
    if not baseline["cells"]:
        raise BaselineError(
            f"baseline {path} holds no cells: nothing to gate against; {_how_to_make(path, fingerprint, tier)}"
        )
    return baseline
