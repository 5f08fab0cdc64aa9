"""One side of a paired comparison: `python -m perfgate.measure.duet`, a warm process that the paired engine
(perfgate.ab.pair_workers) starts for each side (base and this tree). It imports torch, the compiler stack and the
side's zoo once, then takes cells one after another; each cell runs through the single-device pipeline up to
its warm state, and then, instead of timing itself, serves timed rounds one at a time as the coordinator asks,
so that the two sides' rounds alternate a fraction of a second apart on one GPU:

    coordinator -> worker                       worker -> coordinator
    {"job": Job}                                {"ready": {eager_ms, compiled_ms, device_clock}} or {"record"}
    {"op": "wall", "steps": n, "first": side,   {"wall": {"eager": ms, "compiled": ms}}     ms per step
     "sides": [side, ...]}                      (only the sides asked for; both where none is named)
    {"op": "host"}                              {"host": {"eager": ms, "compiled": ms}}     fastest single step
    {"op": "device", "rounds": r,               {"device": {"eager": [ms], "compiled": [ms]},  GPU-busy ms a
     "relayout": bool}                           "kernels": {side: {kernel: ms}}}              step, by kernel;
                                                               relayout: each round in a fresh memory layout
    {"op": "finish", "solo": bool}              {"record": the cell's record}

A job sent with "hold": true waits for {"op": "go"} at each point it announces with {"hold": point}: before its
first compiled call ("compile") and, for a cell of one timed batch, after it ("compiled"), so that the coordinator
gives each side's first compiled call, whose launch-config picks are timed, the GPU to itself while the two
sides build and warm up at once (perfgate.ab.pair_prepare).

The rounds it served become the record's own wall, host and device clocks (solo: the other side failed, so
the cell times itself as usual); of the wall rounds, those that stepped both sides (the record's speedup pairs
eager and compiled round by round). Protocol lines go to the original stdout; anything else the process prints
goes to stderr, so a model's print never breaks a line. A cell that fails answers {"record"} at once.
"""

from __future__ import annotations

import json
import os
import sys

PEERS_ENV = "PERFGATE_PAIRED_PEERS"  # the other side's pid, which perfgate.measure.neighbours does not count
PROTOCOL = 1  # the coordinator refuses a worker of another protocol (perfgate.ab.pair_workers.PROTOCOL)


class Channel:
    """The protocol's two ends: requests on stdin, replies on a private copy of stdout."""

    def __init__(self):
        self.out = os.fdopen(os.dup(1), "w", buffering=1, encoding="utf-8")
        os.dup2(2, 1)  # C-level writes to fd 1 (a library's printf) land in the stderr file
        sys.stdout = sys.stderr

    def send(self, message: dict) -> None:
        self.out.write(json.dumps(message) + "\n")
        self.out.flush()

    def receive(self) -> dict | None:
        line = sys.stdin.readline()
        return json.loads(line) if line.strip() else None


