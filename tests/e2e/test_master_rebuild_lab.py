"""The master-rebuild drill (issue 32, item 1) on a lab of its own (master1, worker1), installed from
the session's lab bundle: ConfigMap rebuild-before, `appliance backup`, the backup copied off the
master as the operator would; then master1 is lost with its disk (`lab.replace_node`: its rootfs
made again from the base image, new host keys, nothing installed) while worker1 runs on. `appliance
rebuild-master --from COPY --identity FILE`, killed (-9) once kubeadm init ran and then run again
(it finishes its own rebuild), puts the backup's PKI and secrets back, installs master1 with that
CA and restores etcd: every node is Ready, the ConfigMap is back, worker1's pods are the
same pods (same UIDs) and its kubelet credentials were never touched (no reset, no join); the CA
is the one from before. A full `appliance install` afterwards changes nothing. Refused in
one line with nothing changed: a rebuild on a master that runs a cluster."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._support.killed_runs import kill_when_printed
from tests._support.lab_ssh import root_sh
from tests.e2e.conftest import TWO_NODE_LAB

LAB = os.environ.get("APPLIANCE_E2E_REBUILD_LAB", "rbm")  # a lab name of one's own on a shared machine
ADMIN = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
BACKUPS = "/var/lib/appliance/backups"
STATE = "/var/lib/appliance/restore/state.json"
KILLED_AT = "Control plane | Wait for the API server"  # after kubeadm init, in rebuild-master.yml


def _ssh(site_dir: Path, node: str, command: str, timeout: int = 120) -> subprocess.CompletedProcess[bytes]:
    return root_sh(site_dir, node, command, timeout, text=False)


def _ok(site_dir: Path, command: str, node: str = "master1") -> str:
    r = _ssh(site_dir, node, command)
    assert r.returncode == 0, f"{node}: {command}: {r.stderr.decode()[-1000:]}"
    return r.stdout.decode()


def _state(site_dir: Path) -> dict[str, Any]:
    """What the drill compares: ConfigMaps in default, nodes Ready, worker1's pods, helm releases."""
    cms = json.loads(_ok(site_dir, f"{ADMIN} -n default get configmaps -o json"))["items"]
    nodes = json.loads(_ok(site_dir, f"{ADMIN} get nodes -o json"))["items"]
    pods = json.loads(_ok(site_dir, f"{ADMIN} get pods -A --field-selector spec.nodeName=worker1 -o json"))[
        "items"
    ]
    releases = json.loads(_ok(site_dir, "helm --kubeconfig /etc/kubernetes/admin.conf list -A -o json"))
    return {
        "configmaps": sorted(c["metadata"]["name"] for c in cms),
        "ready": {
            n["metadata"]["name"]: any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
            )
            for n in nodes
        },
        "worker1_pods": {
            f"{p['metadata']['namespace']}/{p['metadata']['name']}": p["metadata"]["uid"] for p in pods
        },
        "releases": sorted((r["namespace"], r["name"], r["revision"], r["chart"]) for r in releases),
    }


def _sha(site_dir: Path, node: str, path: str) -> str:
    return _ok(site_dir, f"sha256sum {path}", node).split()[0]


@pytest.fixture(scope="module")
def drill(installed_lab_cm, request, cli, tmp_path_factory) -> Iterator[dict[str, Any]]:
    from appliance_cli import lab

    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("destroys the master: lab only")
    bundle = request.getfixturevalue("lab_bundle")
    with installed_lab_cm(LAB, 2, bundle, share=TWO_NODE_LAB) as inst:
        site_dir = inst.site_dir
        site = ["--site", str(site_dir)]
        assert inst.installs[0].rc == 0, inst.installs[0].err[-3000:]
        _ok(site_dir, f"{ADMIN} -n default create configmap rebuild-before --from-literal=drill=yes")
        backup = cli("backup", *site, timeout=600)
        assert backup.rc == 0, backup.out[-2000:] + backup.err[-2000:]
        name = re.search(rf"^backup on master1: {BACKUPS}/(\S+) ", backup.out, re.M).group(1)
        before = _state(site_dir)
        ca_before = _sha(site_dir, "master1", "/etc/kubernetes/pki/ca.crt")
        kubelet_conf = _sha(site_dir, "worker1", "/etc/kubernetes/kubelet.conf")
        # copied off the master, as `appliance backup` tells the operator to
        off = tmp_path_factory.mktemp("copied-off")
        packed = _ssh(site_dir, "master1", f"tar -C {BACKUPS} -cf - {name}", timeout=300)
        assert packed.returncode == 0, packed.stderr.decode()
        with tarfile.open(fileobj=io.BytesIO(packed.stdout)) as t:
            t.extractall(off, filter="data")
        copy = off / name
        lost = lab.replace_node("master1")
        fresh = _ssh(site_dir, "master1", "ls -A /etc/kubernetes /etc/appliance 2>&1; true").stdout.decode()
        ident = str(site_dir / "backup-identity.txt")
        args = ["rebuild-master", *site, "--from", str(copy), "--identity", ident, "--yes"]
        # killed (-9) once kubeadm init has run: master1 has a control plane, and its own
        killed = kill_when_printed(args, KILLED_AT)
        killed_state = _ssh(site_dir, "master1", f"cat {STATE}").stdout.decode()
        rebuild = cli(*args, timeout=2400)
        assert rebuild.rc == 0, rebuild.out[-4000:] + rebuild.err[-3000:]
        after = _state(site_dir)
        again = cli("install", *site, "--skip-diagnose", timeout=1800)
        refused = cli("rebuild-master", *site, "--from", str(copy), "--identity", ident, "--yes")
        yield {
            "name": name,
            "killed": killed,
            "killed_state": killed_state,
            "before": before,
            "after": after,
            "lost": lost,
            "fresh": fresh,
            "rebuild": rebuild,
            "again": again,
            "refused": refused,
            "ca": (ca_before, _sha(site_dir, "master1", "/etc/kubernetes/pki/ca.crt")),
            "kubelet_conf": (kubelet_conf, _sha(site_dir, "worker1", "/etc/kubernetes/kubelet.conf")),
            "identity_left": _ok(
                site_dir, "ls -A /run/appliance-restore /var/lib/appliance/restore/work 2>&1; true"
            ),
            "after_refused": _state(site_dir),
        }


