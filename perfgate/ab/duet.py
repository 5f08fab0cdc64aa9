"""The coordinator of a paired cell: a warm worker process per side (perfgate.ab.pair_workers), both holding the
cell compiled and warm on one GPU, their timed rounds alternated in an order drawn at random for each pair.
A drift of the host's speed over seconds to minutes then hits both sides of a pair alike. Imports no torch.

A cell: side A (the base) compiles first, so its compiles fill the shared inductor cache and B finds its
unchanged graphs there: the same compiled code and autotune picks on both sides. The two build and warm up eager
at once; their first compiled calls take turns, or, where the cache holds the cell's picks already, they prepare
wholly at once (perfgate.ab.pair_prepare). Then looks, each of WALL_PAIRS wall rounds, HOST_PAIRS host rounds
and (on a GPU) one profiled block of DEVICE_ROUNDS per side, until no rule is unsure or a regression stands
(looks.decided), or LOOKS are spent. A look after a pair's first measures only the clocks with a rule still
unsure, and of the wall clock only the unsure side's steps (the host clock and eager's wall step, shown and never
judged, only in the first, eager in EAGER_SHOWN_PAIRS of its wall round pairs).
A cell still unsure, or showing a regression, then gets a second process pair (fresh processes, B prepared
first now that the cache is warm), and a wall regression shown in both a third, up to DUETS: a wall regression
must show in every pair, a device one in the pairs' pooled rounds, where they took fresh memory layouts
(paired.across_pairs, paired.CONFIRM_PAIRS). A wall red that the second pair read ok against takes a third,
whose ok outvotes it (paired.outvoted). What is still unsure after its second pair (or third) stays unsure: it
never passes.
"""

from __future__ import annotations

import math
import random
import time
from contextlib import contextmanager
from dataclasses import replace
from typing import Callable, Iterator

from perfgate.ab import looks, paired, paired_work, pinning
from perfgate.ab.looks import CLOCKS
from perfgate.ab.pair_prepare import alone, how_of, other, prepare
from perfgate.ab.pair_workers import ROUND_LIMIT_S, Duet, Worker, WorkerGone, finish, layouts_of, steps_sides
from perfgate.ab.sides import Side

# Wall round pairs a look, of rounds as long as an unpaired cell's (the plan's target_round_ms, 50 ms unless
# --perf-round-ms); on a GPU a paired round lasts ROUND_SHARE of that, and a look takes as many more pairs, up to
# twice as many, as keep its seconds (wall_shape).
WALL_PAIRS = 12
# A host-bound step's figure is the minimum of its rounds, and many short rounds reach its floor more often than
# a few long ones in the same seconds: rounds of four lengths alternated in each cell's process pair (one H200
# each, 2026-11-28, tools/probes/round_lengths.py) gave the narrowest line at ~25 ms where a step is short
# (segformer_b2 infer +-2.8 % at 24 ms, +-7.9 % at 43 ms; docs/gate-evidence.md "Round length"). The CPU tier
# keeps whole rounds: its wall line (paired.CPU_WALL_LINE) was set on them.
ROUND_SHARE = 0.5
# Of a first look's wall round pairs, those that step eager too where its wall step is shown, not judged (the PR
# gate), spread over the look: they give the records their own wall speedup (from a third of the look's round
# pairs, 4-8, not all) and the verdict eager's shown change. Eager's rounds were 52-58 % of the first looks' wall
# seconds, 59-71 s of a whole-tier A/A's ~500 s of cells (4xH200 2aa41d77).
EAGER_SHOWN_PAIRS = 4
# Host round pairs in a process pair's first look (the host clock is shown, never judged: its lines were
# +-6-23 % under every estimator); a round is 5 single steps of each, its fastest kept. 6 pairs cost 1:22 of
# a warm 12-cell A/A's 12:08 (2xH200 23ebdea2, 2026-11-27); 3 show the same figure at half that.
HOST_PAIRS = 3
# Profiled rounds a side a look, in one profiler session. Device time repeats within 0.1-0.3 % between paired
# rounds, against a 1 % line: 3 rounds judged every committed paired record (24 runs, 2026-11-27/28) as 4 did,
# cell for cell (tools/probes/rejudge.py), and the device blocks were 1:08 of a warm A/A's 7:13 of cells (H100
# 06ce1001), ~80 % of them the profiled steps (the rest, ~0.5 s a block, the profiler itself).
DEVICE_ROUNDS = 3
LOOKS = 3  # looks a process pair
# Process pairs a cell, at most: only a wall regression shown in two, or one pair's red that the next read ok
# against, takes a third.
DUETS = paired.MAX_PAIRS
# Every look's interval is two-sided at 1 - ALPHA / JUDGED_LOOKS, the looks of the first two process pairs. A
# third pair's looks decide only the rules that called for it (looks.settle_others): they keep a wall regression
# both pairs showed or turn it unsure, so they make no new red, or outvote one pair's red (paired.outvoted),
# which needs the second and third pairs' own intervals both wrong to be a wrong ok: at most (ALPHA / 4) ** 2
# over their looks, added to ALPHA / 2 rather than a share of it (docs/gate.md, item 7).
JUDGED_LOOKS = LOOKS * paired.UNSURE_PAIRS
OUT_OF_MEMORY = "out of memory"  # torch.OutOfMemoryError's words: "CUDA out of memory. Tried to allocate ..."
TOGETHER = (
    "the two sides may not fit in GPU memory together: compare this cell by alternating processes, "
    "perfgate ab --processes N"
)
NO_ROOM = f"side B ran out of memory beside side A (its record is its own, measured alone); {TOGETHER}"


