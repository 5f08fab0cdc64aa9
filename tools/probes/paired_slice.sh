#!/usr/bin/env bash
# The paired gate on three PR cells of one H100 in one device call: an A/A from empty caches against the
# committed baseline, then this tree's compiled step with 15 % host work planted, then with 1.5 % GPU work
# planted (side A never carries the fault); K and STEPS narrow it. Two host-bound cells (resnet50 train, segformer_b2 infer) and a
# device-bound one (gpt2 infer). Everything lands in $OUT/slice.tgz after each step.
set -u
r=$PWD/.perfgate/slice; mkdir -p "$r"
{ cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
  lscpu | grep -E '^Model name'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
} > "$r/machine.txt" 2>&1; cat "$r/machine.txt"
sel=(perftests -m "gpu and pr" -k "${K:-(resnet50 and train) or (segformer_b2 and infer) or (gpt2 and infer)}" -p no:randomly
     --perf-isolate off --perf-cache-dir "$PWD/.perfgate/pc" --perf-against-env PERFGATE_SIDE=base)
run() {
  local name=$1 t0=$SECONDS; shift
  timeout "$LIMIT" python3 -m pytest "${sel[@]}" --perf-results "$r/$name.jsonl" "$@" > "$r/$name.log" 2>&1
  echo "$name rc=$? in $((SECONDS - t0)) s"; grep -A3 "perfgate paired" "$r/$name.log"
  tar czf "$OUT/slice.tgz" -C "$r" .
}
for step in ${STEPS:-aa host device}; do
  case $step in
    aa) LIMIT=330 run aa --perf-precompile 3 --perf-baseline baselines --perf-report "$r/aa" ;;
    host) LIMIT=${PLANT_S:-200} run host --perf-numerics off --perf-warm-compile off --perf-inject host_slow:15 ;;
    device) LIMIT=${PLANT_S:-200} run device --perf-numerics off --perf-warm-compile off --perf-inject device_slow:1.5 ;;
  esac
done
