#!/usr/bin/env bash
# Does a paired A/A's device-time gap follow the side or the preparation order? One cell (K), A/A, a fresh
# process pair a run (a second, its order swapped, where the first is unsure), the sides prepared one after the
# other (no precompile) in the order each item of ORDERS names (default "ab ba ab": A first, B first by
# tools/probes/b_first.py, A first), on one kept cache. An item ending "+x" runs under
# PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True (another way of taking GPU memory): ORDERS="ab ba ab+x ba+x".
# Records and logs in $OUT/bias.tgz after each run. The first run of upernet_convnext_t train took 194 s from an
# empty cache on H100 6c154e4e: set LIMIT and ORDERS to fit the call's 10 minutes.
set -u
r=$PWD/.perfgate/bias; mkdir -p "$r"
{ cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  lscpu | grep -E '^Model name'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
} > "$r/machine.txt" 2>&1; cat "$r/machine.txt"
n=0
for item in ${ORDERS:-ab ba ab}; do
  n=$((n + 1)); t0=$SECONDS; order=${item%+x}
  plug=(); [ "$order" = ba ] && plug=(-p tools.probes.b_first)
  alloc=(); [ "$item" != "$order" ] && alloc=(env PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True)
  timeout "${LIMIT:-200}" "${alloc[@]}" python3 -m pytest perftests -m "gpu and pr" -k "${K:-upernet_convnext_t and train}" -p no:randomly \
    "${plug[@]}" --perf-isolate off --perf-cache-dir "$PWD/.perfgate/bc" --perf-against-env PERFGATE_SIDE=base \
    --perf-numerics off --perf-warm-compile off --perf-results "$r/$n-$item.jsonl" > "$r/$n-$item.log" 2>&1
  echo "$n $item rc=$? in $((SECONDS - t0)) s"
  python3 - "$r/$n-$item.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line); d = (r.get("paired") or {}).get("rounds", {}).get("device", {})
    for side in ("compiled", "eager"):
        for k, (a, b) in enumerate(zip(d.get("a", {}).get(side, []), d.get("b", {}).get(side, []))):
            if a and b: print(r["cell"][:24], side, k, "B/A by min %+.2f %%" % (100 * (min(b) / min(a) - 1)))
PY
  tar czf "$OUT/bias.tgz" -C "$r" .
done
