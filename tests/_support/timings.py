"""Where the suite's time goes: a pytest plugin (tests/conftest.py loads it).

Per test module it adds up pytest's own phase durations: `setup` + `teardown` (fixtures: for an
e2e module that is its lab, brought up or restored from a snapshot, and torn down) and `call` (the
tests themselves). At the end of the run it prints one table, slowest first, with the total, and
writes the same figures as JSON to $APPLIANCE_TIMINGS_JSON when that is set (bench/suite_times.py
reads it for the README). Nothing is asserted here: it only reports.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

# Why a module the e2e run never started failed (tests/e2e/conftest.py's deadline): each of its
# tests fails with it, and the end of the run lists them.
NOT_STARTED_FOR_TIME = "not started: the e2e run would not end by its deadline"


@dataclass
class Pace:
    """How long the modules one test process ran took against what the table expected of them:
    the machine's pace on this run (1.0 until a module has ended; never below 0.5, so a first
    module far quicker than its figure does not let a long one start too late)."""

    expected: float = 0.0
    actual: float = 0.0

    def add(self, expected: float, actual: float) -> None:
        self.expected += expected
        self.actual += actual

    @property
    def factor(self) -> float:
        return max(self.actual / self.expected, 0.5) if self.expected > 0 else 1.0


def starts_in_time(spent: float, expected: float, pace: Pace, deadline: float) -> bool:
    """Whether a module expected to take EXPECTED seconds (at the table's pace) would end by
    DEADLINE, SPENT seconds into the run, at this run's pace. DEADLINE 0: there is none."""
    return not deadline or spent + expected * pace.factor <= deadline


# What an outer pytest run sets for itself (its time table, its module order, when its command
# began, pytest's own and xdist's settings), which a pytest run a test starts (a probe run, a
# scenario's testinfra) must not read.
_OUTER_ENV = ("APPLIANCE_TIMINGS_JSON", "APPLIANCE_TEST_ORDER", "APPLIANCE_RUN_STARTED")


def inner_run_env() -> dict[str, str]:
    """This process's environment without the outer pytest run's own settings."""
    return {k: v for k, v in os.environ.items() if k not in _OUTER_ENV and not k.startswith("PYTEST_")}


def skip_reason(report: pytest.TestReport) -> str:
    """Why a skipped test was skipped, as pytest keeps it (a (file, line, reason) tuple or text)."""
    return report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)


_SETUP = ("setup", "teardown")


class SuiteTimings:
    def __init__(self) -> None:
        self.started = time.monotonic()
        self.modules: dict[str, dict[str, float]] = defaultdict(
            lambda: {"setup": 0.0, "tests": 0.0, "count": 0}
        )
        self.order: list[str] = []

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        module = report.nodeid.split("::", 1)[0]
        if module not in self.modules:
            self.order.append(module)
        row = self.modules[module]
        if report.when in _SETUP:
            row["setup"] += report.duration
        else:
            row["tests"] += report.duration
            row["count"] += 1

    def rows(self) -> list[dict[str, Any]]:
        out = [{"module": m, **self.modules[m]} for m in self.order]
        return sorted(out, key=lambda r: r["setup"] + r["tests"], reverse=True)

    def pytest_terminal_summary(self, terminalreporter: Any) -> None:
        rows = self.rows()
        if not rows:
            return
        wall = time.monotonic() - self.started
        tr = terminalreporter
        tr.section("time per module (s): setup = fixtures and lab, tests = the tests themselves")
        tr.write_line(f"{'module':<58} {'setup':>8} {'tests':>8} {'total':>8} {'n':>5}")
        for r in rows:
            total = r["setup"] + r["tests"]
            tr.write_line(
                f"{r['module']:<58} {r['setup']:8.1f} {r['tests']:8.1f} {total:8.1f} {r['count']:5d}"
            )
        setup = sum(r["setup"] for r in rows)
        tests = sum(r["tests"] for r in rows)
        tr.write_line(
            f"{'all ' + str(len(rows)) + ' modules':<58} {setup:8.1f} {tests:8.1f} {setup + tests:8.1f}"
        )
        tr.write_line(f"wall time of the run: {wall:.1f} s ({wall / 60:.1f} min)")
        dest = os.environ.get("APPLIANCE_TIMINGS_JSON")
        if dest:
            path = Path(dest)
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_name(path.name + ".tmp")
            tmp.write_text(json.dumps({"wall_s": wall, "modules": rows}, indent=1) + "\n")
            tmp.replace(path)
