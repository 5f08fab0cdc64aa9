#!/usr/bin/env bash
# tools/probes/layout_probe.py's runs: on each GPU, fresh pytest processes one after another (until LIMIT s have
# passed), each profiling K's cells in LAYOUTS layouts of GPU memory; GPU 1 (where there is one) with GPU1_ENV
# (default PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True; LAYOUT_PERSISTENT=1 moves the weights and optimizer
# state too). One kept inductor cache a GPU (the first process compiles).
# Everything in $OUT/layouts.tgz after each process.
set -u
r=$PWD/.perfgate/layouts; mkdir -p "$r"
{ cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
  lscpu | grep -E '^(Model name|CPU\(s\))'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
} > "$r/machine.txt" 2>&1; cat "$r/machine.txt"
gpus=$(nvidia-smi -L | wc -l); share=$(( $(nproc) / gpus )); end=$(( SECONDS + ${LIMIT:-540} ))
for g in $(seq 0 $(( gpus - 1 ))); do
  ( alloc=(); [ "$g" = 1 ] && alloc=(env ${GPU1_ENV:-PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True})
    n=0
    while [ $(( end - SECONDS )) -gt "${MIN_LEFT:-75}" ]; do
      n=$((n + 1)); t0=$SECONDS
      CUDA_VISIBLE_DEVICES=$g LAYOUT_OUT=$r/gpu$g.jsonl timeout $(( end - SECONDS )) "${alloc[@]}" \
        taskset -c $(( g * share ))-$(( g * share + share - 1 )) python3 -m pytest perftests -m "gpu and pr" \
        -k "${K:-(upernet_convnext_t and train) or (resnet50 and infer)}" -p no:randomly -p tools.probes.layout_probe \
        --perf-isolate off --perf-numerics off --perf-warm-compile off --perf-cache-dir "$r/cache$g" \
        --perf-results "$r/gpu$g-$n.results.jsonl" > "$r/gpu$g-$n.log" 2>&1
      echo "gpu$g process $n rc=$? in $((SECONDS - t0)) s" | tee -a "$r/log.txt"
      tar czf "$OUT/layouts.tgz" -C "$r" --exclude='cache*' .
    done ) &
done
wait
tar czf "$OUT/layouts.tgz" -C "$r" --exclude='cache*' .
