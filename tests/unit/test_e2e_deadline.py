"""tests/e2e/conftest.py's deadline: past it, a module not yet started fails, naming itself and the
command that runs it alone; nothing is skipped for time."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from tests._support.labsnap import REPO


def _run(tmp_path: Path, deadline: str) -> subprocess.CompletedProcess[str]:
    for name in ("test_probe_a.py", "test_probe_b.py"):
        (tmp_path / name).write_text("def test_one():\n    pass\n\ndef test_two():\n    pass\n")
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rfEs", "-p", "tests.e2e.conftest", "-p", "no:cacheprovider",
         str(tmp_path / "test_probe_a.py"), str(tmp_path / "test_probe_b.py")],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={**os.environ, "APPLIANCE_E2E_DEADLINE_S": deadline, "APPLIANCE_SKIP_IS_FAILURE": "1"},
    )  # fmt: skip


def test_past_the_deadline_every_module_not_started_fails_by_name(tmp_path: Path) -> None:
    r = _run(tmp_path, "0.000001")
    assert r.returncode == 1, r.stdout
    assert "4 errors" in r.stdout and "skipped" not in r.stdout, r.stdout
    for name in ("test_probe_a.py", "test_probe_b.py"):
        assert f"run it alone with `pytest {os.path.relpath(tmp_path / name, REPO)}`" in r.stdout
    assert "not started: the e2e run had passed its deadline" in r.stdout


def test_before_the_deadline_or_without_one_every_module_runs(tmp_path: Path) -> None:
    for deadline in ("3600", "0"):
        r = _run(tmp_path, deadline)
        assert r.returncode == 0 and "4 passed" in r.stdout, r.stdout
