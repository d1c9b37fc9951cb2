"""`appliance node add|remove` on a lab of its own: the 2-node lab site as installed (master1,
worker1: restored from its snapshot), grown by a fresh third container; worker2 is then written
into the site config by hand (its host key not recorded yet) and `node add worker2` joins it (Ready, labelled), after which a full install
changes nothing. `node remove worker2 --yes` then drains and deletes it, resets kubeadm on it and
marks its entry `removed: true`; the install that follows leaves it out and changes nothing."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SITE_FILE, load_site
from tests._support.lab_ssh import root_sh

LAB = os.environ.get("APPLIANCE_E2E_NODE_LAB", "nar")  # a lab name of one's own on a shared machine
ADMIN = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
NEW = "worker2"


def _ssh(site_dir: Path, node: str, command: str) -> subprocess.CompletedProcess[str]:
    return root_sh(site_dir, node, command)


def _nodes(site_dir: Path) -> dict[str, dict[str, Any]]:
    res = _ssh(site_dir, "master1", f"{ADMIN} get nodes -o json")
    assert res.returncode == 0, res.stderr
    return {n["metadata"]["name"]: n for n in json.loads(res.stdout)["items"]}


def _hosts_block(site_dir: Path, node: str) -> str:
    """The appliance's block of the node's /etc/hosts (the lab writes lines of its own above it)."""
    text = _ssh(site_dir, node, "cat /etc/hosts").stdout
    return text.split("# BEGIN appliance nodes", 1)[1].split("# END appliance nodes", 1)[0]


def _ready(node: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"])


def _changed(run) -> int:
    return sum(r["changed"] for r in run.recap.values())


def _edit_site(site_dir: Path, fn) -> None:
    path = site_dir / SITE_FILE
    data = yaml.safe_load(path.read_text())
    fn(data)
    path.write_text(yaml.safe_dump(data, sort_keys=False))


@pytest.fixture(scope="module")
def added(installed_lab_cm, request, cli) -> Iterator[dict[str, Any]]:
    """The 2-node lab site as installed (its snapshot), a third node beside it, fresh from the base
    image; worker2 then written into the site config and `node add`ed, then a full install."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("rearranges the lab's nodes: lab only")
    from appliance_cli import lab
    from tests.e2e.conftest import TWO_NODE_LAB, wait_ready

    bundle = request.getfixturevalue("lab_bundle")
    with installed_lab_cm(LAB, 2, bundle, share=TWO_NODE_LAB) as inst:
        site_dir = inst.site_dir
        first = inst.installs[0]
        assert first.rc == 0, first.err[-3000:] + first.out[-3000:]
        assert NEW not in first.recap
        # the lab grown to three: the installed two keep their root filesystems, node3 is new;
        # `lab up` writes the 3-node lab site, whose worker2 entry is what the operator adds
        installed = (site_dir / SITE_FILE).read_text()
        lab.down()
        lab.up(nodes=3, bundle=bundle.path, bundle_key=bundle.public_key)
        entry = next(
            n for n in yaml.safe_load((site_dir / SITE_FILE).read_text())["nodes"] if n["name"] == NEW
        )
        (site_dir / SITE_FILE).write_text(installed)
        wait_ready(inst.layout)
        known = site_dir / "known_hosts"  # its host key not recorded yet
        known.write_text(
            "".join(ln for ln in known.read_text().splitlines(True) if not ln.startswith(f"{NEW},"))
        )
        _edit_site(site_dir, lambda d: d["nodes"].append(entry))  # what the operator writes
        add = cli("node", "add", "--site", str(site_dir), NEW, "--yes", timeout=1800)
        again = cli("install", "--site", str(site_dir), "--skip-diagnose")
        yield {"site_dir": site_dir, "entry": entry, "add": add, "again": again}


@pytest.fixture(scope="module")
def removed(added, cli) -> dict[str, Any]:
    site_dir = added["site_dir"]
    remove = cli("node", "remove", "--site", str(site_dir), NEW, "--yes", timeout=1200)
    after = cli("install", "--site", str(site_dir), "--skip-diagnose")
    return {"remove": remove, "after": after}


def test_node_add_records_the_key_joins_and_labels_the_node(added):
    add, site_dir = added["add"], added["site_dir"]
    assert add.rc == 0, add.err[-3000:] + add.out[-3000:]
    assert f"recorded {NEW} in " in add.out
    assert (site_dir / "known_hosts").read_text().count(f"{NEW},") == 1
    assert f"{NEW}: joined, labelled from the site config, Ready" in add.out
    assert f"run.ai/type={added['entry']['hardware_class']}" in add.out
    node = _nodes(site_dir)[NEW]
    assert _ready(node)
    assert node["metadata"]["labels"].get("node-role.kubernetes.io/runai-gpu-worker") == "true"
    for other in ("master1", "worker1"):  # the other nodes learnt its name
        assert f"{added['entry']['address']} {NEW}\n" in _hosts_block(site_dir, other)


def test_a_full_install_after_node_add_changes_nothing(added):
    again = added["again"]
    assert again.rc == 0, again.err[-3000:] + again.out[-3000:]
    assert set(again.recap) >= {"master1", "worker1", NEW}
    assert _changed(again) == 0, {h: r["changed"] for h, r in again.recap.items()}


def test_node_add_refuses_a_member_and_the_master(added, cli):
    site = str(added["site_dir"])
    r = cli("node", "add", "--site", site, NEW, "--yes")
    assert r.rc == 2 and f"{NEW} is already a member of the cluster" in r.err and "node rejoin" in r.err
    r = cli("node", "add", "--site", site, "master1", "--yes")
    assert r.rc == 2 and "master1 is the master" in r.err


def test_node_remove_refuses_the_master_and_unknown_nodes(added, cli):
    site = str(added["site_dir"])
    r = cli("node", "remove", "--site", site, "master1", "--yes")
    assert r.rc == 2 and "master1 is the last control-plane node: removing it" in r.err
    r = cli("node", "remove", "--site", site, "nosuchnode", "--yes")
    assert r.rc == 2 and "node 'nosuchnode' is not in the site config" in r.err


def test_node_remove_drains_deletes_resets_and_marks_the_entry(added, removed, cli):
    remove, site_dir = removed["remove"], added["site_dir"]
    assert remove.rc == 0, remove.err[-3000:] + remove.out[-3000:]
    assert f"{NEW}: kubeadm reset done" in remove.out
    assert NEW not in _nodes(site_dir)
    assert _ssh(site_dir, NEW, "test ! -e /etc/kubernetes/kubelet.conf").returncode == 0
    cfg = load_site(site_dir)
    assert [n.name for n in cfg.removed_nodes] == [NEW] and NEW not in [n.name for n in cfg.nodes]
    for other in ("master1", "worker1"):
        assert NEW not in _hosts_block(site_dir, other)
    validate = cli("config", "validate", str(site_dir))
    assert validate.rc == 0 and f"removed (left out of every run): {NEW}" in validate.out


def test_the_install_after_node_remove_leaves_it_out_and_changes_nothing(removed):
    after = removed["after"]
    assert after.rc == 0, after.err[-3000:] + after.out[-3000:]
    assert NEW not in after.recap and "master1" in after.recap
    assert _changed(after) == 0, {h: r["changed"] for h, r in after.recap.items()}
