#!/usr/bin/env bash
# Does a paired A/A's device-time gap follow the side or the preparation order? One cell (K), A/A, run with A
# prepared first, then B first (tools/probes/b_first.py), then A first again, on one kept cache; records and
# logs in $OUT/bias.tgz after each run.
set -u
r=$PWD/.perfgate/bias; mkdir -p "$r"
{ cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  lscpu | grep -E '^Model name'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
} > "$r/machine.txt" 2>&1; cat "$r/machine.txt"
n=0
for order in ${ORDERS:-ab ba ab}; do
  n=$((n + 1)); t0=$SECONDS
  plug=(); [ "$order" = ba ] && plug=(-p tools.probes.b_first)
  timeout "${LIMIT:-200}" python3 -m pytest perftests -m "gpu and pr" -k "${K:-upernet_convnext_t and train}" -p no:randomly \
    "${plug[@]}" --perf-isolate off --perf-cache-dir "$PWD/.perfgate/bc" --perf-against-env PERFGATE_SIDE=base \
    --perf-numerics off --perf-warm-compile off --perf-results "$r/$n-$order.jsonl" > "$r/$n-$order.log" 2>&1
  echo "$n $order rc=$? in $((SECONDS - t0)) s"
  python3 - "$r/$n-$order.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); d = (r.get("paired") or {}).get("rounds", {}).get("device", {})
    for side in ("compiled", "eager"):
        for k, (a, b) in enumerate(zip(d.get("a", {}).get(side, []), d.get("b", {}).get(side, []))):
            if a and b: print(r["cell"][:24], side, k, "B/A by min %+.2f %%" % (100 * (min(b) / min(a) - 1)))
PY
  tar czf "$OUT/bias.tgz" -C "$r" .
done
