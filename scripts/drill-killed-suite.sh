#!/usr/bin/env bash
# Drill (issue 27): a test run killed with -9 leaves nothing that breaks the next run.
#   1. VICTIM (an e2e module with a lab of its own) is killed with -9 once its nodes run.
#   2. NEXT (another module) runs: its session sweeps the orphaned lab (its owner PID is dead:
#      nodes stopped, network gone, directories purged), and passes.
#   3. A snapshot save is killed with -9 during its copy: the .NAME.tmp-PID directory it leaves
#      is never found (only a complete one, renamed into place, has snapshot.json), and the next
#      save removes it first.
# Root, the venv on PATH; APPLIANCE_CACHE_DIR as the runs use it. Exits non-zero when a step fails.
set -euo pipefail
cd "$(dirname "$0")/.."
VICTIM=${VICTIM:-tests/e2e/test_node_remove_unreachable.py}
NEXT=${NEXT:-tests/e2e/test_backup_lab.py}
LABS=/var/lib/appliance/labs
say() { printf '[drill %s] %s\n' "$(date +%T)" "$*"; }
nodes_of() { pgrep -f -- "systemd-nspawn .*--machine=$1-" | wc -l; }

say "1. pytest $VICTIM, killed with -9 once its lab's nodes run"
pytest -q -p no:cacheprovider "$VICTIM" >/tmp/drill-victim.log 2>&1 &
victim=$!
owner=""
for _ in $(seq 900); do
  owner=$(grep -lx "$victim" "$LABS"/*/e2e-owner.pid 2>/dev/null | head -1 || true)
  if [[ -n $owner ]] && (($(nodes_of "$(basename "$(dirname "$owner")")") > 0)); then break; fi
  sleep 1
done
[[ -n $owner ]] || { say "FAIL: no lab owned by pid $victim appeared"; exit 1; }
lab=$(basename "$(dirname "$owner")")
sleep 10
kill -9 "$victim"
wait "$victim" 2>/dev/null || true
say "killed pid $victim: lab '$lab' is orphaned: $(nodes_of "$lab") nodes running, owner file: $(cat "$owner")"

say "2. pytest $NEXT"
pytest -q -p no:cacheprovider -rs "$NEXT" 2>&1 | tee /tmp/drill-next.log | tail -4
if ! grep -qE "^[0-9]+ passed" /tmp/drill-next.log || grep -qE "failed|error" /tmp/drill-next.log; then
  say "FAIL: $NEXT did not pass"
  exit 1
fi
(($(nodes_of "$lab") == 0)) || { say "FAIL: lab '$lab' still has nodes running"; exit 1; }
[[ ! -e $LABS/$lab/nodes ]] || { say "FAIL: $LABS/$lab/nodes is still there"; exit 1; }
say "lab '$lab' swept by that run: 0 nodes running, $LABS/$lab/nodes gone"

say "3. a snapshot save killed with -9 during its copy (a 1-node lab 'drill')"
export APPLIANCE_LAB_NAME=drill
appliance lab up --nodes 1 >/tmp/drill-up.log 2>&1 || { say "FAIL: lab up (see /tmp/drill-up.log)"; exit 1; }
python -c 'from appliance_cli.lab import snapshot; snapshot.save("drill", "0" * 20, {})' &
saver=$!
store=$(python -c 'from appliance_cli.lab import snapshot, layout; print(snapshot.store(layout.LabLayout.default()))')
half=""
for _ in $(seq 240); do
  half=$(compgen -G "$store/.drill-*.tmp-$saver" || true)
  [[ -n $half && -d $half/nodes ]] && break
  sleep 0.5
done
sleep 1
kill -9 "$saver"
wait "$saver" 2>/dev/null || true
[[ -n $half && -d $half ]] || { say "FAIL: no half-written snapshot of pid $saver"; exit 1; }
say "killed pid $saver: left $(basename "$half") ($(du -sh "$half" | cut -f1)), snapshot.json in it: $([[ -e $half/snapshot.json ]] && echo yes || echo no)"
found=$(python -c 'from appliance_cli.lab import snapshot, layout; print(snapshot.exists(layout.LabLayout.default(), "drill", "0" * 20))')
[[ $found == False ]] || { say "FAIL: the half-written snapshot is found"; exit 1; }
say "snapshot.exists(drill) = $found: never restored from"
python -c 'from appliance_cli.lab import snapshot, layout; snapshot._remove_abandoned(snapshot.store(layout.LabLayout.default()))'
[[ ! -e $half ]] || { say "FAIL: $half is still there"; exit 1; }
say "the next save removes it first (its PID is dead): $(basename "$half") gone"
appliance lab down --purge >/dev/null
say "passed"
