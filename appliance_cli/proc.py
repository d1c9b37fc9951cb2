"""Running a host command as a step of the toolkit: its output logged, its failure one line."""

from __future__ import annotations

import subprocess
from collections.abc import Sequence
from pathlib import Path

from appliance_cli.errors import ApplianceError


def run(
    argv: Sequence[str],
    *,
    what: str,
    log: Path | None = None,
    hint: str | None = None,
    input: str | None = None,
    env: dict[str, str] | None = None,
    cwd: Path | None = None,
    error: type[ApplianceError] = ApplianceError,
) -> str:
    """Run argv and return its stdout; on failure raise `error` naming `what` with the command's
    last line of stderr, and the log (which gets the command, its stdout and stderr) as hint."""
    res = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        input=input,
        env=env,
        cwd=cwd,
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
        raise error(f"{what} failed: {detail}", hint=(hint or "see the log") + where)
    return res.stdout
