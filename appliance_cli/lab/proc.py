"""Small process helpers: run a command with a LabError on failure, and PID bookkeeping that
never kills anything it cannot prove it started (PID files + command-line check)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path

from appliance_cli.errors import LabError


def run(
    argv: Sequence[str],
    *,
    what: str,
    log: Path | None = None,
    hint: str | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
) -> str:
    """Run argv; on failure raise LabError naming `what` and the log (stderr goes there too)."""
    res = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        input=input,
        env=env,
        check=False,
        stdin=None if input is not None else subprocess.DEVNULL,
    )
    if log is not None:
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a") as fh:
            fh.write(f"$ {' '.join(argv)}\n{res.stdout}{res.stderr}")
    if res.returncode != 0:
        detail = (res.stderr.strip().splitlines() or [f"exit code {res.returncode}"])[-1]
        where = f"; log: {log}" if log else ""
        raise LabError(f"{what} failed: {detail}", hint=(hint or "see the log") + where)
    return res.stdout


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
