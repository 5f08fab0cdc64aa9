#!/usr/bin/env bash
# Is a paired cell's device-clock process effect the order in which its two sides prepared (and took their GPU
# memory)? Cells K, A/A, ORDER_PAIRS process pairs each, the sides prepared one after the other, A first in
# odd pairs (tools/probes/order_pairs.py), under each allocator setting of MODES in turn (default: "default
# expandable default expandable"; expandable: PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which maps
# memory in fixed 2 MB pages whatever the other process holds), on one kept cache (the first run fills it).
# Per run and cell: each pair's compiled and eager device change, B against A, with the side prepared first.
# Records in $OUT/order.tgz after each run.
set -u
r=$PWD/.perfgate/order; mkdir -p "$r"
{ cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\))'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
} > "$r/machine.txt" 2>&1; cat "$r/machine.txt"
n=0
for mode in ${MODES:-default expandable default expandable}; do
  n=$((n + 1)); t0=$SECONDS
  alloc=(); [ "$mode" = expandable ] && alloc=(env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
  timeout "${LIMIT:-500}" "${alloc[@]}" python3 -m pytest perftests -m "gpu and pr" -p no:randomly -p tools.probes.order_pairs \
    -k "${K:-(upernet_convnext_t and train) or (resnet50 and infer)}" \
    --perf-isolate off --perf-cache-dir "$PWD/.perfgate/oc" --perf-precompile 4 --perf-against-env PERFGATE_SIDE=base \
    --perf-results "$r/$n-$mode.jsonl" > "$r/$n-$mode.log" 2>&1
  echo "$n $mode rc=$? in $((SECONDS - t0)) s"
  python3 - "$r/$n-$mode.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    p = r.get("paired") or {}
    for c in p.get("rules", []):
        if c["clock"] == "device":
            pairs = c.get("by_pair") or [c["change"]]
            text = ["%s first %+.2f %%" % ("AB"[i % 2], 100 * x) for i, x in enumerate(pairs)]
            print(r["cell"][:28], c["side"], p.get("outcome"), " | ".join(text))
PY
  tar czf "$OUT/order.tgz" -C "$r" .
done
