"""Runs of the real `appliance` command killed -9 at a chosen point, for the e2e fault cases."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from tests._support.cli_proc import start


def kill_when_printed(args: list[str], step: str, after: float = 0.0, wait: float = 120) -> bool:
    """Start `appliance ARGS` (progress lines as CI prints them: `[  12.3s] STEP`) and SIGKILL its
    whole process group (its ssh children with it) `after` seconds once it prints STEP, a task or
    `PLAY …` line; False when it ended without printing it."""
    proc = start(args, stderr=subprocess.DEVNULL, own_group=True)
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
