"""Shared by every test directory: the time-per-module table printed at the end of each run
(tests/_support/timings.py)."""

from __future__ import annotations

import contextlib
import signal

import pytest
from hypothesis import HealthCheck, settings

from tests._support.timings import SuiteTimings, skip_reason

# Hypothesis judges no example by wall time: the unit tests run beside the lab tests at a lower
# priority (scripts/test.sh), where a quick example may wait its turn for a core.
settings.register_profile("appliance", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("appliance")


def pytest_keyboard_interrupt(excinfo: pytest.ExceptionInfo[BaseException]) -> None:
    """One INT (Ctrl-C, or scripts/test.sh's) stops the run and its labs are torn down; any INT after
    it is ignored, so it cannot cut that teardown short (test.sh repeats its INT while the run
    lives, as Python can drop one)."""
    with contextlib.suppress(ValueError):  # not the main thread (an xdist worker's execnet thread)
        signal.signal(signal.SIGINT, signal.SIG_IGN)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteTimings(), "appliance-suite-timings")


@pytest.hookimpl(trylast=True)  # after tests/e2e/conftest.py has put its modules in ORDER
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """APPLIANCE_TEST_ORDER=reverse runs the modules last to first (each module's tests keep their
    order): no module may depend on what another left behind (`make test-reverse`)."""
    import os

    if os.environ.get("APPLIANCE_TEST_ORDER") != "reverse":
        return
    modules: dict[str, list[pytest.Item]] = {}
    for item in items:
        modules.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    items[:] = [i for m in reversed(list(modules)) for i in modules[m]]


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]):  # type: ignore[no-untyped-def]
    """Under `make test` (APPLIANCE_SKIP_IS_FAILURE=1) a test that cannot run fails, naming why:
    the suite proves everything or says what it did not prove. `make unit` as a user keeps skips
    (a test that needs root, say). There is no exception: a module the e2e run had no time to
    start fails too, by name (tests/e2e/conftest.py's deadline)."""
    import os

    outcome = yield
    report = outcome.get_result()
    if (
        os.environ.get("APPLIANCE_SKIP_IS_FAILURE") == "1"
        and report.skipped
        and not hasattr(report, "wasxfail")
    ):
        reason = skip_reason(report)
        report.outcome = "failed"
        report.longrepr = f"could not run, which `make test` counts as a failure: {reason}"
