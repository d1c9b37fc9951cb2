"""tests/e2e/conftest.py's deadline: each test of a module that would not end by it (its figure in
MODULE_SECONDS, at the run's pace) fails at once, naming the module and the command that runs it
alone, a shorter module after it still runs, and the run ends with their list; with time enough
(or no deadline) every module runs; and under `make test` (APPLIANCE_SKIP_IS_FAILURE=1) no skip of
any kind passes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from tests._support.labsnap import REPO
from tests._support.timings import Pace, inner_run_env, starts_in_time


def _run(
    tmp_path: Path,
    deadline: str,
    body: str = "pass",
    names: tuple[str, ...] = ("test_probe_a.py", "test_probe_b.py"),
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[str]:
    for name in names:
        (tmp_path / name).write_text(f"def test_one():\n    {body}\n\ndef test_two():\n    pass\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "tests.conftest", "-p", "tests.e2e.conftest",
         "-p", "no:cacheprovider", *(str(tmp_path / name) for name in names)],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**inner_run_env(), "APPLIANCE_E2E_DEADLINE_S": deadline, "APPLIANCE_SKIP_IS_FAILURE": "1", **(env or {})},
    )  # fmt: skip


def test_past_the_deadline_every_module_not_started_fails_by_name_and_is_listed(tmp_path: Path) -> None:
    r = _run(tmp_path, "0.000001")
    assert r.returncode == 1 and r.stdout.splitlines()[-1].startswith("4 errors in "), r.stdout
    assert "NOT RUN for time: 2 modules, 4 tests" in r.stdout, r.stdout
    for name in ("test_probe_a.py", "test_probe_b.py"):
        assert f"run it alone with `pytest {os.path.relpath(tmp_path / name, REPO)}`" in r.stdout
    assert "not started: the e2e run would not end by its deadline" in r.stdout


def test_a_module_that_would_end_past_the_deadline_is_not_started_but_a_shorter_one_after_it_is(
    tmp_path: Path,
) -> None:
    """Probe modules named after two of MODULE_SECONDS' (their order and figures: faults 1120 s
    first, lab_lifecycle 22 s), 600 s before the deadline: the first would not end by it."""
    r = _run(tmp_path, "600", names=("test_faults.py", "test_lab_lifecycle.py"))
    assert r.returncode == 1 and "2 errors" in r.stdout and "2 passed" in r.stdout, r.stdout
    assert "NOT RUN for time: 1 modules, 2 tests" in r.stdout, r.stdout
    assert "(0 min spent, about 19 more needed, APPLIANCE_E2E_DEADLINE_S=600)" in r.stdout, r.stdout


def test_the_deadline_counts_from_when_make_sh_began(tmp_path: Path) -> None:
    """./make.sh began 5000 s ago (APPLIANCE_RUN_STARTED): of a 5200 s deadline, 200 s are left,
    enough for lab_lifecycle's 22 s and not for faults' 1120."""
    began = str(int(time.time()) - 5000)
    r = _run(
        tmp_path,
        "5200",
        names=("test_faults.py", "test_lab_lifecycle.py"),
        env={"APPLIANCE_RUN_STARTED": began},
    )
    assert r.returncode == 1 and "2 errors" in r.stdout and "2 passed" in r.stdout, r.stdout
    assert "(83 min spent, about 19 more needed, APPLIANCE_E2E_DEADLINE_S=5200)" in r.stdout, r.stdout


def test_the_pace_of_the_modules_run_so_far_scales_each_figure() -> None:
    pace = Pace()
    assert pace.factor == 1.0 and starts_in_time(100, 500, pace, 600)
    pace.add(expected=200, actual=300)  # this machine runs at 1.5 times the figures
    assert (
        pace.factor == 1.5 and not starts_in_time(100, 500, pace, 600) and starts_in_time(100, 300, pace, 600)
    )
    pace.add(expected=800, actual=100)  # far quicker: a figure still counts at least half
    assert pace.factor == 0.5 and starts_in_time(300, 600, pace, 600)
    assert starts_in_time(10**6, 10**6, pace, 0)  # no deadline


def test_any_skip_fails_under_make_test(tmp_path: Path) -> None:
    r = _run(tmp_path, "0", body="import pytest; pytest.skip('no openssl here')")
    assert r.returncode == 1 and "2 failed, 2 passed" in r.stdout, r.stdout
    assert "could not run, which `make test` counts as a failure: Skipped: no openssl here" in r.stdout
    assert "NOT RUN for time" not in r.stdout


def test_before_the_deadline_or_without_one_every_module_runs(tmp_path: Path) -> None:
    for deadline in ("3600", "0"):
        r = _run(tmp_path, deadline)
        assert r.returncode == 0 and "4 passed" in r.stdout, r.stdout
        assert "NOT RUN for time" not in r.stdout