def round_ms(job) -> float:
    """The paired wall round's length, ms: ROUND_SHARE of the plan's round on a GPU, the whole of it on a CPU."""
    share = ROUND_SHARE if job.cell.device_kind == "gpu" else 1.0
    return job.options.plan.target_round_ms * share


def wall_shape(ready: dict, job) -> tuple[int, int]:
    """(steps a wall round, round pairs a look) for side B's warm state `ready`: on a GPU the steps nearest round_ms
    (a step over 17 ms is one step a round, not two), on a CPU the plan's own rule; and as many pairs as keep a
    look's seconds those of WALL_PAIRS rounds of the plan's length, from WALL_PAIRS (a step that fills the shorter
    round alone) to twice that."""
    plan, gpu = job.options.plan, job.cell.device_kind == "gpu"
    steps = steps_per_round(ready, round_ms(job), plan.max_steps_per_round, nearest=gpu)
    whole = steps_per_round(ready, plan.target_round_ms, plan.max_steps_per_round)
    return steps, max(WALL_PAIRS, min(2 * WALL_PAIRS, round(WALL_PAIRS * whole / steps)))


def sized(worker: Worker, ready: dict, job) -> dict:
    """B's warm state `ready` with its steps timed again, one round a side of the steps `ready` gives, each
    alone on the GPU and its CPUs as the rounds will be: a warm-up beside the other side's (a pair that prepared
    at once) read a short step up to twice its own time, and its wall rounds then took half the steps they
    should (12-14 ms, not 25: gpt2, vit_b16 and resnet50 infer on the H200s dcbf00b5 and 0caedecf, 2026-11-29,
    where pairs that prepared one side after the other took 25). A round of one side reaches no record (a
    record's wall clock pairs eager and compiled round by round); a worker that steps both sides whatever it is
    asked keeps `ready`."""
    if not steps_sides(worker):
        return ready
    guess, _ = wall_shape(ready, job)
    timed = {}
    for side in ("compiled", "eager"):
        message = _ask(worker, {"op": "wall", "steps": guess, "first": side, "sides": [side]}, "wall")
        timed[f"{side}_ms"] = message["wall"][side]
    return {**ready, **timed}


def eager_pairs(pairs: int, look: int, eager_wall: bool) -> int:
    """Of a look's `pairs` wall round pairs, those that step eager where it is wanted: EAGER_SHOWN_PAIRS of
    WALL_PAIRS in a first look where its wall step is shown, not judged; every pair where it is judged (or
    after the first look, where only an unsure eager rule wants it)."""
    return round(EAGER_SHOWN_PAIRS * pairs / WALL_PAIRS) if look == 0 and not eager_wall else pairs


