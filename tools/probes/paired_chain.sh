#!/usr/bin/env bash
# The paired gate's GPU proof, as a chain of pytest runs in a process session of its own (a device call lasts
# 10 minutes at most; the chain outlives it, and each call waits and collects):
#   tools/probes/paired_chain.sh start "aa_cold device_plant host_plant aa_warm"   then wait as below
#   tools/probes/paired_chain.sh wait
# Every step runs the PR tier paired (--perf-against-env: side A is this tree again, so an A/A unless B carries
# a planted fault), sharing one kept inductor cache (.perfgate/pcache, empty at the first step). Each wait packs
# the records, reports and logs written so far into $OUT/chain.tgz.
set -u
chain=$PWD/.perfgate/pchain
if [ "$1" = step ]; then  # step NAME ARGS...: one pytest run, its log, records and report under $chain/NAME*
  name=$2; shift 2
  echo "$(date -u +%T) start $name" >> "$chain/log.txt"
  t0=$SECONDS
  timeout 1500 python3 -m pytest perftests -m "gpu and pr" -p no:randomly --perf-isolate off \
    --perf-cache-dir "$PWD/.perfgate/pcache" --perf-against-env PERFGATE_SIDE=base \
    --perf-results "$chain/$name.jsonl" "$@" > "$chain/$name.log" 2>&1
  echo "$(date -u +%T) end $name rc=$? in $((SECONDS - t0)) s" >> "$chain/log.txt"
  exit 0
fi
if [ "$1" = start ]; then
  mkdir -p "$chain"; rm -f "$chain/done"
  { cat /proc/sys/kernel/random/boot_id; nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
    lscpu | grep -E '^(Model name|CPU\(s\))'; python3 -c 'import torch,triton,transformers,timm;print(torch.__version__,triton.__version__,transformers.__version__,timm.__version__)'
  } > "$chain/machine.txt" 2>&1
  STEPS=$2 CHAIN=$chain setsid nohup bash -c '
    me=tools/probes/paired_chain.sh
    for s in $STEPS; do
      case $s in
        aa_cold|aa_warm) $me step $s --perf-precompile 4 --perf-baseline baselines --perf-report "$CHAIN/$s" ;;
        device_plant) $me step $s --perf-numerics off --perf-warm-compile off --perf-inject device_slow:1.5 ;;
        host_plant) $me step $s --perf-numerics off --perf-warm-compile off --perf-inject host_slow:15 ;;
      esac
    done
    touch "$CHAIN/done"' > /dev/null 2>&1 < /dev/null &
fi
[ -d "$chain" ] || { echo "no chain on this machine (boot $(cat /proc/sys/kernel/random/boot_id)): it went back"; exit 5; }
deadline=$(( $(date +%s) + ${WAIT_S:-570} ))
while [ ! -f "$chain/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
tar czf "$OUT/chain.tgz" -C "$chain" .
cat "$chain/machine.txt" "$chain/log.txt"; grep -h "perfgate paired\|^  .*: \(unsure\|regression\)\|passed\|failed" "$chain"/*.log | tail -20
[ -f "$chain/done" ] && echo "chain done" || echo "chain running"
