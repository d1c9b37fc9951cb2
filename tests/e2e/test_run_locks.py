"""One run at a time per site (appliance_cli/core/sitelock.py), on the installed lab: while an
install runs, a second one from the same site directory is refused by the controller's lock, and
one from another copy of the site (a second laptop) by the master's; a run killed with -9 leaves
no lock behind, and the next install converges."""

from __future__ import annotations

import os
import shutil
import signal
import time

import pytest

from appliance_cli.core.sitelock import MASTER_LOCK
from tests._support.cli_proc import start_full_install

pytestmark = pytest.mark.usefixtures("installs")


def _master_lock_held(site, hosts) -> bool:
    return hosts[site.master.name].run("flock -n %s true", MASTER_LOCK).rc != 0


def _wait_for(predicate, timeout: float = 120) -> None:
    end = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < end, "timed out"
        time.sleep(0.5)


def test_a_second_run_is_refused_by_either_lock(site, hosts, cli, tmp_path):
    other = tmp_path / "site-copy"  # the same site from another controller
    shutil.copytree(site.site_dir, other, ignore=shutil.ignore_patterns("runs", ".appliance-run.lock"))
    first = start_full_install(site.site_dir, own_group=True)
    try:
        _wait_for(lambda: _master_lock_held(site, hosts))
        same = cli("install", "--site", str(site.site_dir), "--skip-diagnose")
        assert same.rc == 9, same.err
        assert f"{site.site_dir}: another run holds this site (`appliance install`, pid" in same.err
        copy = cli("install", "--site", str(other), "--skip-diagnose")
        assert copy.rc == 9, copy.err
        assert f"{site.master.name}: another appliance run holds {MASTER_LOCK}" in copy.err
    finally:
        _out, err = first.communicate(timeout=1200)
    assert first.returncode == 0, err[-2000:]
    assert not _master_lock_held(site, hosts)


def test_a_killed_run_leaves_no_lock_and_the_next_converges(site, hosts, cli):
    run = start_full_install(site.site_dir, own_group=True)
    _wait_for(lambda: _master_lock_held(site, hosts))
    time.sleep(5)  # well into the playbook
    os.killpg(run.pid, signal.SIGKILL)
    run.wait(timeout=30)
    _wait_for(lambda: not _master_lock_held(site, hosts), timeout=120)  # the ssh session went with it
    again = cli("install", "--site", str(site.site_dir), "--skip-diagnose")
    assert again.rc == 0, again.err[-2000:]
    assert all(r["failed"] == 0 and r["unreachable"] == 0 for r in again.recap.values())
