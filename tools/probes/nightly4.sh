#!/usr/bin/env bash
# Issue 56's 4-GPU measurements in docs/matrix.md's shape, as one chain in a process session of its own (a device
# call lasts 10 minutes at most; each call waits and collects):
#   tools/probes/nightly4.sh start     then    tools/probes/nightly4.sh wait    (again, until "chain done")
# 1. beside: the PR tier's 12 cells under -n 4 (every model, inductor default, bf16), then 2. alone: those of
#    resnet50, vit_b16 and segformer_b2 on one GPU with the others idle, on the same (warm) cache: the
#    neighbour effect on each clock.
# 3. slice: a rotation slice of the nightly (ROT, default 1/15: 24 cells, ~29 min in one process by the priors)
#    as the nightly runs it on a 4-GPU runner: its compiles first (precompile), then one xdist worker a GPU
#    (-n 4 --dist loadgroup, the dearest cells first), the data-parallel cells left out; each worker's records
#    stay in slice.gwN.jsonl (the shards' balance).
# 4. ddp4: the 4-rank cells not yet measured (unsplit and compiled autograd; ddp_optimizer's ran on 2789a879).
# STEPS picks and orders them (default: beside alone precompile slice ddp4; beside2, alone2, ...: again;
# precompile_both: the slice's and beside's compiles at once). BESIDE_MODELS narrows beside (the 12 PR cells:
# every model but gpt2_xl). SLICE_ARGS adds pytest options to the slice and its precompile (split on spaces: no
# quoted arguments): a selection larger than a slice whose compiles fit one session's device time, e.g. ROT=1/1
# SLICE_ARGS="--perf-variants inductor_default,inductor_reduce_overhead,inductor_fullgraph --perf-precisions
# amp_bf16" (42 cells, none of max-autotune's 6-minute compiles: on 4xH200 80f45bd0 its precompile took 5:48 and
# the slice 7:14, ~390 s of cells a GPU, about half a night). On
# 4xH200 349f3a2e (2026-11-28) the host's drift over minutes outweighed any neighbour effect: alternate them,
# "beside alone beside2 alone2", to tell the two apart.
# tools/probes/nightly4_summary.py DIR reads what comes back.
set -u
top=$PWD/.perfgate/n4
run() {  # run NAME GPUS CPUS ARGS...: one pytest, its log and records under $top
  local name=$1 gpu=$2 cpus=$3; shift 3
  echo "$(date -u +%T) start $name on GPU(s) $gpu, CPUs $cpus" >> "$top/log.txt"
  local t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$gpu timeout ${STEP_S:-1200} taskset -c "$cpus" python3 -m pytest perftests -p no:randomly \
    --perf-results "$top/$name.jsonl" "$@" > "$top/$name.log" 2>&1
  local rc=$?
  echo "$(date -u +%T) end $name rc=$rc in $((SECONDS - t0)) s" >> "$top/log.txt"
}
if [ "$1" = start ]; then
  mkdir -p "$top"; rm -f "$top/done"
  # The GPU image has no pytest-xdist and no network: carry its wheels (pip download -d .whl pytest-xdist execnet).
  python3 -c 'import xdist' 2>/dev/null || pip install -q --no-index --no-deps .whl/*.whl >> "$top/log.txt" 2>&1
  { cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
    lscpu | grep -E '^(Model name|CPU\(s\))'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
  } > "$top/machine.txt" 2>&1
  export -f run; export top
  ROT=${ROT:-1/15} STEPS=${STEPS:-beside alone precompile slice ddp4} setsid nohup bash -c '
    all="0-$(( $(nproc) - 1 ))" pr=(--perf-variants inductor_default --perf-precisions amp_bf16)
    # The cheap, decisive steps first (2026-11-27: a slice run first held the lease for 18 min on two
    # max-autotune compiles, and the neighbour steps never ran): beside, alone, then the slice as the nightly
    # runs it, its compiles first into the kept cache (16 processes at once), then timed. beside2 and beside3
    # repeat beside on the warm cache: the counts of each cell in three processes (issue 53), the neighbour effect twice.
    for s in $STEPS; do
      case $s in
        beside*) run $s 0,1,2,3 "$all" -m gpu -k "not test_ddp_train_step" -n 4 --dist loadgroup "${pr[@]}" \
          ${BESIDE_MODELS:+--perf-models "$BESIDE_MODELS"} --perf-cache-dir "$top/cache" ;;
        alone*) run $s 0 "$all" -m gpu -k "not test_ddp_train_step" "${pr[@]}" \
          --perf-models resnet50,vit_b16,segformer_b2 --perf-cache-dir "$top/cache" ;;
        precompile) run precompile 0,1,2,3 "$all" -m gpu -k "not test_ddp_train_step" -q --collect-only \
          --perf-rotate "$ROT" ${SLICE_ARGS:-} --perf-cache-dir "$top/cache" --perf-precompile 16 ;;
        # precompile_both: the slice and the beside cells compiled at once, so that every beside run loads all
        # of its graphs (one kind of process: the counts of issue 53 compare alike).
        precompile_both) run precompile_pr 0,1,2,3 "$all" -m gpu -k "not test_ddp_train_step" -q --collect-only \
            "${pr[@]}" ${BESIDE_MODELS:+--perf-models "$BESIDE_MODELS"} --perf-cache-dir "$top/cache" \
            --perf-precompile 8 &
          run precompile 0,1,2,3 "$all" -m gpu -k "not test_ddp_train_step" -q --collect-only \
            --perf-rotate "$ROT" ${SLICE_ARGS:-} --perf-cache-dir "$top/cache" --perf-precompile 16; wait ;;
        slice) run slice 0,1,2,3 "$all" -m gpu -k "not test_ddp_train_step" -n 4 --dist loadgroup \
          --perf-rotate "$ROT" ${SLICE_ARGS:-} --perf-cache-dir "$top/cache" ;;
        ddp4) run ddp4 0,1,2,3 "$all" -m gpu -k "ddp4 and amp_bf16 and not inductor_ddp_optimizer" \
          --perf-cache-dir "$top/cache" ;;
        *) echo "$(date -u +%T) unknown step $s (valid: beside*, alone*, precompile, precompile_both, slice, ddp4)" >> "$top/log.txt" ;;
      esac
    done
    touch "$top/done"' > /dev/null 2>&1 < /dev/null &
fi
[ -d "$top" ] || { echo "no chain on this machine (boot $(cat /proc/sys/kernel/random/boot_id)): it went back"; exit 5; }
deadline=$(( $(date +%s) + ${WAIT_S:-570} ))
while [ ! -f "$top/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
tar czf "$OUT/n4.tgz" -C "$top" --exclude='cache*' .
cat "$top/log.txt"; grep -h "cell(s) in\| passed\| failed" "$top"/*.log | cut -c1-300
head -3 "$top/machine.txt"; [ -f "$top/done" ] && echo "chain done" || echo "chain running"