def steps_per_round(ready: dict, target_ms: float, max_steps: int, nearest: bool = False) -> int:
    """Steps a round of `target_ms` takes: at least that long (an unpaired round's rule), or the nearest count
    (`nearest`); a whole number of passes over a stream model's batches."""
    step_ms = max(min(ready["eager_ms"], ready["compiled_ms"]), 1e-3)
    stream = ready.get("stream", 1)
    wanted = math.floor(target_ms / step_ms + 0.5) if nearest else math.ceil(target_ms / step_ms)
    steps = max(1, min(max_steps, wanted))
    return stream * math.ceil(steps / stream)


def measure(
    duet: Duet, job_b, progress: Callable[[str], None], seed: int = 0, picked: bool = False, eager_wall: bool = False
) -> tuple[dict, dict | None, dict]:
    """(B's record, A's record or None, the paired summary) of one cell. Never raises for what a side does:
    a side that fails is a failed record (B) or an unsure comparison that names why (A). `picked`: the shared
    cache holds this cell's compiles and its kernels' launch-config picks already (an earlier run's), so the two
    sides may prepare at once: each loads the same picks.
    `eager_wall`: eager's wall step judged, not only shown (paired.rules_for)."""
    a, b = duet.sides
    # A plants no fault and keeps no warm compile (after its rounds), but otherwise runs what B runs, numerics
    # included: in an A/A on an H100 (2026-11-27), an A that skipped the fp64 reference and the numerics steps
    # issued gpt2 infer's compiled step in 3.7 ms where B took 5.0 ms, every round; the wall and device clocks
    # agreed within 0.2-0.8 %. The two processes' histories must match for their host clocks to, so where B's
    # planted fault first measures the step (device_slow's profiler session), A measures it too (Fault.shadow).
    fault_b = job_b.options.fault
    job_a = replace(
        job_b,
        options=replace(job_b.options, fault=fault_b and fault_b.shadow(), warm_compile="off"),
        results_path=None,
        sys_path=(),
    )
    job_b = replace(job_b, sys_path=())
    rng = random.Random(f"{seed}:{job_b.cell.id}")
    rounds = {clock: {s: {"eager": [], "compiled": []} for s in "ab"} for clock in CLOCKS}
    summary = {"against": a.describe(), "duets": 0, "looks": 0}
    # Each process pair's side prepared first ("a" | "b"), and whether the two prepared at once, kept with the
    # rounds: it was the suspect for the device clock's process effect before that proved to be the memory layout
    # (docs/gate-evidence.md "Process pairs"), and it still orders the processes' own histories.
    prepared: list[dict] = []
    # Where a paired cell's seconds go, per process pair: both sides to their warm state, their looks, their
    # records. The gate's time target is a sum of these (docs/gate.md "What it costs").
    seconds: dict[str, list[float]] = {"prepare": [], "looks": [], "finish": []}
    by_clock = dict.fromkeys(CLOCKS, 0.0)  # the looks' seconds by the clock their rounds served
    started = time.monotonic()
    lap = _lap()
    record_a = record_b = steps = None
    confidence = paired.look_confidence(JUDGED_LOOKS)
    comparisons: list[paired.Comparison] = []
    kernels: list[dict] = []  # each process pair's latest {worker: {side: {kernel: ms per step}}}
    lost: dict[str, str] = {}  # {clock: why a side could not take its rounds}, where one could not
    base_failed = ""  # why side A's record failed after its rounds, where it did
    kept: tuple[dict | None, dict | None] = (None, None)  # the records of the last pair that finished
    # Whether the device rounds take fresh memory layouts (pair_workers.layouts_of), once the first pair is ready.
    layouts: bool | None = None
    for _ in range(DUETS):
        summary["duets"] += 1
        kernels.append({})
        for clock in CLOCKS:
            for s in "ab":
                for side in ("eager", "compiled"):
                    rounds[clock][s][side].append([])
        first = duet.first if summary["duets"] % 2 else other(duet.first)
        # How the two sides prepare (pair_prepare.how_of). Where the cache lacks the cell's launch-config picks
        # (this session's precompile removed its own), each side would time the candidates at its first call beside
        # the other and pick apart: in the cold A/As to 2026-11-28, 10 first pairs of cells precompiled that
        # session, and no later pair nor any warm run's, had a Triton kernel 15-40 % apart between the sides
        # (resnet50 infer's compiled GPU step +3.5 % on 2xH200 b0663377, +2.0 and +3.0 % on 23ebdea2 and
        # 2aa41d77): their device rules' unsure A/A cells. So their first compiled calls take turns, and B loads
        # the picks A made alone.
        fault = job_b.options.fault is not None
        together = (picked or summary["duets"] > 1) and not fault
        prepared.append({"first": first, "together": together})
        lap()
        try:
            how = how_of(duet, together, fault)
            if how == "staggered":
                prepared[-1]["staggered"] = True
            record_a, record_b, ready = prepare(duet, job_a, job_b, progress, first, how)
        except WorkerGone as err:
            duet.renew()
            summary["error"] = str(err)
            break
        finally:
            seconds["prepare"].append(lap())
        if ready is None:  # a side failed before its rounds: nothing paired to judge
            failed_a = record_a is not None and record_a["status"] != "ok"
            summary["error"] = f"side A failed: {record_a['reason']}" if failed_a else "side B failed"
            if failed_a and OUT_OF_MEMORY in str(record_a.get("reason", "")).lower():
                summary["error"] += f"; {TOGETHER}"
            elif record_a is not None and OUT_OF_MEMORY in str((record_b or {}).get("reason", "")).lower():
                # B ran out of GPU memory beside a live A: whether this tree's cell fits alone is B's own
                # record, taken alone now, never a failure the pairing made. The two cannot be paired.
                progress(f"{job_b.cell.id}: the two sides do not fit in GPU memory together; this tree's alone")
                record_b = alone(duet, job_b, progress) or record_b
                summary["error"] = NO_ROOM
            break
        if layouts is None:  # decided on the first pair, for every look and pair of the cell: one set of rules
            devices = all(ready[s].get("device_clock") for s in "ab")
            layouts = devices and layouts_of(duet, job_b.cell.variant)
        try:
            # A third pair decides only the rules that called for it; the others keep what two pairs read.
            calling, before = looks.calling_rules(comparisons, summary["duets"]), comparisons
            kind = job_b.cell.device_kind
            with _rounds_pinned(duet, summary, kind):
                pinned = bool(summary["pinned"])
                steps, pairs = wall_shape(sized(duet.worker(b), ready["b"], job_b), job_b)
                summary.setdefault("wall_pairs", []).append(pairs)
                for look in range(LOOKS):
                    summary["looks"] += 1
                    wanted = looks.wanted(comparisons, look, calling)
                    eager = eager_pairs(pairs, look, eager_wall)
                    _look_once(
                        duet, rounds, steps, rng, ready, wanted, by_clock, kernels[-1], eager, layouts, pairs, lost
                    )
                    judged = looks.judge(rounds, confidence, kind, eager_wall, layouts, pinned, lost)
                    comparisons = looks.settle_others(judged, before, calling)
                    if looks.decided(comparisons, calling):
                        break
            seconds["looks"].append(lap())
            if together:  # both finish at once: see pair_workers.finish
                for side in (a, b):
                    duet.worker(side).send({"op": "finish", "solo": False})
            record_a, record_b = (finish(duet.worker(side), progress) for side in (a, b))
            kept = (record_a, record_b)
            seconds["finish"].append(lap())
            if record_a.get("status") != "ok":  # its checks after the rounds (numerics, recompiles) failed: B's
                base_failed = f"side A failed: {record_a.get('reason')}"  # counts go unjudged, its clocks not
        except WorkerGone as err:
            summary["error"] = str(err)
            if f"side {a.name}" in str(err):  # A gone: B's rounds are still its own record (a hung B is not asked)
                record_b = _salvage(duet, b, progress) or record_b
            duet.renew()
            break
        if paired.final(comparisons, summary["duets"]) or summary["duets"] == DUETS or _counted_red(*kept):
            break  # the workers stay for the next cell: renewed after the last pair, they cost ~20 s to start again
        duet.renew()  # a fresh process pair for the next duet
        red = any(c.outcome == "regression" for c in comparisons)
        why = "a regression is measured again" if red else "still unsure"
        progress(f"{job_b.cell.id}: {why}, with a fresh process pair")
    if record_b is None and kept[1] is not None:  # a later pair's worker died: the last whole pair's records
        record_a, record_b = kept
    verdicts = paired.settled(comparisons)
    counted = paired_work.counts(record_a, record_b) if _both_ok(record_a, record_b) and "error" not in summary else []
    notes = [
        duet.notes.get("A", ""),
        *(why for clock, why in lost.items() if any(c.rule.clock.name == clock and not c.pairs for c in verdicts)),
        paired_work.uncounted_alike(record_a, record_b) if _both_ok(record_a, record_b) else "",
    ]
    outcome = (
        "unsure"
        if "error" in summary
        else paired.worst([c.outcome for c in verdicts] + [c["outcome"] for c in counted])
    )
    if base_failed and outcome != "regression":  # a clock's red stands; else nothing judged B's counts: unsure
        outcome, summary["error"] = "unsure", base_failed
    elif record_b is not None and record_b.get("status") != "ok" and "error" not in summary:
        # This tree's own checks after its rounds failed (numerics, recompiles): its cell fails, and the paired
        # verdict says so rather than PASS on the clocks alone.
        outcome, summary["error"] = "regression", f"side B failed: {record_b.get('reason')}"
    summary.update(
        outcome=outcome,
        counts=counted,
        kernels=paired_work.kernels_moved(kernels),
        steps_per_round=steps,
        prepared=prepared,
        rules=[c.as_json() for c in verdicts],
        layouts=bool(layouts),
        estimator=paired.estimators(bool(layouts), bool(summary.get("pinned"))),
        rounds=rounds,
        note="; ".join(filter(None, notes)),
        seconds={
            **{k: [round(x, 2) for x in v] for k, v in seconds.items()},
            **{f"{clock}_rounds": round(s, 2) for clock, s in by_clock.items()},
            "total": round(time.monotonic() - started, 2),
        },
    )
    if record_b is None:
        from perfgate.core.record import failed_record

        record_b = failed_record(job_b.cell, summary.get("error", "side B never reported"), job_b.run_id)
    return record_b, record_a, summary


