#!/usr/bin/env bash
# The paired gate's GPU proof, as chains of pytest runs in process sessions of their own (a device call lasts
# 10 minutes at most; a chain outlives it, and each call waits and collects). One chain a GPU (or GPUs, for the
# data-parallel steps), so that a machine of several GPUs runs them at once, each with its own inductor cache:
#   tools/probes/paired_chain.sh start 0 "aa_cold aa_warm" 1 "device_plant host_plant" 2,3 "ddp2 cupti"   then:
#   tools/probes/paired_chain.sh wait
# Every step runs the PR tier paired (--perf-against-env: side A is this tree again, so an A/A unless B carries
# a planted fault), sharing its chain's kept inductor cache (.perfgate/pcacheN, empty at the chain's first
# step). host_plant runs the two host-bound cells only (HOST_K). Every step has the PR workflow's shape
# (--perf-precompile with a third of a GPU's CPUs, PROCS to set it; numerics on), so its time from pytest to exit
# is the gate's. Where several chains share a
# host, each is pinned to its own equal share of the CPUs (taskset), as if on a machine of its own. Each wait
# packs the records, reports and logs written so far into $OUT/chainN.tgz.
# device_plant_shard (aa_shard*: an A/A): the device plant on this chain's shard of the 12 cells (--perf-shard
# K+1/CHAINS), so that N chains on N GPUs of one host judge all 12 in about an Nth of the time (a detection claim
# needs each cell's own verdict, not the whole tier's time). PCACHE: one inductor cache for every chain (a cache
# an earlier step on this machine filled, e.g. nightly4.sh's .perfgate/n4/cache, whose precompile markers
# then spare the chains their own compiles). deal*: the PR workflow's gate step itself (perfgate deal over the
# chain's GPUs, an A/A; deal_plant with the device plant), e.g. start 0,1,2,3 "deal_cold deal_warm deal_plant".
# aa_cold_seq: aa_cold with a cold first pair's sides one after the other (PERFGATE_PAIRED_PREPARE=sequential), to
# time the two ways of preparing on one host: start 0 "aa_cold" 1 "aa_cold_seq" (each chain its own empty cache).
# aa_seq_k[tag]: an A/A of the SEQ_K cells prepared one side after the other, as a planted pair prepares: does
# sequential preparing alone give the device plant's oversized wall lines (gpt2 train +4-8 %, upernet_convnext_t
# infer +8-11 %, where in one process its spin costs its GPU time: tools/probes/spin_wall.py)?
# DEAL_K: the deal steps' cells (-k), e.g. DEAL_K="gpt2 or vit_b16" start 0,1 "deal_cold deal_warm": is a warm deal
# dealt by the kept cache's costs (costs.jsonl; each shard's log says how many cells it priced from them)?
# copies: tools/probes/cell_copies.py on a host-bound cell (COPIES_MODEL/PHASE/STEPS, default segformer_b2 infer,
# 2 steps a round), 3 processes x 4 copies, with one load of inductor's code a process and then one a copy.
# seeds: the same cell in 12 processes x 2 copies, four started with string hash seed 7, four with 8, four each
# its own (SEEDS): do processes that share a seed share a floor?
# modes: host-bound cells (MODES_CELLS) in processes of 2 copies, four each plain, or first given the engine's
# counts stage, its profiler session alone, its Python-call hook alone, or a fresh layout: does that leave a
# process slow? The next question (the engine's A/A sides differ by a median 4-6 %, the probe's processes by ~1 %):
#   MODES_CELLS="segformer_b2:infer:2:$(printf 'plain,%.0s' 1 2 3 4 5 6)$(printf 'eager,%.0s' 1 2 3 4 5 6)$(printf \
#   'pinned,%.0s' 1 2 3 4 5 6)" paired_chain.sh start 0 "modes": do eager rounds between compiled ones, or one
#   CPU set for every worker, change the process spread?
# duet: tools/probes/duet_floor.py, the engine's own side workers of a host-bound cell, 8 a run, their wall rounds
# alternated in random order (DUET_RUNS: model:phase:modes items; DUET_PREPARE=all prepares them at once): do they
# spread as the engine's pairs (4-6 %) or as cell_copies' processes (~1 %)?
# aa_off_cold, aa_off_warm, rl_off*, host_plant_off: aa_cold, aa_warm, rl_new and host_plant with each side's
# rounds on its own CPUs (PERFGATE_PAIRED_PIN=off), judged by the minimum, as the gate did to 2026-11-29 (the
# other steps pin, perfgate.ab.pinning): e.g. start 0 "rl_off rl_new rl_off2 rl_new2 host_plant" on one machine,
# then tools/probes/rejudge.py --pinned / --unpinned over both's records.
# precompileN[tag] (e.g. "precompile4 precompile5 precompile4b precompile5b"): the PR tier's precompile alone, N
# processes from an empty inductor cache and an empty reference cache of its own (with the default one shared, a
# step after the first read the references the first computed: 2026-11-29, 9556437e), timed (its log's "precompiled ... in M:SS", NAME.precompile.json): does
# a fifth process shorten the cold gate's 3:19-3:45 on one GPU's 16 CPUs? Alternate the two, as the host's speed moves.
# rl_study: the host-bound cells (RL_K) with tools/probes/round_lengths.py (paired wall rounds of 12.5, 25, 50 and
# 100 ms before each cell's first look, which then takes 50 ms rounds); their A/A with paired wall rounds of 12 ms
# (rl_short*), 50 ms (rl_gate*: the gate to 2026-11-28) and the gate's own 25 ms (rl_new*); rl_new_attached*
# as rl_new with CUPTI left attached after each profiler session (TEARDOWN_CUPTI=0, as before 2026-11-29).
set -u
top=${CHAIN_TOP:-$PWD/.perfgate}
if [ "$1" = deal ]; then  # deal K GPUS NAME ARGS...: the PR tier paired as the PR workflow runs it, perfgate deal
  k=$2 gpu=$3 name=$4; shift 4  # over the chain's GPUs; its records are then copied to NAME.jsonl beside the others'
  chain=$top/pchain$k
  echo "$(date -u +%T) start $name (perfgate deal) on GPU(s) $gpu" >> "$chain/log.txt"
  t0=$SECONDS
  CUDA_VISIBLE_DEVICES=$gpu timeout 1500 python3 -m perfgate deal --gpus all --out "$chain/$name" -- perftests \
    -m "gpu and pr" -p no:randomly --perf-against-env PERFGATE_SIDE=base --perf-isolate off \
    --perf-cache-dir "${PCACHE:-$top/pcache$k}" --perf-precompile $PROCS --perf-baseline baselines ${DEAL_K:+-k "$DEAL_K"} "$@" \
    > "$chain/$name.log" 2>&1
  rc=$?
  cp "$chain/$name/results.jsonl" "$chain/$name.jsonl" 2>/dev/null
  # one GPU: one session, its side A records in the run folder; several: a shard folder each
  cat "$chain/$name"/results.against.jsonl "$chain/$name"/shard-*/results.against.jsonl > "$chain/$name.against.jsonl" 2>/dev/null
  echo "$(date -u +%T) end $name rc=$rc in $((SECONDS - t0)) s" >> "$chain/log.txt"
  exit 0
