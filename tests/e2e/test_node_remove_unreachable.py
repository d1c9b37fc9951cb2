"""`appliance node remove NODE` when NODE is cut off (its link set down in the lab's bridge
namespace, as a pulled cable), on a two-node lab of its own, from the 2-node lab's installed
snapshot: a pod is placed on worker1, worker1's link goes down and the cluster sees it Unknown.
`node remove worker1 --yes --force` drains it (its evicted pod stays Terminating, as no kubelet confirms it: the drain
must not wait for it) and deletes it from the master's side, marks its entry `removed: true`,
says on one line that the node itself was not reset and what to do when it is back, and exits 0
(an unreachable node is named and skipped). kubectl no longer lists it nor its pod; the node
still holds its kubelet credentials; a re-run is refused without changing anything."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SITE_FILE, load_site
from tests._support.upgrade_lab import ADMIN, ssh

LAB = os.environ.get("APPLIANCE_E2E_UNREACHABLE_LAB", "nru")  # a lab name of one's own on a shared machine
GONE, INDEX = "worker1", 2  # lab node 2; its veth in the bridge namespace is v-node2
POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "left-behind", "namespace": "default"},
    "spec": {"nodeName": GONE, "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.6"}]},
}


def _kubectl_json(site_dir: Path, args: str) -> dict[str, Any]:
    res = ssh(site_dir, "master1", f"{ADMIN} {args} -o json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


def _ready(site_dir: Path, node: str) -> str:
    doc = _kubectl_json(site_dir, f"get node {node}")
    return next(c["status"] for c in doc["status"]["conditions"] if c["type"] == "Ready")


def _link(netns: str, state: str) -> None:
    subprocess.run(["ip", "-n", netns, "link", "set", f"v-node{INDEX}", state], check=True)


@pytest.fixture(scope="module")
def cut_off(installed_lab_cm, request, cli) -> Iterator[dict[str, Any]]:
    """The 2-node lab site as installed, a pod put on worker1, the projects' GPU quotas set to 0
    in the site config (as the operator does first: without worker1's GPUs the quotas would not
    fit), then worker1 cut off until the module ends."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("pulls a cable: lab only")
    from tests.e2e.conftest import TWO_NODE_LAB

    with installed_lab_cm(LAB, 2, request.getfixturevalue("lab_bundle"), share=TWO_NODE_LAB) as inst:
        layout, site_dir = inst.layout, inst.site_dir
        path = site_dir / SITE_FILE
        first = inst.installs[0]
        assert first.rc == 0, first.err[-3000:] + first.out[-3000:]
        data = yaml.safe_load(path.read_text())
        for p in data["scheduler"]["projects"]:
            p["gpus"] = 0
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        put = ssh(site_dir, "master1", f"{ADMIN} apply -f -", stdin=json.dumps(POD))
        assert put.returncode == 0, put.stderr
        _link(layout.netns, "down")
        try:
            end = time.monotonic() + 180
            while _ready(site_dir, GONE) != "Unknown":  # the node lifecycle controller's grace
                assert time.monotonic() < end, f"{GONE} still not Unknown 180s after its link went down"
                time.sleep(5)
            before = path.read_text()
            started = time.monotonic()
            remove = cli("node", "remove", "--site", str(site_dir), GONE, "--yes", "--force", timeout=1200)
            took = time.monotonic() - started
            after_remove = path.read_text()
            again = cli("node", "remove", "--site", str(site_dir), GONE, "--yes", "--force")
        finally:
            _link(layout.netns, "up")
        kept = ssh(site_dir, GONE, "test -f /etc/kubernetes/kubelet.conf")  # back: not reset
        yield {
            "site_dir": site_dir, "before": before, "remove": remove, "took": took,
            "after_remove": after_remove, "again": again, "kept": kept,
        }  # fmt: skip


def test_the_cut_off_node_is_removed_from_the_master_side_and_said_not_reset(cut_off):
    remove = cut_off["remove"]
    assert remove.rc == 0, remove.err[-3000:] + remove.out[-3000:]
    warnings = [ln for ln in remove.err.splitlines() if ln.startswith("warning:")]
    assert any(f"{GONE} (" in ln and "cannot be reset now" in ln for ln in warnings), remove.err[-3000:]
    assert any("not reset; when it is back, run `kubeadm reset -f` on it" in ln for ln in warnings), (
        remove.err[-3000:]
    )
    assert f"{GONE}: drained and deleted from the cluster" in remove.out
    assert f"{GONE}: kubeadm reset done" not in remove.out
    assert "the node itself was NOT reset" in remove.out.splitlines()[-1], remove.out[-2000:]
    print("\n".join([*warnings, remove.out.splitlines()[-1], f"took {cut_off['took']:.0f}s"]))  # pytest -rP
    # the evicted pod stays Terminating (no kubelet confirms it): the drain must not wait its 10m out
    assert cut_off["took"] < 540, cut_off["took"]


def test_kubectl_no_longer_lists_the_node_nor_its_pod(cut_off):
    site_dir = cut_off["site_dir"]
    names = [n["metadata"]["name"] for n in _kubectl_json(site_dir, "get nodes")["items"]]
    assert GONE not in names and "master1" in names
    pods = _kubectl_json(site_dir, "get pods -A")["items"]
    assert not [p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == GONE]


def test_the_entry_is_marked_removed_and_the_node_keeps_its_credentials(cut_off):
    site_dir = cut_off["site_dir"]
    cfg = load_site(site_dir)
    assert [n.name for n in cfg.removed_nodes] == [GONE] and GONE not in [n.name for n in cfg.nodes]
    diff = [ln for ln in cut_off["after_remove"].splitlines() if ln not in cut_off["before"].splitlines()]
    assert [ln.strip() for ln in diff] == ["removed: true"], diff
    assert cut_off["kept"].returncode == 0, cut_off["kept"].stderr  # its kubelet.conf is still there


def test_a_re_run_is_refused_and_changes_nothing(cut_off):
    again, site_dir = cut_off["again"], cut_off["site_dir"]
    assert again.rc == 2, again.err[-2000:]
    assert f"node '{GONE}' is marked removed in the site config" in again.err
    print(again.err.strip())  # pytest -rP
    assert (site_dir / SITE_FILE).read_text() == cut_off["after_remove"]
    assert GONE not in [n["metadata"]["name"] for n in _kubectl_json(site_dir, "get nodes")["items"]]
