"""The README's two commands are what CI runs, and they need nothing a fresh Debian 12 lacks
(no sudo, no make: make.sh is POSIX sh and bootstrap installs make and python3-venv first)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    block = text.split("## The two commands", 1)[1].split("```bash", 1)[1].split("```", 1)[0]
    return [line.split("#", 1)[0].strip() for line in block.strip().splitlines()]


def test_readme_commands_need_no_sudo_and_ci_runs_the_test_one() -> None:
    demo, test = _readme_commands()
    assert (demo, test) == ("./make.sh demo", "./make.sh test")
    ci = (ROOT / ".ci" / "run").read_text()
    assert re.search(rf"^exec {re.escape(test)}$", ci, re.M), (
        ".ci/run must run exactly the README's test command"
    )


def test_bootstrap_installs_what_a_fresh_debian_lacks() -> None:
    text = (ROOT / "scripts" / "bootstrap.sh").read_text()
    packages = set(text.split("HOST_PACKAGES=(", 1)[1].split(")", 1)[0].split())
    assert {"make", "python3", "python3-venv"} <= packages


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_make_sh_is_posix_sh() -> None:
    r = subprocess.run(["shellcheck", "-s", "sh", str(ROOT / "make.sh")], capture_output=True, text=True)
    assert r.returncode == 0, r.stdout


def test_make_sh_without_a_target_is_a_usage_error() -> None:
    r = subprocess.run(["sh", str(ROOT / "make.sh")], capture_output=True, text=True)
    assert r.returncode == 2 and "usage: ./make.sh TARGET" in r.stderr
