"""The real `appliance` command started in the background, as the e2e fault cases need it: one
launch for every test that cuts a link, kills a run or holds a lock under a running install."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def start(
    args: list[str], *, stderr: int = subprocess.PIPE, own_group: bool = False
) -> subprocess.Popen[str]:
    """`python -m appliance_cli ARGS` with progress lines as CI prints them (`[  12.3s] STEP`).
    own_group: its own process group, so that killpg takes its ssh children with it."""
    return subprocess.Popen(
        [sys.executable, "-m", "appliance_cli", *args],
        stdout=subprocess.PIPE, stderr=stderr, text=True,
        env=os.environ | {"CI": "1"}, start_new_session=own_group,
    )  # fmt: skip


def start_full_install(site_dir: Path | str, *, own_group: bool = False) -> subprocess.Popen[str]:
    """A run of every role (--full: on a lab unchanged since its last full install a plain install
    runs none and ends in seconds, before any link is cut or lock is looked at)."""
    return start(["install", "--site", str(site_dir), "--skip-diagnose", "--full"], own_group=own_group)
