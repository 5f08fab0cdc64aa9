#!/usr/bin/env bash
# Is a host-bound cell's per-process wall effect the CPU its worker landed on? The host-bound PR cells (K), A/A,
# run plain and with both sides' threads on one CPU during their rounds (tools/probes/pin_rounds.py), alternately
# (MODES, default "plain pinned plain pinned"), on one kept cache (the first run fills it). Per run: each cell's
# compiled and eager wall change by process pair, and each side's minimum. Records in $OUT/pin.tgz after each run.
# Both modes turn the engine's own pinning off (PERFGATE_PAIRED_PIN=off, the default since 2026-11-29), so that
# "plain" is each side on its own CPUs and "pinned" this probe's pinning alone.
set -u
r=$PWD/.perfgate/pin; mkdir -p "$r"
{ cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\))'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
} > "$r/machine.txt" 2>&1; cat "$r/machine.txt"
n=0
for mode in ${MODES:-plain pinned plain pinned}; do
  n=$((n + 1)); t0=$SECONDS
  plug=(); [ "$mode" = pinned ] && plug=(-p tools.probes.pin_rounds)
  PERFGATE_PAIRED_PIN=off timeout "${LIMIT:-400}" python3 -m pytest perftests -m "gpu and pr" -p no:randomly "${plug[@]}" \
    -k "${K:-(segformer_b2 and train) or (resnet50 and train) or (segformer_b2 and infer) or (gpt2 and infer)}" \
    --perf-isolate off --perf-cache-dir "$PWD/.perfgate/pc" --perf-precompile 4 --perf-against-env PERFGATE_SIDE=base \
    --perf-results "$r/$n-$mode.jsonl" > "$r/$n-$mode.log" 2>&1
  rc=$?
  echo "$n $mode rc=$rc in $((SECONDS - t0)) s"
  python3 - "$r/$n-$mode.jsonl" <<'PY'
import json, sys
for line in open(sys.argv[1]):
    r = json.loads(line)
    p = r.get("paired") or {}
    wall = p.get("rounds", {}).get("wall", {})
    for side in ("compiled", "eager"):
        pairs = zip(wall.get("a", {}).get(side, []), wall.get("b", {}).get(side, []))
        text = ["A %.2f B %.2f ms %+.1f %%" % (min(a), min(b), 100 * (min(b) / min(a) - 1)) for a, b in pairs if a and b]
        print(r["cell"][:28], side, p.get("outcome"), " | ".join(text))
PY
  tar czf "$OUT/pin.tgz" -C "$r" .
done