def _lap() -> Callable[[], float]:
    """A stopwatch: each call returns the seconds since the previous one (the first, since its creation)."""
    last = [time.monotonic()]

    def lap() -> float:
        now = time.monotonic()
        out, last[0] = now - last[0], now
        return out

    return lap


@contextmanager
def _rounds_pinned(duet: Duet, summary: dict, device_kind: str) -> Iterator[None]:
    """Both workers of a GPU cell on one CPU set for their rounds unless PERFGATE_PAIRED_PIN=off
    (perfgate.ab.pinning; a CPU cell's thread pool wants every core). The summary's "pinned" is the set where
    every process pair's rounds ran on it, else []."""
    cpus = pinning.rounds_cpus() if device_kind == "gpu" else frozenset()
    with pinning.Pinned([duet.worker(side).popen.pid for side in duet.sides], cpus) as pinned:
        same = summary["duets"] == 1 or summary.get("pinned") == sorted(pinned.cpus)
        summary["pinned"] = sorted(pinned.cpus) if same else []
        yield


def _both_ok(record_a: dict | None, record_b: dict | None) -> bool:
    return all(r is not None and r.get("status") == "ok" for r in (record_a, record_b))


def _counted_red(record_a: dict | None, record_b: dict | None) -> bool:
    """Whether a count of B's step grew past its band: the cell is red whatever the clocks' further process pairs
    would read (counts repeat across processes: docs/measuring.md), so they are not taken."""
    counted = paired_work.counts(record_a, record_b) if _both_ok(record_a, record_b) else []
    return any(c["outcome"] == "regression" for c in counted)


