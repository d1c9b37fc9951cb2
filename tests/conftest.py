"""Shared by every test directory: the time-per-module table printed at the end of each run
(tests/_support/timings.py)."""

from __future__ import annotations

import pytest

from tests._support.timings import SuiteTimings


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SuiteTimings(), "appliance-suite-timings")


@pytest.hookimpl(trylast=True)  # after tests/e2e/conftest.py has put the long lab modules first
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
