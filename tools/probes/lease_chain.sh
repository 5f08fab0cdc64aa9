#!/usr/bin/env bash
# Steps of time_to_verdict.sh back to back in a process session of their own, so that a step longer than a
# device call's 10 minutes (the cold tier to exit) runs whole, and each call only waits and collects.
#   tools/probes/lease_chain.sh start "cold warm plant" [EXTRA]  start the steps, then wait as below
#   tools/probes/lease_chain.sh wait                             wait until the chain ends or WAIT_S (570) pass
# EXTRA is a command run after the steps (e.g. a probe), its output in .perfgate/chain/extra.txt. Each wait
# packs what the chain has written so far (the steps' tarballs, logs) into $OUT/chain.tgz. The steps keep
# EXPECT_GPU from the caller; STEP_LIMIT_S (900) is each step's time limit.
set -u
chain=$PWD/.perfgate/chain
if [ "$1" = start ]; then
  mkdir -p "$chain"; rm -f "$chain/done"
  STEPS=$2 EXTRA=${3:-} CHAIN=$chain setsid nohup bash -c '
    for s in $STEPS; do
      echo "$(date -u +%T) start $s" >> "$CHAIN/log.txt"
      OUT=$CHAIN tools/probes/time_to_verdict.sh "$s" "${STEP_LIMIT_S:-900}" > "$CHAIN/$s.txt" 2>&1
      rc=$?; echo "$(date -u +%T) end $s rc=$rc" >> "$CHAIN/log.txt"; [ $rc = 4 ] && break
    done
    if [ -n "$EXTRA" ]; then
      echo "$(date -u +%T) start extra" >> "$CHAIN/log.txt"; bash -c "$EXTRA" > "$CHAIN/extra.txt" 2>&1
      echo "$(date -u +%T) end extra rc=$?" >> "$CHAIN/log.txt"
    fi
    touch "$CHAIN/done"' > /dev/null 2>&1 < /dev/null &
fi
# A wait that finds no chain is on a fresh machine (the one that ran it went back): say so at once rather than
# spend the call's device time waiting (2026-11-26: a 9:36 call on a fresh H200 that way).
[ -d "$chain" ] || { echo "no chain on this machine (boot $(cat /proc/sys/kernel/random/boot_id)): it went back"; exit 5; }
deadline=$(( $(date +%s) + ${WAIT_S:-570} ))
while [ ! -f "$chain/done" ] && [ "$(date +%s)" -lt "$deadline" ]; do sleep 5; done
tar czf "$OUT/chain.tgz" -C "$chain" .  # one file: a call brings back at most 8
cat "$chain/log.txt"; [ -f "$chain/done" ] && echo "chain done" || echo "chain running"
