#!/usr/bin/env bash
# `make test` (and `make test-reverse`): the unit and integration tests run beside the lab (e2e)
# tests, not before them, at a lower CPU priority (nice 10): the lab tests leave about a fifth of
# the two cores idle while nodes boot, shut down, sleep in waits and copy trees, and the unit and
# integration tests (about 400 core-s) mostly fit in it: a fresh clone's whole run took 2590 s
# this way against 2682 s one after the other (README). Their output goes to build/test-local.log and is printed when they
# end; if they fail, the lab tests are stopped at once (pytest's own teardown brings their labs
# down) and the run fails: a broken unit test still ends the run in minutes.
# LOCAL_PRE (from the Makefile: scripts/lint.sh): a script the unit and integration run starts
# with, in the same lane; when it fails, that run fails without its pytest, as a failing unit test would.
# Env (from the Makefile): LOCAL_ARGS, E2E_ARGS (pytest options of each run), LOCAL_TIMES,
# E2E_TIMES (where each writes its time table, tests/_support/timings.py; empty: none);
# LOCAL_PATHS, E2E_PATHS, LOCAL_LOG (what each runs, and where the first one's output goes;
# tests/unit/test_test_script.py gives probes).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
mkdir -p build
log=${LOCAL_LOG:-build/test-local.log}
t0=$SECONDS
export APPLIANCE_SKIP_IS_FAILURE=1
read -r -a local_args <<<"${LOCAL_ARGS:-}"
read -r -a e2e_args <<<"${E2E_ARGS:-}"
read -r -a local_paths <<<"${LOCAL_PATHS:-tests/unit tests/integration}"
read -r -a e2e_paths <<<"${E2E_PATHS:-tests/e2e}"

# Each run in a session and process group of its own (setsid: no controlling terminal, so nothing
# in it can stop on reading one), as a terminal's Ctrl-C would reach it: pytest and its xdist
# workers alike get SIGINT, and tear their labs down. A run is ready for that INT only once setsid
# has made its group and env has reset SIGINT, which a background job of a script starts with
# ignored: stop() waits for both (its first process leads its group, SigIgn lacks INT), at most
# 10 s. CI stop 51 sent the INT before the group existed; stop 52 before env's reset, where it
# was ignored: lint failed and the lab run went on.
# shellcheck disable=SC2016 # $1 and $@ are the inner bash's: LOCAL_PRE, then pytest's arguments
APPLIANCE_TIMINGS_JSON=${LOCAL_TIMES:-} setsid nice -n 10 env --default-signal=INT \
  bash -c '[[ -z $1 ]] || "$1" || exit; shift; exec pytest -q -rfEs "$@"' test-local "${LOCAL_PRE:-}" \
  "${local_args[@]}" "${local_paths[@]}" </dev/null >"$log" 2>&1 &
local_pid=$!
APPLIANCE_TIMINGS_JSON=${E2E_TIMES:-} setsid env --default-signal=INT \
  pytest -q -rfEs "${e2e_args[@]}" "${e2e_paths[@]}" </dev/null &
e2e_pid=$!
ready() { # $1's group is its own and $1 no longer ignores SIGINT (SigIgn bit 2); gone counts as ready
  local stat key value pgrp mask=0
  { stat=$(<"/proc/$1/stat"); } 2>/dev/null || return 0
  read -r _ _ pgrp _ <<<"${stat##*) }" # after "PID (COMM) ": state, ppid, pgrp
  while read -r key value; do [[ $key != SigIgn: ]] || mask=$value; done 2>/dev/null <"/proc/$1/status"
  ((pgrp == $1 && !(16#$mask & 2)))
}
stop() {
  local i
  for ((i = 0; i < 100; i++)); do
    ready "$1" && break
    sleep 0.1
  done
  kill -INT -- "-$1" 2>/dev/null
}
trap 'stop $local_pid; stop $e2e_pid' INT TERM HUP

wait "$local_pid"
local_rc=$?
printf '\n==== %sunit and integration tests (ran beside the lab tests; %s), rc %s ====\n' \
  "${LOCAL_PRE:+$LOCAL_PRE, }" "$log" "$local_rc"
cat "$log"
if ((local_rc != 0)); then
  echo "make test: ${LOCAL_PRE:+$LOCAL_PRE or }the unit or integration tests failed (rc $local_rc): the lab tests are stopped" >&2
  stop "$e2e_pid"
  # Python drops a KeyboardInterrupt raised inside a callback (an import's module-lock weakref, seen
  # at pytest's start): the INT again every 5 s until the run ends. tests/conftest.py ignores INT
  # once pytest has taken one, so these never cut the labs' teardown short.
  while kill -0 "$e2e_pid" 2>/dev/null; do
    for ((i = 0; i < 50; i++)); do kill -0 "$e2e_pid" 2>/dev/null && sleep 0.1; done
    kill -INT -- "-$e2e_pid" 2>/dev/null
  done
  wait "$e2e_pid"
  exit "$local_rc"
fi
wait "$e2e_pid"
e2e_rc=$?
((e2e_rc == 0)) || exit "$e2e_rc"
echo "make test: pytest (molecule's scenarios included) took $((SECONDS - t0)) s"
