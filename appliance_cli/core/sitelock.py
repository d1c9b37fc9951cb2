"""One run at a time per site: a lock on the controller and one on the master.

The controller's lock is an flock on `<site>/.appliance-run.lock` (two terminals on the same
laptop). The master's is an flock held by a process the controller keeps running over SSH for the
whole run (`flock -n /run/appliance-run.lock`, then it waits on its stdin): a second controller
(another laptop, another copy of the site directory) finds it taken. Neither outlives its run:
the controller's goes with the process, the master's with the SSH session, so a killed run
(kill -9, a dropped link) leaves no stale lock to clean up by hand.
"""

from __future__ import annotations

import fcntl
import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from appliance_cli.core.remote import ssh_argv
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import ApplianceError, Unreachable

CONTROLLER_LOCK = ".appliance-run.lock"
MASTER_LOCK = "/run/appliance-run.lock"
LOCKED = "appliance-lock-held"
# The remote side: take the lock without waiting, say so, then hold it until stdin closes.
MASTER_COMMAND = ["flock", "-n", MASTER_LOCK, "sh", "-c", f"echo {LOCKED}; exec cat >/dev/null"]


class SiteBusy(ApplianceError):
    """Another run holds the site."""

    exit_code = 9


@contextmanager
def controller_lock(site_dir: Path, what: str) -> Iterator[None]:
    path = site_dir / CONTROLLER_LOCK
    fh = path.open("a+")
    try:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "another process"
            raise SiteBusy(
                f"{site_dir}: another run holds this site ({holder})",
                hint="wait for it to finish; two runs at once on one site would fight over every node",
            ) from None
        fh.seek(0)
        fh.truncate()
        fh.write(f"`appliance {what}`, pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        fh.flush()
        yield
    finally:
        fh.close()  # closing releases the flock


@contextmanager
def master_lock(cfg: SiteConfig) -> Iterator[None]:
    # keepalives: a controller cut off from the master ends its side of the lock within a minute
    argv = ssh_argv(cfg, cfg.master, MASTER_COMMAND)
    argv[1:1] = ["-o", "ServerAliveInterval=15", "-o", "ServerAliveCountMax=4"]
    proc = subprocess.Popen(
        argv,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdin is not None
    first = proc.stdout.readline().strip()
    if first != LOCKED:
        _, err = proc.communicate(timeout=30)
        if proc.returncode == 255:
            raise Unreachable(
                f"{cfg.master.name} ({cfg.master.address}): SSH cannot connect to take the run lock: "
                f"{(err.strip().splitlines() or ['(no output)'])[-1]}",
                hint="check the master is up and reachable",
            )
        raise SiteBusy(
            f"{cfg.master.name}: another appliance run holds {MASTER_LOCK} (from another controller or site copy)",
            hint="wait for it to finish; `appliance support-bundle` shows what runs",
        )
    try:
        yield
    finally:
        proc.stdin.close()  # the remote `cat` ends, flock releases the lock
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def site_lock(cfg: SiteConfig, what: str) -> Iterator[None]:
    """Both locks: the controller's first (cheap, local), then the master's."""
    with controller_lock(cfg.site_dir, what), master_lock(cfg):
        yield