fi
if [ "$1" = step ] || [ "$1" = ddp ]; then  # step|ddp K GPUS NAME ARGS...: one pytest run under chain K
  kind=$1 k=$2 gpu=$3 name=$4; shift 4
  chain=$top/pchain$k
  echo "$(date -u +%T) start $name on GPU(s) $gpu${CPUS:+, CPUs $CPUS}" >> "$chain/log.txt"
  t0=$SECONDS
  if [ "$kind" = step ]; then  # the PR tier, paired against this tree
    set -- -m "gpu and pr" --perf-against-env PERFGATE_SIDE=base "$@"
  else  # data-parallel cells, unpaired (one NCCL rank a GPU)
    set -- -m gpu "$@"
  fi
  CUDA_VISIBLE_DEVICES=$gpu timeout 1500 ${CPUS:+taskset -c $CPUS} python3 -m pytest perftests -p no:randomly \
    --perf-isolate off --perf-cache-dir "${PCACHE:-$top/pcache$k}" --perf-results "$chain/$name.jsonl" "$@" \
    > "$chain/$name.log" 2>&1
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
  # The chains run from a copy of the tree taken now: each later device call copies the tree afresh, and a side's
  # worker that imported perfgate during that copy died (ModuleNotFoundError: 4xH200 7bec6a30, 2026-11-28).
  src=$top/src; rm -rf "$src"; mkdir -p "$src"
  tar -cf - --exclude=./.perfgate --exclude=./.git --exclude=./.venv --exclude=./baselines/runs . | tar -xf - -C "$src"
  chains=$(( $# / 2 )) share=$(( $(nproc) / $(nvidia-smi -L | wc -l) )) k=0  # CPUs a GPU
  # The precompile's processes a GPU, as pr-gate.yml sets them: a third of a GPU's CPUs (5 on 16).
  procs=${PROCS:-$(( share / 3 > 1 ? share / 3 : 1 ))}
  while [ $# -ge 2 ]; do
    gpu=$1 steps=$2; shift 2
    # A chain's CPUs: its GPUs' share of the host's (a 2-GPU chain of a 4-GPU host takes half), as if alone.
    n=$(echo "$gpu" | tr , '\n' | wc -l) first=$(echo "$gpu" | cut -d, -f1)
    cpus=""; [ "$chains" -gt 1 ] && cpus="$(( first * share ))-$(( (first + n) * share - 1 ))"
    chain=$top/pchain$k; mkdir -p "$chain"; rm -f "$chain/done"; cp "$top/machine.txt" "$chain/machine.txt"
    CHAIN_TOP=$top SRC=$src K=$k CHAINS=$chains PROCS=$procs GPU=$gpu STEPS=$steps CHAIN=$chain CPUS=$cpus HOST_K=${HOST_K:-(resnet50 and train) or (segformer_b2 and infer)} \
    RL_K=${RL_K:-(resnet50 and train) or segformer_b2 or vit_b16} \
    SEQ_K=${SEQ_K:-(gpt2 and train) or (upernet_convnext_t and infer)} \
    setsid nohup bash -c '
      cd "$SRC" && export CHAIN_TOP
      me=tools/probes/paired_chain.sh
      copies_run() {  # copies_run NAME VAR=VALUE...: tools/probes/cell_copies.py under the chain, its JSON NAME.json
        name=$1; shift
        echo "$(date -u +%T) start $name $*" >> "$CHAIN/log.txt"
        env CUDA_VISIBLE_DEVICES=${GPU%%,*} CELL_MODEL=${COPIES_MODEL:-segformer_b2} CELL_PHASE=${COPIES_PHASE:-infer} \
          CELL_STEPS=${COPIES_STEPS:-2} CELL_CACHE="$CHAIN/copies-cache" "$@" timeout 400 ${CPUS:+taskset -c $CPUS} \
          python3 tools/probes/cell_copies.py > "$CHAIN/$name.json" 2> "$CHAIN/$name.log"
        echo "$(date -u +%T) end $name rc=$?" >> "$CHAIN/log.txt"
      }
      for s in $STEPS; do
        case $s in
          aa_off_cold|aa_off_warm) PERFGATE_PAIRED_PIN=off $me step $K $GPU $s --perf-precompile $PROCS \
            --perf-baseline baselines --perf-report "$CHAIN/$s" ;;
          aa_cold|aa_warm) $me step $K $GPU $s --perf-precompile $PROCS --perf-baseline baselines --perf-report "$CHAIN/$s" ;;
          precompile[0-9]*) rm -rf "$CHAIN/$s-cache"  # the PR tier precompiled alone: N processes, empty caches of its own
              n=${s#precompile}; PCACHE="$CHAIN/$s-cache" $me step $K $GPU $s --collect-only -q --perf-precompile ${n%%[!0-9]*} \
                --perf-reference-cache "$CHAIN/$s-cache/references" ;;
          aa_cold_seq) PERFGATE_PAIRED_PREPARE=sequential $me step $K $GPU $s --perf-precompile $PROCS \
            --perf-baseline baselines --perf-report "$CHAIN/$s" ;;
          aa_seq_k*) PERFGATE_PAIRED_PREPARE=sequential $me step $K $GPU $s -k "$SEQ_K" --perf-precompile $PROCS ;;
          device_plant) $me step $K $GPU $s --perf-precompile $PROCS --perf-inject device_slow:1.5 ;;
          device_plant_shard) $me step $K $GPU $s --perf-precompile $PROCS --perf-inject device_slow:1.5 \
            --perf-shard $(( K + 1 ))/$CHAINS ;;
          aa_shard*) $me step $K $GPU $s --perf-precompile $PROCS --perf-shard $(( K + 1 ))/$CHAINS ;;
          deal_plant) $me deal $K $GPU $s --perf-inject device_slow:1.5 ;;
          deal*) $me deal $K $GPU $s ;;
          host_plant) $me step $K $GPU $s -k "$HOST_K" --perf-precompile $PROCS --perf-inject host_slow:15 ;;
          host_plant_off) PERFGATE_PAIRED_PIN=off $me step $K $GPU $s -k "$HOST_K" --perf-precompile $PROCS \
            --perf-inject host_slow:15 ;;
          rl_study) ROUND_LENGTHS_OUT="$CHAIN/round_lengths.jsonl" $me step $K $GPU $s -k "$RL_K" --perf-precompile $PROCS \
            --perf-round-ms 100 -p tools.probes.round_lengths ;;
          rl_short*) $me step $K $GPU $s -k "$RL_K" --perf-precompile $PROCS --perf-round-ms 24 ;;
          rl_gate*) $me step $K $GPU $s -k "$RL_K" --perf-precompile $PROCS --perf-round-ms 100 ;;
          rl_new_attached*) TEARDOWN_CUPTI=0 $me step $K $GPU $s -k "$RL_K" --perf-precompile $PROCS ;;
          rl_off*) PERFGATE_PAIRED_PIN=off $me step $K $GPU $s -k "$RL_K" --perf-precompile $PROCS ;;
          rl_new*) $me step $K $GPU $s -k "$RL_K" --perf-precompile $PROCS ;;
          graph_plant) $me step $K $GPU $s -k "$HOST_K" --perf-precompile $PROCS --perf-inject graph_break ;;
          ddp2) $me ddp $K $GPU $s -k "ddp and not ddp4 and amp_bf16 and inductor" ;;
          copies) for fresh in 0 1; do  # docs/gate-evidence.md "Process pairs": does loading the code again resample the effect?
              copies_run copies$fresh CELL_PROCESSES=3 CELL_FRESH_CODE=$fresh
            done ;;
          seeds) copies_run seeds CELL_COPIES=2 CELL_ROUNDS=60 CELL_SEEDS=${SEEDS:-7,7,7,7,8,8,8,8,r,r,r,r} ;;
          modes) four() { printf "$1,%.0s" 1 2 3 4; }  # 20 processes of segformer_b2 infer, 8 of resnet50 train
              all=$(four plain)$(four counts)$(four profiler)$(four monitor)$(four layout)
              for cell in ${MODES_CELLS:-segformer_b2:infer:2:${all%,} resnet50:train:1:$(four plain)$(four counts)}; do
                IFS=: read -r model phase steps cell_modes <<< "$cell"  # model:phase:steps a round:modes
                # one process compiles first, so that the others then load it rather than compile it at once
                copies_run modes-$model-$phase-warm CELL_MODEL=$model CELL_PHASE=$phase CELL_STEPS=$steps CELL_COPIES=2 \
                  CELL_ROUNDS=2 CELL_MODES=plain
                copies_run modes-$model-$phase-all CELL_MODEL=$model CELL_PHASE=$phase CELL_STEPS=$steps CELL_COPIES=2 \
                  CELL_ROUNDS=40 CELL_MODES=${cell_modes%,}
              done ;;
          duet) eight() { printf "$1,%.0s" 1 2 3 4 5 6 7 8; }  # tools/probes/duet_floor.py: the engine'"'"'s own workers
              for item in ${DUET_RUNS:-resnet50:train:$(eight plain) segformer_b2:infer:$(eight plain)}; do
                IFS=: read -r model phase modes <<< "$item"; modes=${modes%,}
                tag=$model-$phase-$(echo "$modes" | tr , "\n" | sort | uniq -c | awk "{printf \"%s%s\", \$2, \$1}")
                echo "$(date -u +%T) start duet $item" >> "$CHAIN/log.txt"
                CUDA_VISIBLE_DEVICES=${GPU%%,*} DUET_CELL=$model:$phase DUET_MODES=$modes DUET_CACHE="$CHAIN/duet-cache" \
                  timeout 400 ${CPUS:+taskset -c $CPUS} python3 tools/probes/duet_floor.py > "$CHAIN/duet-$tag.json" \
                  2> "$CHAIN/duet-$tag.log"
                echo "$(date -u +%T) end duet $item rc=$?" >> "$CHAIN/log.txt"
              done ;;
          cupti) for t in 0 1; do  # docs/ddp.md: is compiled autograd'"'"'s one-device step slowed by the profiler?
              echo "$(date -u +%T) start cupti TEARDOWN_CUPTI=$t" >> "$CHAIN/log.txt"
              CUDA_VISIBLE_DEVICES=${GPU%%,*} PROBE_WORLD=1 TEARDOWN_CUPTI=$t timeout 600 ${CPUS:+taskset -c $CPUS} \
                python3 tools/probes/ddp_one_gpu.py gpt2 inductor_ddp_compiled_autograd amp_bf16 \
                > "$CHAIN/cupti$t.json" 2> "$CHAIN/cupti$t.log"
              rc=$?; echo "$(date -u +%T) end cupti TEARDOWN_CUPTI=$t rc=$rc" >> "$CHAIN/log.txt"
            done ;;
        esac
      done
      touch "$CHAIN/done"' > /dev/null 2>&1 < /dev/null &
    k=$(( k + 1 ))
  done
fi
ls -d "$top"/pchain* > /dev/null 2>&1 || { echo "no chain on this machine (boot $(cat /proc/sys/kernel/random/boot_id)): it went back"; exit 5; }
deadline=$(( $(date +%s) + ${WAIT_S:-570} ))
all_done() { for c in "$top"/pchain*; do [ -f "$c/done" ] || return 1; done; }
while ! all_done && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
for c in "$top"/pchain*; do
  n=${c##*pchain}; tar czf "$OUT/chain$n.tgz" -C "$c" --exclude=engine-overlay --exclude=copies-cache --exclude=duet-cache --exclude='precompile*-cache' .
  echo "== chain $n"; cat "$c/log.txt"; grep -h "perfgate paired\|: \(unsure\|regression\)\| passed\| failed\|cell(s) in\|precompiled" "$c"/*.log | cut -c1-400 | tail -24
  runs=(); for f in "$c"/*.jsonl; do case $f in *.against.jsonl|*"*.jsonl") ;; *) runs+=("$f") ;; esac; done
  [ ${#runs[@]} -gt 0 ] && python3 tools/probes/paired_summary.py "${runs[@]}" | cut -c1-300
done
head -3 "$top/machine.txt"
all_done && echo "chains done" || echo "chains running"