def _salvage(duet: Duet, side: Side, progress) -> dict | None:
    """The record of `side`'s cell from the rounds it served, where its worker still runs; else None."""
    worker = duet.workers.get(side.name)
    if worker is None or worker.popen.poll() is not None:
        return None
    try:
        return finish(worker, progress)
    except WorkerGone:
        return None


def _ask(worker: Worker, request: dict, key: str) -> dict:
    """The worker's answer to `request`, which holds `key` (its value None where that clock failed)."""
    worker.send(request)
    message = worker.expect(key, ROUND_LIMIT_S)
    if key not in message:
        raise WorkerGone(f"side {worker.side.name} ended its cell mid-rounds: {message['record'].get('reason')}")
    return message


def _look_once(
    duet: Duet,
    rounds: dict,
    steps: int,
    rng: random.Random,
    ready: dict,
    wanted: dict[str, set[str]],
    spent: dict,
    kernels: dict,
    with_eager: int = WALL_PAIRS,
    layouts: bool = False,
    pairs: int = WALL_PAIRS,
    lost: dict[str, str] | None = None,
) -> None:
    """One look: the round pairs of each clock in `wanted` ({clock: the sides whose rounds it wants}), their
    seconds added to `spent` by clock, and each worker's latest kernel table (the device clock's) in `kernels`.
    A look takes `pairs` wall round pairs (wall_shape); a wall round steps only the wanted sides (after the first
    look, most often the compiled step alone), and eager in `with_eager` of them, spread over the look, where
    compiled is wanted too. A clock whose round a side could not take is noted in `lost` with the side's why."""
    workers = {"a": duet.worker(duet.sides[0]), "b": duet.worker(duet.sides[1])}
    lost = {} if lost is None else lost
    if not all(steps_sides(w) for w in workers.values()):  # a base on an older engine steps both sides: so does B
        wanted = {**wanted, **({"wall": {"eager", "compiled"}} if "wall" in wanted else {})}
        with_eager = pairs

    def pair(clock: str, request: dict, sides) -> None:
        t0 = time.monotonic()
        messages = {s: _ask(workers[s], request, clock) for s in rng.sample("ab", 2)}
        spent[clock] += time.monotonic() - t0
        # A round one side could not take (its profiler failed: None) pairs with nothing: both sides' are
        # dropped, so each pair's rounds stay matched, round for round, as the judge reads them.
        failed = {s: m for s, m in messages.items() if m[clock] is None}
        for s, m in failed.items():
            lost[clock] = f"side {s.upper()}'s {m.get('note') or f'{clock} clock failed'}"
        if failed:
            return
        for s, message in messages.items():
            got = message[clock]
            if message.get("kernels"):  # a worker of an older engine sends none
                kernels[s] = message["kernels"]
            for side in sides:  # a worker of an older engine answers both sides: A's and B's must match
                values = got[side] if isinstance(got[side], list) else [got[side]]
                rounds[clock][s][side][-1].extend(values)

    sides = sorted(wanted.get("wall", ()))
    eager_at = {round(k * pairs / max(1, with_eager)) for k in range(with_eager)}  # spread: 0, 3, 6, 9 of 12
    for i in range(pairs if sides else 0):
        now = sides if i in eager_at or "compiled" not in sides else ["compiled"]
        pair("wall", {"op": "wall", "steps": steps, "first": rng.choice(("eager", "compiled")), "sides": now}, now)
    for _ in range(HOST_PAIRS if "host" in wanted else 0):
        pair("host", {"op": "host"}, wanted["host"])
    if "device" in wanted and ready["a"].get("device_clock") and ready["b"].get("device_clock"):
        pair("device", {"op": "device", "rounds": DEVICE_ROUNDS, "relayout": layouts}, wanted["device"])