def test_the_master_was_lost_with_its_disk(drill):
    assert "No such file or directory" in drill["fresh"], drill["fresh"]  # neither dir on the new master
    assert [n.name for n in drill["lost"].nodes] == ["master1", "worker1"]


def test_a_rebuild_killed_after_kubeadm_init_is_finished_by_the_next_run(drill):
    assert drill["killed"], f"the rebuild never printed {KILLED_AT!r}"
    assert json.loads(drill["killed_state"])["rebuild_master"] == {
        "backup": drill["name"],
        "phase": "secrets",
    }
    r = drill["rebuild"]
    print(drill["killed_state"].strip(), *[ln for ln in r.out.splitlines() if "unfinished rebuild" in ln])
    assert f"an unfinished rebuild of master1 from {drill['name']} is there" in r.out, r.out[-3000:]


def test_rebuild_master_brings_the_cluster_back_as_the_backup_has_it(drill):
    r = drill["rebuild"]
    shown = (
        "rebuild",
        "  1. ",
        "  2. ",
        "  3. ",
        "  4. ",
        "RECAP",
        "restored backup",
        "etcd's data dir",
        "rebuilt",
    )
    print("\n".join(ln for ln in r.out.splitlines() if ln.startswith(shown) or " is rebuilt " in ln))
    print(
        {k: drill["after"][k] for k in ("configmaps", "ready")}, len(drill["after"]["worker1_pods"]), "pods"
    )
    assert r.rc == 0, r.out[-3000:] + r.err[-3000:]
    assert f"restored backup {drill['name']} on master1" in r.out
    before, after = drill["before"], drill["after"]
    assert "rebuild-before" in after["configmaps"]
    assert after["ready"] == {"master1": True, "worker1": True}, after["ready"]
    assert after["releases"] == before["releases"]


def test_the_workers_pods_never_left_and_the_worker_was_not_reset(drill):
    before, after = drill["before"]["worker1_pods"], drill["after"]["worker1_pods"]
    assert before and after == before  # the same pods, by UID
    assert drill["kubelet_conf"][0] == drill["kubelet_conf"][1]  # worker1's kubelet credentials untouched
    assert drill["ca"][0] == drill["ca"][1]  # the cluster CA from before, not a new one


def test_the_identity_and_the_secrets_in_clear_are_gone_from_the_master(drill):
    assert "No such file or directory" in drill["identity_left"], drill["identity_left"]
    assert drill["identity_left"].count("No such file or directory") == 2


def test_a_full_install_afterwards_changes_nothing(drill):
    again = drill["again"]
    assert again.rc == 0, again.out[-2000:] + again.err[-3000:]
    print("the install after the rebuild:", again.recap)
    assert again.recap["worker1"]["changed"] == 0, again.recap
    assert again.recap["master1"]["changed"] == 0, again.recap  # the rebuilt master converged too


def test_a_master_that_runs_a_cluster_is_not_rebuilt(drill):
    r, name = drill["refused"], drill["name"]
    assert r.rc == 1 and "Traceback" not in r.err
    assert (
        f"master1 already has a control plane (/etc/kubernetes/admin.conf), rebuilt from backup {name} and "
        "restored: a master is rebuilt only on a fresh machine; nothing was changed" in r.err
    ), r.err
    assert "run `appliance install`" in r.err
    assert "Rebuild |" not in r.out  # refused before any playbook
    assert drill["after_refused"] == drill["after"]  # nothing changed