def server(channel: Channel):
    """The `serve` callback of perfgate.measure.cell.run_cell: rounds on request until "finish"."""
    from perfgate.measure import clocks
    from perfgate.measure.layout import Relayout
    from perfgate.measure.timing import Rounds

    def serve(run, eager_ms: float, compiled_ms: float):
        device, stream = run.device, len(run.timed)
        ready = {
            "eager_ms": eager_ms,
            "compiled_ms": compiled_ms,
            "stream": stream,
            "device_clock": device.type == "cuda",
        }
        channel.send({"ready": ready})
        wall = Rounds([], [], 0)
        host = Rounds([], [], clocks.whole_passes(clocks.HOST_STEPS, stream))
        on_device = Rounds([], [], clocks.whole_passes(clocks.DEVICE_STEPS, stream))
        sides = {"eager": run.eager_step, "compiled": run.compiled_step}
        # A fresh GPU memory layout before each device round, where the coordinator asks: it does where both sides'
        # engines can (their hello's "relayout"), so that the two sides' rounds sample layouts alike.
        relayout = Relayout(device) if device.type == "cuda" else None
        while True:
            request = channel.receive()
            if request is None or request["op"] == "finish":
                solo = request is None or bool(request.get("solo"))
                return None if solo or not wall.eager_ms else (wall, host, on_device if on_device.eager_ms else None)
            op = request["op"]
            if op == "wall":
                wall.steps = request["steps"]
                order = ("eager", "compiled") if request.get("first", "eager") == "eager" else ("compiled", "eager")
                asked = request["sides"] if "sides" in request else order
                ms = {side: run.step_clock(sides[side], wall.steps, device) for side in order if side in asked}
                if len(ms) == 2:  # the record's own wall clock pairs eager and compiled round by round
                    wall.eager_ms.append(ms["eager"])
                    wall.compiled_ms.append(ms["compiled"])
                channel.send({"wall": ms})
            elif op == "host":
                one = clocks.host_rounds(run.eager_step, run.compiled_step, device, stream, rounds=1, min_rounds=1)
                host.eager_ms += one.eager_ms
                host.compiled_ms += one.compiled_ms
                channel.send({"host": {"eager": one.eager_ms[0], "compiled": one.compiled_ms[0]}})
            elif op == "device":
                fresh = relayout if request.get("relayout") else None
                try:
                    block, kernels = clocks.device_block(
                        run.eager_step, run.compiled_step, device, stream, request["rounds"], fresh
                    )
                except Exception as err:  # noqa: BLE001 - a profiler failure costs the device clock, not the cell
                    channel.send({"device": None, "note": f"device clock failed: {err}"[:300]})
                    continue
                finally:
                    if fresh is not None:
                        try:
                            fresh.release()
                        except Exception:  # noqa: BLE001 - a CUDA error the block raised again: the clock failed above
                            pass
                on_device.eager_ms += block.eager_ms
                on_device.compiled_ms += block.compiled_ms
                channel.send({"device": {"eager": block.eager_ms, "compiled": block.compiled_ms}, "kernels": kernels})
            else:
                raise ValueError(f"unknown request {op!r}; valid: wall, host, device, finish")

    return serve


def holder(channel: Channel):
    """The `hold` callback of perfgate.measure.cell.run_cell: say where this side waits, then wait for "go"."""

    def hold(point: str) -> None:
        channel.send({"hold": point})
        message = channel.receive()
        if message is None or message.get("op") != "go":
            raise RuntimeError(f"held at {point!r}, the coordinator sent {message!r}; expected {{'op': 'go'}}")

    return hold


def run_job(job, channel: Channel, envs: dict, hold: bool = False) -> bool:
    """Measure one cell, serving its rounds (`hold`: its first compiled call takes its turn); whether this
    process may take another."""
    from perfgate.measure.cell import run_cell
    from perfgate.measure.child import cell_setup

    if job.sys_path:
        sys.path[:] = list(job.sys_path)
    spec, env = cell_setup(job, envs)
    record = run_cell(
        spec,
        job.cell,
        job.options,
        env,
        lambda message: channel.send({"progress": message}),
        process="worker",
        serve=server(channel),
        hold=holder(channel) if hold else None,
    )
    channel.send({"record": record})
    return record["status"] == "ok"


def main() -> int:
    from perfgate.core.children import die_with_parent

    die_with_parent()
    channel = Channel()
    import importlib

    import perfgate

    # A side's tree whose perfgate predates this module, under an editable install of another tree: its
    # perfgate package, this module from the installed tree's finder. Such a mix must not measure: the
    # coordinator reads this line and starts the side again on one engine whole (perfgate.ab.pair_workers' overlay).
    engine = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if os.path.realpath(os.path.dirname(perfgate.__file__)) != os.path.realpath(engine):
        print(f"perfgate.measure.duet of {engine} found under the perfgate of {perfgate.__file__}", file=sys.stderr)
        return 3
    from perfgate.core.job import Job

    # Imported before the first job, as a long session has them by its second cell: a first compile must not
    # count importing the compiler stack (seconds) as compile time.
    importlib.import_module("torch._inductor.compile_fx")
    # wall_sides: a wall round steps only the sides a request names (an engine before it stepped both). relayout:
    # a device request may ask for a fresh memory layout each round (perfgate.measure.layout). holds: a job may
    # hold its first compiled call for the coordinator's turn (run_job).
    hello = {
        "protocol": PROTOCOL,
        "perfgate": os.path.dirname(perfgate.__file__),
        "wall_sides": True,
        "relayout": True,
        "holds": True,
    }
    channel.send({"hello": hello})
    envs: dict = {}
    while (message := channel.receive()) is not None:
        os.environ[PEERS_ENV] = ",".join(str(pid) for pid in message.get("peers", []))
        if not run_job(Job.from_json(json.dumps(message["job"])), channel, envs, bool(message.get("hold"))):
            break  # a failed cell may have poisoned the CUDA context: the next cell gets a fresh process
    return 0


if __name__ == "__main__":
    sys.exit(main())
