import sys as _s, os as _o

_s.path.insert(0, _o.getcwd())
"""Fill a kept inductor cache with cells' compiles, several processes at a time (device kit, not product).
usage: python .icc4/pw.py CACHE_DIR OUT_JSONL CELL_ID...   (ids model-phase-variant-precision)
Each cell: the compiled side only, built and stepped as perfgate.measure.cell does (same TF32 policy, same
cache dir handling), 3 steps; writes one JSON line per cell with its cold first-call seconds."""
import json, os, socket, sys, time, traceback
import torch
from perfgate.core import zoo
from perfgate.core.matrix import Cell
from perfgate.measure.compile_cache import clean_up, compile_cache
from perfgate.measure.devices import start_cell
from perfgate.measure.steps import cell_batches, compiled_side, initial_state, sync
from perfgate.measure import introspect

cache, out, ids = sys.argv[1], sys.argv[2], sys.argv[3:]
specs = zoo.load(zoo.DEFAULT)
for cid in ids:
    model, phase, rest = cid.split("-", 2)
    variant, precision = rest.rsplit("-", 1)
    cell = Cell(
        model, phase, variant, precision, "gpu" if os.environ.get("PW_DEVICE", "cuda:0").startswith("cuda") else "cpu"
    )
    rec = {"cell": cid, "host": socket.gethostname(), "pid": os.getpid(), "start": time.time()}
    t0 = time.perf_counter()
    try:
        dk = os.environ.get("PW_DEVICE", "cuda:0")
        device = start_cell(dk, True)
        spec = specs[model]
        size = spec.sizes[cell.device_kind]
        with compile_cache(cache, cell.precision):
            introspect.reset_compiler()
            state = initial_state(spec, size, 0)
            _, batches, _ = cell_batches(spec, cell, size, 0, device)
            side = compiled_side(spec, cell, size, state, device, None)
            t1 = time.perf_counter()
            side.captured_step(batches[0], tensors=False)
            sync(device)
            rec["first_call_s"] = round(time.perf_counter() - t1, 2)
            for b in (batches[1 % len(batches)], batches[0]):
                side.captured_step(b, tensors=False)
            sync(device)
            rec["graphs"] = introspect.compile_counts()["graph_count"]
            del side
        rec["status"] = "ok"
    except BaseException as err:  # noqa
        rec["status"] = "failed"
        rec["reason"] = repr(err)[:400]
        traceback.print_exc()
        if isinstance(err, KeyboardInterrupt):
            raise
    finally:
        rec["wall_s"] = round(time.perf_counter() - t0, 2)
        clean_up()
        with open(out, "a") as f:
            f.write(json.dumps(rec) + "\n")
        print(cid, rec.get("status"), rec.get("first_call_s"), rec["wall_s"], flush=True)
