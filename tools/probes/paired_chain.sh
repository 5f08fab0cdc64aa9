#!/usr/bin/env bash
# The paired gate's GPU proof, as chains of pytest runs in process sessions of their own (a device call lasts
# 10 minutes at most; a chain outlives it, and each call waits and collects). One chain a GPU, so that a 2-GPU
# machine runs two at once, each on its own GPU with its own inductor cache:
#   tools/probes/paired_chain.sh start 0 "aa_cold aa_warm" 1 "device_plant host_plant"   then:
#   tools/probes/paired_chain.sh wait
# Every step runs the PR tier paired (--perf-against-env: side A is this tree again, so an A/A unless B carries
# a planted fault), sharing its chain's kept inductor cache (.perfgate/pcacheN, empty at the chain's first
# step). host_plant runs the two host-bound cells only (HOST_K). Every step has the PR workflow's shape
# (--perf-precompile 4, numerics on), so its time from pytest to exit is the gate's. Where several chains share a
# host, each is pinned to its own equal share of the CPUs (taskset), as if on a machine of its own. Each wait
# packs the records, reports and logs written so far into $OUT/chainN.tgz.
set -u
top=$PWD/.perfgate
if [ "$1" = step ]; then  # step GPU NAME ARGS...: one pytest run, its log, records and report under its chain
  gpu=$2 name=$3; shift 3
  chain=$top/pchain$gpu
  echo "$(date -u +%T) start $name${CPUS:+ on CPUs $CPUS}" >> "$chain/log.txt"
  t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$gpu timeout 1500 ${CPUS:+taskset -c $CPUS} python3 -m pytest perftests -m "gpu and pr" -p no:randomly \
    --perf-isolate off --perf-cache-dir "$top/pcache$gpu" --perf-against-env PERFGATE_SIDE=base \
    --perf-results "$chain/$name.jsonl" "$@" > "$chain/$name.log" 2>&1
  rc=$?  # before the line below: its $(date) would set $? first
  echo "$(date -u +%T) end $name rc=$rc in $((SECONDS - t0)) s" >> "$chain/log.txt"
  exit 0
fi
if [ "$1" = start ]; then
  mkdir -p "$top"
  shift
  { cat /proc/sys/kernel/random/boot_id; date -u; nvidia-smi --query-gpu=index,name,driver_version --format=csv,noheader
    lscpu | grep -E '^(Model name|CPU\(s\))'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
  } > "$top/machine.txt" 2>&1
  chains=$(( $# / 2 )) share=$(( $(nproc) / ($# / 2) ))
  while [ $# -ge 2 ]; do
    gpu=$1 steps=$2; shift 2
    cpus=""; [ "$chains" -gt 1 ] && cpus="$(( gpu * share ))-$(( gpu * share + share - 1 ))"
    chain=$top/pchain$gpu; mkdir -p "$chain"; rm -f "$chain/done"; cp "$top/machine.txt" "$chain/machine.txt"
    GPU=$gpu STEPS=$steps CHAIN=$chain CPUS=$cpus HOST_K=${HOST_K:-(resnet50 and train) or (segformer_b2 and infer)} \
    setsid nohup bash -c '
      me=tools/probes/paired_chain.sh
      for s in $STEPS; do
        case $s in
          aa_cold|aa_warm) $me step $GPU $s --perf-precompile 4 --perf-baseline baselines --perf-report "$CHAIN/$s" ;;
          device_plant) $me step $GPU $s --perf-precompile 4 --perf-inject device_slow:1.5 ;;
          host_plant) $me step $GPU $s -k "$HOST_K" --perf-precompile 4 --perf-inject host_slow:15 ;;
        esac
      done
      touch "$CHAIN/done"' > /dev/null 2>&1 < /dev/null &
  done
fi
ls -d "$top"/pchain* > /dev/null 2>&1 || { echo "no chain on this machine (boot $(cat /proc/sys/kernel/random/boot_id)): it went back"; exit 5; }
deadline=$(( $(date +%s) + ${WAIT_S:-570} ))
all_done() { for c in "$top"/pchain*; do [ -f "$c/done" ] || return 1; done; }
while ! all_done && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
for c in "$top"/pchain*; do
  n=${c##*pchain}; tar czf "$OUT/chain$n.tgz" -C "$c" --exclude=engine-overlay .
  echo "== chain $n"; cat "$c/log.txt"; grep -h "perfgate paired\|: \(unsure\|regression\)\| passed\| failed\|cell(s) in\|precompiled" "$c"/*.log | cut -c1-400 | tail -24
done
head -3 "$top/machine.txt"
all_done && echo "chains done" || echo "chains running"
