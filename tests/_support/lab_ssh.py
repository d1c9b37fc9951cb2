"""One way for the lab e2e tests to run a shell command as root on a lab node (no tests here):
ssh through the site's ssh_config, `sudo sh -c` with the command quoted by shlex.quote."""

from __future__ import annotations

import shlex
import subprocess
from pathlib import Path
from typing import Any


def root_sh(
    site_dir: Path,
    node: str,
    command: str,
    timeout: float = 120,
    stdin: str | bytes | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """`command` as root on `node`; its output as text, or as bytes with text=False (`stdin` likewise)."""
    return subprocess.run(
        [
            "ssh",
            "-F",
            str(site_dir / "ssh_config"),
            "-o",
            "BatchMode=yes",
            node,
            "sudo sh -c " + shlex.quote(command),
        ],
        input=stdin,
        capture_output=True,
        text=text,
        timeout=timeout,
        check=False,
    )
