# The two commands of the README, and their parts.
#   ./make.sh demo   -> rehearsal lab up, build+verify the lab bundle, install, verify, summary
#   ./make.sh test   -> lint (ruff, mypy, import DAG, yamllint, ansible-lint production) + unit +
#                       integration + lab e2e, every role's molecule scenario among them
SHELL := /bin/bash
VENV := .venv/bin
export PATH := $(CURDIR)/$(VENV):$(PATH)

.PHONY: bootstrap demo test test-reverse lint unit integration e2e molecule bench clean

bootstrap:
	@scripts/bootstrap.sh

demo: bootstrap
	@scripts/demo.sh

lint: bootstrap
	@scripts/lint.sh

unit: bootstrap
	pytest -q tests/unit

integration: bootstrap
	pytest -q tests/integration

e2e: bootstrap
	pytest -q $(E2E_PARALLEL) tests/e2e

# Every unit, integration and e2e test runs, and every role's molecule scenario (two e2e modules
# run them, tests/_support/molecule_scenarios.py); a test that cannot run fails, and so does a module
# the e2e run had no time to start (tests/e2e/conftest.py's deadline), listed at the end. At the end each
# pytest run prints the time of each module (lab setup and tests apart) and writes it to
# build/suite-times-*.json.
# The lab modules run in two processes (pytest-xdist, a module per process at a time): two labs at
# once use the second core while the first waits on the nodes (measured: a 4-node no-op install took
# 78 s alone, 124 s two at once, 200 s three at once; so two). In tests/e2e/conftest.py's ORDER.
E2E_PARALLEL := -n 2 --dist loadfile --no-loadscope-reorder
# Unit and integration tests in two processes too: 282 s instead of 534 s on 2 cores (1115 tests).
# A module per process (loadfile): a module's tests share its module-scoped fixture, as in one
# process (test_standin_apiserver's drain test reads the node its label test added; split over
# two processes it failed in a fresh clone of 89e8f0c with nodes "w1" not found).
LOCAL_PARALLEL := -n 2 --dist loadfile
# Lint, then the unit and integration tests, run beside the lab tests, at a lower CPU priority
# (scripts/test.sh); lint or a unit test failing stops the lab tests.
test: bootstrap
	@LOCAL_PRE=scripts/lint.sh LOCAL_ARGS="$(LOCAL_PARALLEL)" E2E_ARGS="$(E2E_PARALLEL)" LOCAL_TIMES=$(CURDIR)/build/suite-times-local.json \
	  E2E_TIMES=$(CURDIR)/build/suite-times-e2e.json scripts/test.sh

# The same tests with the modules in reverse order: no module may rely on another's leftovers.
test-reverse: bootstrap
	@APPLIANCE_TEST_ORDER=reverse LOCAL_ARGS="$(LOCAL_PARALLEL)" E2E_ARGS="$(E2E_PARALLEL)" \
	  E2E_TIMES=$(CURDIR)/build/suite-times-reverse.json scripts/test.sh

# Every role's molecule scenario on the rehearsal lab (root), one at a time, each timed and logged
# to build/molecule/ROLE.log, in the order and the way the suite runs them
# (tests/_support/molecule_scenarios.py; `make test` runs them as two e2e modules).
# MOLECULE_ROLES="os_prereqs container_runtime" runs a subset; the lab is APPLIANCE_LAB_NAME (default mol).
MOLECULE_ROLES ?= $(shell $(VENV)/python -m tests._support.molecule_scenarios)
molecule: bootstrap
	@$(VENV)/python -m tests._support.molecule_scenarios run $(MOLECULE_ROLES)

bench: bootstrap
	@for b in bench/bench_*.py; do $(VENV)/python $$b || exit 1; done

clean:
	rm -rf .venv build dist
