"""tests/e2e/conftest.py's deadline: past it, each test of a module not yet started fails at once,
naming the module and the command that runs it alone, and the run ends with their list; before it
(or with none) every module runs; and under `make test` (APPLIANCE_SKIP_IS_FAILURE=1) no skip of
any kind passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._support.labsnap import REPO
from tests._support.timings import inner_run_env


def _run(tmp_path: Path, deadline: str, body: str = "pass") -> subprocess.CompletedProcess[str]:
    for name in ("test_probe_a.py", "test_probe_b.py"):
        (tmp_path / name).write_text(f"def test_one():\n    {body}\n\ndef test_two():\n    pass\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "tests.conftest", "-p", "tests.e2e.conftest",
         "-p", "no:cacheprovider",
         str(tmp_path / "test_probe_a.py"), str(tmp_path / "test_probe_b.py")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**inner_run_env(), "APPLIANCE_E2E_DEADLINE_S": deadline, "APPLIANCE_SKIP_IS_FAILURE": "1"},
    )  # fmt: skip


def test_past_the_deadline_every_module_not_started_fails_by_name_and_is_listed(tmp_path: Path) -> None:
    r = _run(tmp_path, "0.000001")
    assert r.returncode == 1 and r.stdout.splitlines()[-1].startswith("4 errors in "), r.stdout
    assert "NOT RUN for time: 2 modules, 4 tests" in r.stdout, r.stdout
    for name in ("test_probe_a.py", "test_probe_b.py"):
        assert f"run it alone with `pytest {os.path.relpath(tmp_path / name, REPO)}`" in r.stdout
    assert "not started: the e2e run had passed its deadline" in r.stdout


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
