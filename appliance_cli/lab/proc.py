"""PID bookkeeping that never kills anything it cannot prove it started (PID files +
command-line check)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def read_pid(path: Path) -> int | None:
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def alive(pid: int | None) -> bool:
    """True for a running process; zombies (exited, not reaped by PID 1) count as gone."""
    if not pid:
        return False
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def owned(pid: int | None, marker: str) -> bool:
    """The PID still belongs to the process we started (guards against PID reuse)."""
    return alive(pid) and marker in cmdline(pid or 0)


def terminate(pid: int, timeout: float, sig: int = signal.SIGTERM) -> bool:
    """Send sig, wait up to timeout; SIGKILL if still there. Returns True if it stopped politely."""
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive(pid):
            return True
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    return False
