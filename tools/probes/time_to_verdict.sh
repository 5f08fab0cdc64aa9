#!/usr/bin/env bash
# One device call of issue 37's measurements (docs/time-to-verdict.md), run from the repository root on a
# GPU machine. Usage: tools/probes/time_to_verdict.sh STEP [LIMIT_S]
#   cold    the PR tier gated against baselines/, precompile 4, from empty caches (.perfgate/cc, reference)
#   warm    the same again with the caches the cold step left (A/A against the committed baseline); warm2,
#           warm3 ... the same into a folder of their own, so a chain's later warm runs keep their logs
#   inject  the same with --perf-inject device_slow:3 (every cell must fail the device rule)
#   plant   the same ungated (no confirm round to wait for): compare it offline, perfgate compare
#   precompile  only the precompile (--collect-only), from empty caches
#   inject6 device_slow:3 on gpt2, vit_b16 and resnet50 (6 cells), warm, no precompile
#   rest    the 6 inference cells and the captioner's train cell, precompile 4 (from empty caches on a fresh machine)
#   aa-inject6  gpt2, vit_b16 and resnet50 (6 cells) from empty caches: precompile 4 and an A/A gated run, then
#           device_slow:3 ungated (compare it offline); records straight into $OUT, so a cut call keeps them
#   ab      perfgate ab, 3 + 3 processes, A/A, a 4-cell slice (resumable: --resume on a later call), each
#           side's first process precompiling (perfgate ab's default, --precompile 4)
#   ab0     the same with --precompile 0: each cell compiles cold in its own turn, as before (.perfgate/ab0)
#   ab-off  the same as ab with the cells in pytest's process (--perf-isolate off), as the gated tier runs them
#   hostload  gpt2, vit_b16 and resnet50 (6 cells), warm, with one busy process per CPU beside pytest (a slower
#           host, on purpose), gated against .perfgate/bl-probe: tools/probes/pr_baseline_sources.txt and the
#           cold and warm steps' results of this machine, whose records carry the host probe (schema 12)
#   hostload-inject  the same with --perf-inject device_slow:3 (the device rule must still fail every cell)
# Logs and results under .perfgate/out/STEP; one tarball of them into $OUT. BASELINE=DIR gates against DIR
# (default baselines/); REFRESH="results files..." first folds tools/probes/pr_baseline_sources.txt and those
# files into DIR (perfgate baseline update), so a run is gated against a baseline of the rebuilt pipeline.
# ISOLATE=gpu runs the tier's cells in the isolated worker; the default, off, is the PR workflow's.
# STEP-old (cold-old, warm-old, precompile-old, plant-old; not hostload or ab) runs STEP with the code in
# .old/ (an earlier commit's perfgate, perftests, fixtures, conftest.py and pyproject.toml, e.g.
# `git archive REF ... | tar x -C .old`, carried) on the same caches and baseline: the before of a
# before/after on one machine. It runs from a copy outside the repository: pytest loads the conftest.py of
# every folder above its tests, and the repository's would import today's perfgate first (BW, 2026-11-27: a
# "warm-old" step ran today's code). K="EXPR" runs the cold, warm, precompile and plant steps on the cells
# `-k EXPR` selects.
# EXPECT_GPU="H100" stops at once (rc 4) on another GPU: a call meant for a warm machine that went back lands
# on a fresh one, perhaps of another kind with no baseline (BL, 2026-11-26: 8 minutes on an H200).
set -u
if [ -n "${EXPECT_GPU:-}" ] && ! nvidia-smi --query-gpu=name --format=csv,noheader | grep -q "$EXPECT_GPU"; then
  echo "not a $EXPECT_GPU: $(nvidia-smi --query-gpu=name --format=csv,noheader)"; exit 4
fi
step=$1; limit=${2:-540}; root=$PWD; code=$PWD
if [ "${step%-old}" != "$step" ]; then
  case ${step%-old} in  # the steps whose paths are all absolute; hostload and ab read files relative to $root
    hostload*|ab*) echo "$step: no old-code run of ${step%-old} (its paths are relative to the repository)"; exit 3 ;;
  esac
  code=/tmp/perfgate-old; rm -rf "$code"; cp -r .old "$code" || exit 3
