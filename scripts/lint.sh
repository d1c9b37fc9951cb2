#!/usr/bin/env bash
# `make lint`, and the first step of `make test`'s unit and integration run (scripts/test.sh):
# ruff, mypy, the import DAG and function-length test, yamllint, ansible-lint (production profile).
# Each command is printed before it runs; the first that fails ends it with its status.
set -euo pipefail
cd "$(dirname "$0")/.."
unset APPLIANCE_TIMINGS_JSON # the table and file are the unit run's, not the layering test's
paths=(appliance_cli tests bench module_utils roles/*/library roles/*/filter_plugins roles/*/action_plugins roles/*/molecule)
run() {
  echo "$*"
  "$@"
}
run ruff check "${paths[@]}"
run ruff format --check "${paths[@]}"
run mypy
run pytest -q tests/unit/test_layering.py
run yamllint -s .
run ansible-lint --profile production --offline playbooks roles
