#!/bin/sh
# The README's two commands on a fresh Debian 12, as root: `./make.sh demo`, `./make.sh test`.
# A fresh Debian 12 has neither sudo nor make: bootstrap installs make (and everything else the
# targets need), then make runs the target. POSIX sh, since nothing else can be assumed yet.
set -eu
cd "$(dirname "$0")"
if [ "$#" -eq 0 ]; then
  echo "usage: ./make.sh TARGET... (demo, test, lint, unit, integration, e2e, bench)" >&2
  exit 2
fi
# When the command began (s since the epoch): the e2e deadline counts from it (tests/e2e/conftest.py),
# bootstrap and lint included, as CI's 90 min do.
APPLIANCE_RUN_STARTED=$(date +%s)
export APPLIANCE_RUN_STARTED
bash scripts/bootstrap.sh
exec make "$@"