fi
export PYTHONPATH=$code TORCHINDUCTOR_CACHE_DIR=$root/.perfgate/inductor-default
out=$root/.perfgate/out/$step; mkdir -p "$out"
{
  date -u +%FT%TZ; cat /proc/sys/kernel/random/boot_id; lscpu | grep -m1 'Model name'; nproc
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  python -c "import torch, transformers, timm, triton; print(torch.__version__, transformers.__version__, timm.__version__, triton.__version__)"
} > "$out/host.txt" 2>&1
cat "$out/host.txt"
baseline=${BASELINE:-baselines}
if [ -n "${REFRESH+x}" ]; then
  # shellcheck disable=SC2046,SC2086  # the sources are one path a line, none with spaces
  python -m perfgate.cli baseline update --dir "$baseline" $(cat tools/probes/pr_baseline_sources.txt) $REFRESH > "$out/refresh.txt" 2>&1
  tail -1 "$out/refresh.txt"; cp "$baseline"/*.json "$out/"
fi
ungated=(perftests -m "gpu and pr" -p no:randomly --perf-cache-dir "$root/.perfgate/cc" --perf-isolate "${ISOLATE:-off}"
  --perf-reference-cache "$root/.perfgate/reference" -c "$code/pyproject.toml")
[ -n "${K:-}" ] && ungated+=(-k "$K")
tier=("${ungated[@]}" --perf-baseline "$root/$baseline")
slice=(-k "gpt2 or vit_b16")
t0=$(date +%s.%N)
cd "$code" || exit 3
case ${step%-old} in
  cold|warm|warm[0-9]) timeout "$limit" python -m pytest "${tier[@]}" --perf-precompile 4 --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1 ;;
  precompile) timeout -k 5 "$limit" python -m pytest "${ungated[@]}" --collect-only -q --perf-precompile 4 --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1 ;;
  inject6) timeout -k 5 "$limit" python -m pytest "${tier[@]}" -k "gpt2 or vit_b16 or resnet50" --perf-precompile 4 --perf-inject device_slow:3 --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1 ;;
  rest) timeout -k 5 "$limit" python -m pytest "${tier[@]}" -k "infer or captioner" --perf-precompile 4 --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1 ;;
  plant) timeout -k 5 "$limit" python -m pytest "${ungated[@]}" --perf-precompile 4 --perf-inject device_slow:3 --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1 ;;
  inject) timeout "$limit" python -m pytest "${tier[@]}" --perf-precompile 4 --perf-inject device_slow:3 --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1 ;;
  aa-inject6)
      six=(-k "gpt2 or vit_b16 or resnet50"); cp "$out/host.txt" "$OUT/"
      timeout -k 5 330 python -m pytest "${tier[@]}" "${six[@]}" --perf-precompile 4 --perf-results "$OUT/aa.jsonl" > "$OUT/aa-log.txt" 2>&1
      echo "aa rc=$? at $(python -c "import time; print(round(time.time()-$t0,1))") s" | tee -a "$out/times.txt"
      timeout -k 5 $((limit - 340)) python -m pytest "${ungated[@]}" "${six[@]}" --perf-inject device_slow:3 --perf-results "$OUT/inject.jsonl" > "$OUT/inject-log.txt" 2>&1 ;;
  hostload|hostload-inject)
      plant=(); [ "$step" = hostload-inject ] && plant=(--perf-inject device_slow:3)
      if [ ! -d .perfgate/bl-probe ]; then
        # shellcheck disable=SC2046  # the sources are one path a line, none with spaces
        python -m perfgate.cli baseline update --dir .perfgate/bl-probe $(cat tools/probes/pr_baseline_sources.txt) \
          .perfgate/out/cold/results.jsonl .perfgate/out/warm/results.jsonl > "$out/refresh.txt" 2>&1
      fi
      burners=(); for _ in $(seq "$(nproc)"); do python -c 'while True: pass' & burners+=($!); done
      timeout -k 5 "$limit" python -m pytest "${ungated[@]}" -k "gpt2 or vit_b16 or resnet50" \
        --perf-baseline .perfgate/bl-probe "${plant[@]}" --perf-results "$out/results.jsonl" > "$out/log.txt" 2>&1
      load_rc=$?; kill "${burners[@]}"; cp .perfgate/bl-probe/*.json "$out/" 2>/dev/null; (exit $load_rc) ;;
  ab|ab0|ab-off) run=.perfgate/$step; pre=$([ "$step" = ab0 ] && echo 0 || echo 4)
      isolate=(); [ "$step" = ab-off ] && isolate=(--perf-isolate off)
      if [ -f "$run/manifest.json" ]; then args=(--resume "$run"); else args=(--processes 3 --precompile "$pre" --out "$run" -- perftests -m "gpu and pr" -p no:randomly "${slice[@]}" "${isolate[@]}"); fi
      timeout "$limit" python -m perfgate.cli ab "${args[@]}" > "$out/log.txt" 2>&1; ab_rc=$?
      cp "$run/manifest.json" "$run/report.md" "$run/report.json" "$out/" 2>/dev/null; cp -r "$run/results" "$run/logs" "$out/" 2>/dev/null
      (exit $ab_rc) ;;  # the step's rc is perfgate ab's, not the copies' (BH's first call printed cp's 0)
esac
rc=$?
t1=$(date +%s.%N)
echo "step=$step rc=$rc wall_s=$(python -c "print(round($t1-$t0,1))")" | tee -a "$out/times.txt"
grep -E "^perfgate:|PASS|FAIL|passed|failed" "$out/log.txt" | cut -c1-400 | tail -25
cd "$root" && tar czf "$OUT/$step.tgz" -C .perfgate/out "$step"
