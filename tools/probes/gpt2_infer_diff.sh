#!/usr/bin/env bash
# Why does the rebuilt pipeline read gpt2 infer's compiled GPU step ~3 % faster than the committed baseline's
# runs (docs/time-to-verdict.md)? One device call, one machine, fresh inductor caches for each run:
#   old   the pre-rebuild code (6139811, unpacked in _old/), in-process
#   new   this tree, in-process, no precompile (the reference computed in the process, as old did)
#   pre   this tree, isolated in the warm worker, after --perf-precompile 1 (as the PR workflow runs it)
#   hit   this tree, in-process, reading pre's cache (the precompiled artifacts, no warm worker)
# First, here: mkdir _old && git archive 6139811 conftest.py pyproject.toml perfgate perftests fixtures | tar -x -C _old
# (untracked and not ignored, so the device tool carries it; remove it after). TORCH_LOGS=output_code is set,
# but the logs held no output code on AW (pytest captures logging: try -p no:logging -s to diff kernels).
set -u
out=${OUT:-.perfgate/out}/diff; mkdir -p "$out"
{ date -u +%FT%TZ; cat /proc/sys/kernel/random/boot_id; lscpu | grep -m1 'Model name'
  nvidia-smi --query-gpu=name,driver_version --format=csv,noheader; } > "$out/host.txt" 2>&1
cell=(-m "gpu and pr" -p no:randomly -k "gpt2 and infer" -q)
run() {  # name, dir, extra args...
  local name=$1 dir=$2; shift 2
  local t0=$SECONDS
  (cd "$dir" && PYTHONPATH=$PWD TORCH_LOGS=output_code timeout -k 5 150 python -m pytest perftests "${cell[@]}" \
     --perf-results "$out/$name.jsonl" "$@") > "$out/$name.log" 2>&1
  echo "$name rc=$? s=$((SECONDS - t0))" | tee -a "$out/times.txt"
}
rm -rf /tmp/ic-*
TORCHINDUCTOR_CACHE_DIR=/tmp/ic-old run old _old --perf-isolate off
TORCHINDUCTOR_CACHE_DIR=/tmp/ic-new run new . --perf-isolate off --perf-reference-cache /tmp/ref-new
TORCHINDUCTOR_CACHE_DIR=/tmp/ic-x run pre . --perf-cache-dir /tmp/ic-pre --perf-precompile 1 --perf-reference-cache /tmp/ref-pre
TORCHINDUCTOR_CACHE_DIR=/tmp/ic-x run hit . --perf-isolate off --perf-cache-dir /tmp/ic-pre --perf-reference-cache /tmp/ref-pre
python - "$out" <<'PY'
import json, sys, pathlib
for name in ("old", "new", "pre", "hit"):
    p = pathlib.Path(sys.argv[1]) / f"{name}.jsonl"
    recs = [json.loads(l) for l in p.read_text().splitlines() if l.strip().startswith("{")] if p.exists() else []
    for r in recs:
        if r.get("status") in ("ok", "failed") and r.get("phase") == "infer":
            print(name, r.get("status"), "eager_dev", r.get("eager_device_ms"), "comp_dev", r.get("compiled_device_ms"),
                  "dev_speedup", r.get("device_speedup"), "wall", r.get("speedup"), "cache", r.get("compile_cache"))
PY
grep -c "def triton_\|async_compile.triton" "$out"/*.log
