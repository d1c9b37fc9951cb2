"""A node that drops off the network in the middle of an install (its link set down in the lab's
bridge namespace, as a pulled cable): the run stops with one line naming that node, its address
and that it is unreachable; once the link is back, `install --limit NODE` converges that node and
a full install after it changes nothing, so nothing was lost on the other nodes."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from appliance_cli.core.sitelock import MASTER_LOCK

pytestmark = pytest.mark.usefixtures("installs")


def _link(layout, index: int, state: str) -> None:
    subprocess.run(["ip", "-n", layout.netns, "link", "set", f"v-node{index}", state], check=True)


def test_a_node_lost_mid_run_is_named_then_a_limited_retry_converges(site, hosts, cli):
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("pulls a cable: the lab only")
    from appliance_cli.lab.layout import LabLayout

    layout = LabLayout.default()
    index, node = next((i, n) for i, n in enumerate(site.nodes, start=1) if "master" not in n.roles)
    run = subprocess.Popen(
        [sys.executable, "-m", "appliance_cli", "install", "--site", str(site.site_dir), "--skip-diagnose"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=os.environ | {"CI": "1"},
    )
    try:
        end = time.monotonic() + 120
        while hosts[site.master.name].run(f"flock -n {MASTER_LOCK} true").rc == 0:  # not started yet
            assert time.monotonic() < end and run.poll() is None, "the install never started"
            time.sleep(0.5)
        time.sleep(10)  # into the playbook
        _link(layout, index, "down")
        _, err = run.communicate(timeout=900)
    finally:
        _link(layout, index, "up")
    assert run.returncode == 5, err[-2000:]
    errors = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and f"error: {node.name} ({node.address}) unreachable:" in errors[0], err[-2000:]
    retry = cli("install", "--site", str(site.site_dir), "--limit", node.name)
    assert retry.rc == 0, retry.err[-2000:]
    full = cli("install", "--site", str(site.site_dir), "--skip-diagnose")
    assert full.rc == 0, full.err[-2000:]
    changed = {h: r["changed"] for h, r in full.recap.items() if r["changed"]}
    assert changed == {}, f"a full install after the retry still changed: {changed}"
