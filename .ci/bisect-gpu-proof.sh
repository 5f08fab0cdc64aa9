#!/usr/bin/env bash
# The GPU proof of `perfgate bisect` (docs/bisect.md): a throwaway git repository of STEPS commits of this
# working tree's suite, where commit CULPRIT plants `--perf-inject=device_slow:LOSS` in pytest's addopts
# (LOSS % more GPU work after every compiled step), bisected on one GPU cell. Needs no network: the
# repository is built from the files here, and the image's python (torch, transformers, timm) runs it.
#
#   OUT=/some/dir .ci/bisect-gpu-proof.sh            from the repository root, on a GPU machine
#
# It stops itself (SIGTERM, as a cancelled CI job would) after LIMIT_S seconds, before a 10-minute device
# call ends; run the same command again on the same machine and it resumes (WORK keeps the bisection).
# Logs, bisect.json and the reports land in OUT; the culprit found and the time taken are printed last.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
OUT=${OUT:-$ROOT/.perfgate/bisect-gpu-proof-out}
WORK=${WORK:-/tmp/perfgate-bisect-gpu-proof}
PY=${PYTHON:-python}
# The defaults fit ~6 minutes on an H100 (2 probes x 4 processes of ~35 s, plus ~25 s a probe to collect):
# 3 commits, a 20 % loss judged at 10 %, so that 2 processes a side settle each probe (their device line is
# ~22 x the ~0.2 % sd between processes). STEPS=8 CULPRIT=5 is the fuller proof (4 probes: two calls).
STEPS=${STEPS:-3}              # commits in the range, the good end first
CULPRIT=${CULPRIT:-1}          # the commit (0-based) that plants the loss
LOSS=${LOSS:-20}               # % of the compiled step's GPU time added (device_slow)
RULE=${RULE:-device_speedup:10} # what makes a step bad: the device speedup down past 10 %
PROCESSES=${PROCESSES:-2}      # a side per probe; an unsure probe gets more, up to MAX_PROCESSES
MAX_PROCESSES=${MAX_PROCESSES:-3}
MODEL=${MODEL:-vit_b16}
PHASE=${PHASE:-infer}
MARKS=${MARKS:-gpu and pr}     # a dry run of this script on a CPU box: MARKS=cpu LOSS=400 RULE=speedup:50
EXTRA_ARGS=${EXTRA_ARGS:-}     # more pytest args, one string (the CPU dry run: --perf-min-rounds=15)
LIMIT_S=${LIMIT_S:-560}
mkdir -p "$OUT"
command -v git > /dev/null || { echo "error: git is needed (the range is a throwaway git repository)" >&2; exit 2; }

if [ ! -d "$WORK/repo/.git" ]; then
    rm -rf "$WORK" && mkdir -p "$WORK/repo"
    cp -r conftest.py pyproject.toml perfgate perftests fixtures "$WORK/repo/"
    find "$WORK/repo" -name __pycache__ -prune -exec rm -rf {} +
    cd "$WORK/repo"
    git init -q
    for n in $(seq 0 $((STEPS - 1))); do
        echo "commit $n" > NOTES
        subject="step $n"
        if [ "$n" -eq "$CULPRIT" ]; then
            sed -i "0,/addopts = \"/s//addopts = \"--perf-inject=device_slow:$LOSS /" pyproject.toml
            grep -q "device_slow:$LOSS" pyproject.toml || { echo "could not plant the loss in pyproject.toml" >&2; exit 2; }
            subject="step $n plants device_slow:$LOSS"
        fi
        git add -A
        git -c user.name=proof -c user.email=proof@localhost -c commit.gpgsign=false commit -q -m "$subject"
    done
fi
cd "$WORK/repo"
git log --oneline | tee "$OUT/range.txt"

if [ -f "$WORK/bisect/bisect.json" ]; then
    args=(--resume "$WORK/bisect")
else
    args=(--good "HEAD~$((STEPS - 1))" --bad HEAD --rule "$RULE" --processes "$PROCESSES"
          --max-processes "$MAX_PROCESSES" --out "$WORK/bisect"
          -- perftests -m "$MARKS" --perf-models "$MODEL" -k "$PHASE" -p no:randomly -q
          --perf-isolate off --perf-warm-compile off --perf-numerics off $EXTRA_ARGS)
fi
started=$SECONDS
set +e
PYTHONPATH="$WORK/repo" timeout -s TERM "$LIMIT_S" "$PY" -m perfgate.cli bisect \
    --markdown "$OUT/report.md" --json "$OUT/report.json" "${args[@]}" 2>&1 | tee -a "$OUT/bisect.log"
rc=${PIPESTATUS[0]}
set -e
# what was measured, without the caches and checkouts (results are a few KB a process)
(cd "$WORK" && find bisect -path '*/cache' -prune -o -path '*/worktrees' -prune -o -type f -print \
    | tar -cf - -T - | tar -xf - -C "$OUT")
echo "planted at step $CULPRIT: $(git log --format='%h %s' -1 "HEAD~$((STEPS - 1 - CULPRIT))")"
echo "perfgate bisect exit $rc after $((SECONDS - started)) s in this call ($(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1))"
if [ -f "$OUT/report.json" ]; then
    "$PY" -c "import json,sys; r=json.load(open(sys.argv[1])); o=r['outcome']; s=r['steps']
print('outcome:', o['outcome'], '| first bad:', s[o['first_bad']]['label'] if o['first_bad'] is not None else '-',
      '| last good:', s[o['last_good']]['label'] if o['last_good'] is not None else '-')" "$OUT/report.json"
fi
[ "$rc" -eq 124 ] && echo "stopped at LIMIT_S=$LIMIT_S s: run the same command again to resume"
exit 0
