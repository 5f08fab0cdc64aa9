#!/usr/bin/env bash
# One cell, several ways, on one machine in one device call, fresh inductor caches each: did the rebuild
# (issue 37) change a figure, or does the process it runs in? Usage: K="gpt2 and infer" MODES="old new" \
#   tools/probes/cell_diff.sh     (logs, records and host.txt under $OUT/diff)
#   old      the pre-rebuild code (6139811, unpacked in _old/), in pytest's own process (--perf-isolate off)
#   old-iso  the same, isolated: its default then, a fresh interpreter per cell
#   new      this tree, in pytest's own process, no precompile
#   new-iso  this tree, isolated in the warm worker, no precompile
#   pre      this tree, isolated, after --perf-precompile 1 (as the PR workflow runs it)
#   hit      this tree, in-process, reading pre's cache (the precompiled artifacts, no warm worker)
# First, here: mkdir _old && git archive 6139811 conftest.py pyproject.toml perfgate perftests fixtures | tar -x -C _old
# (untracked and not ignored, so the device tool carries it; remove it after). Used for gpt2 infer on AW
# (old new pre hit) and upernet infer (docs/time-to-verdict.md). HOOK=DIR (python tools/probes/host_process.py
# hook OUT) profiles each process's compiled steps after its host clock, into $OUT/diff/inside-PID.json.
set -u
k=${K:-gpt2 and infer}; modes=${MODES:-old new pre hit}
out=${OUT:-.perfgate/out}/diff; mkdir -p "$out"
{ date -u +%FT%TZ; cat /proc/sys/kernel/random/boot_id; lscpu | grep -m1 'Model name'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$out/host.txt" 2>&1
cell=(-m "gpu and pr" -p no:randomly -k "$k" -q --perf-warm-compile off)
run() {  # name, dir, extra args...
  local name=$1 dir=$2; shift 2
  local t0=$SECONDS
  (cd "$dir" && PYTHONPATH=${HOOK:+$HOOK:}$PWD HOST_PROCESS_OUT=${HOOK:+$out} timeout -k 5 200 python -m pytest perftests "${cell[@]}" \
     --perf-results "$out/$name.jsonl" "$@") > "$out/$name.log" 2>&1
  echo "$name rc=$? s=$((SECONDS - t0))" | tee -a "$out/times.txt"
}
rm -rf /tmp/ic-* /tmp/ref-*
for mode in $modes; do
  case $mode in
    old) TORCHINDUCTOR_CACHE_DIR=/tmp/ic-old run old _old --perf-isolate off ;;
    old-iso) TORCHINDUCTOR_CACHE_DIR=/tmp/ic-oldi run old-iso _old --perf-isolate gpu ;;
    new) TORCHINDUCTOR_CACHE_DIR=/tmp/ic-new run new . --perf-isolate off --perf-reference-cache /tmp/ref-new ;;
    new-iso) TORCHINDUCTOR_CACHE_DIR=/tmp/ic-newi run new-iso . --perf-isolate gpu --perf-reference-cache /tmp/ref-newi ;;
    pre) TORCHINDUCTOR_CACHE_DIR=/tmp/ic-x run pre . --perf-cache-dir /tmp/ic-pre --perf-precompile 1 \
           --perf-reference-cache /tmp/ref-pre ;;
    hit) TORCHINDUCTOR_CACHE_DIR=/tmp/ic-x run hit . --perf-isolate off --perf-cache-dir /tmp/ic-pre \
           --perf-reference-cache /tmp/ref-pre ;;
    *) echo "unknown mode $mode (old old-iso new new-iso pre hit)"; exit 2 ;;
  esac
done
python - "$out" $modes <<'PY'
import json, sys, pathlib
for name in sys.argv[2:]:
    p = pathlib.Path(sys.argv[1]) / f"{name}.jsonl"
    recs = [json.loads(l) for l in p.read_text().splitlines() if l.strip().startswith("{")] if p.exists() else []
    for r in recs:
        if r.get("status") == "ok" or (r.get("status") == "failed" and "did not finish" not in r.get("reason", "")):
            print(name, r["status"], "host eager/comp", r.get("eager_host_ms"), r.get("compiled_host_ms"),
                  "host_x", r.get("host_speedup"), "dev", r.get("eager_device_ms"), r.get("compiled_device_ms"),
                  "wall_x", r.get("speedup"), "dev_x", r.get("device_speedup"))
PY
