"""Runs of the real `appliance` command killed -9 at a chosen point, for the e2e fault cases."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time


def kill_when_printed(args: list[str], step: str, after: float = 0.0, wait: float = 120) -> bool:
    """Start `appliance ARGS` (progress lines as CI prints them: `[  12.3s] STEP`) and SIGKILL its
    whole process group (its ssh children with it) `after` seconds once it prints STEP, a task or
    `PLAY …` line; False when it ended without printing it."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "appliance_cli", *args],
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env=os.environ | {"CI": "1"}, start_new_session=True,
    )  # fmt: skip
    assert proc.stdout is not None
    reached = False
    for line in proc.stdout:
        if line.rstrip().endswith(f"] {step}"):
            reached = True
            time.sleep(after)
            os.killpg(proc.pid, signal.SIGKILL)
            break
    proc.stdout.close()
    proc.wait(timeout=wait)
    return reached
