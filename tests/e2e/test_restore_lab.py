"""The restore drill (issue 19) on a lab of its own (master1, worker1), installed from the session's
lab bundle: ConfigMap drill-before, `appliance backup`; then drill-before deleted, drill-after
created, worker1 labelled. `appliance restore --backup <that> --yes` is killed (-9) once etcd is
restored and before the control plane is back, then run again: it finishes that restore (the state on
the master says so; no second data dir). Then drill-before is back, drill-after and the label gone,
every node Ready, the helm releases as before, etcd's manifest points at the new data dir and the old
one is kept (and named). A second `appliance install` changes nothing; a backup taken after the
restore works (etcd_snapshot follows the manifest's data dir). The backup is encrypted (age): each
restore brings the lab's identity (site/backup-identity.txt). Refused in one line, with nothing
changed and nothing left on the master: the backup without an identity, or with another one; with
one byte flipped (its sums); altered with its sums made to match (age's authentication); and one
that decrypts but whose snapshot etcdutl cannot read."""

from __future__ import annotations

import base64
import json
import os
import re
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests._support import agebackup
from tests._support.killed_runs import kill_when_printed
from tests._support.lab_ssh import root_sh
from tests.e2e.conftest import TWO_NODE_LAB

LAB = os.environ.get("APPLIANCE_E2E_RESTORE_LAB", "rst")  # a lab name of one's own on a shared machine

ADMIN = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
STATE = "/var/lib/appliance/restore/state.json"
RESTORED_STEP = "Etcd restore | Point etcd's manifest at the new data dir"
LABEL = "drill.example.com/after"
# etcdctl in etcd's pod (the lab's etcd image carries the official 3.5.1 build), as the API server's peer
ETCDCTL = ("crictl exec $(crictl ps --name '^etcd$' -q) etcdctl --endpoints=https://127.0.0.1:2379 "
           "--cacert=/etc/kubernetes/pki/etcd/ca.crt --cert=/etc/kubernetes/pki/etcd/server.crt "
           "--key=/etc/kubernetes/pki/etcd/server.key")  # fmt: skip


def _ssh(site_dir: Path, command: str, timeout: int = 120) -> subprocess.CompletedProcess[str]:
    return root_sh(site_dir, "master1", command, timeout)


def _ok(site_dir: Path, command: str) -> str:
    res = _ssh(site_dir, command)
    assert res.returncode == 0, f"{command}: {res.stderr}"
    return res.stdout


def _create_configmap(site_dir: Path, name: str) -> None:
    doc = json.dumps({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": "default"},
                      "data": {"drill": name}})  # fmt: skip
    _ok(site_dir, f"echo '{doc}' | {ADMIN} apply -f -")


def _cluster(site_dir: Path) -> dict[str, Any]:
    """What the drill compares: ConfigMaps in default, node labels and Ready, helm releases."""
    cms = json.loads(_ok(site_dir, f"{ADMIN} -n default get configmaps -o json"))["items"]
    nodes = json.loads(_ok(site_dir, f"{ADMIN} get nodes -o json"))["items"]
    releases = json.loads(_ok(site_dir, "helm --kubeconfig /etc/kubernetes/admin.conf list -A -o json"))
    return {
        "configmaps": sorted(c["metadata"]["name"] for c in cms),
        "labels": {n["metadata"]["name"]: n["metadata"].get("labels", {}) for n in nodes},
        "ready": {
            n["metadata"]["name"]: any(
                c["type"] == "Ready" and c["status"] == "True" for c in n["status"]["conditions"]
            )
            for n in nodes
        },
        "releases": sorted((r["namespace"], r["name"], r["revision"], r["chart"]) for r in releases),
    }


def _changed(run) -> int:
    return sum(r["changed"] for r in run.recap.values())


@pytest.fixture(scope="module")
def drill(installed_lab_cm, request, cli, tmp_path_factory) -> Iterator[dict[str, Any]]:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("restores etcd: lab only")
    bundle = request.getfixturevalue("lab_bundle")
    # a lab of its own, from the 2-node lab site as installed (one snapshot, shared with
    # test_upgrade_minor_lab and test_node_remove_unreachable: whichever comes first installs it)
    with installed_lab_cm(LAB, 2, bundle, share=TWO_NODE_LAB) as inst:
        site_dir = inst.site_dir
        site = ["--site", str(site_dir)]
        first = inst.installs[0]
        assert first.rc == 0, first.out[-2000:] + first.err[-3000:]
        _create_configmap(site_dir, "drill-before")
        backup = cli("backup", *site, timeout=600)
        assert backup.rc == 0, backup.out[-2000:] + backup.err[-2000:]
        name = re.search(r"^backup on master1: /var/lib/appliance/backups/(\S+) ", backup.out, re.M).group(1)
        before = _cluster(site_dir)
        _ok(site_dir, f"{ADMIN} -n default delete configmap drill-before")
        _create_configmap(site_dir, "drill-after")
        _ok(site_dir, f"{ADMIN} label node worker1 {LABEL}=yes")
        changed = _cluster(site_dir)
        old_manifest = _ok(site_dir, "cat /etc/kubernetes/manifests/etcd.yaml")
        ident = str(site_dir / "backup-identity.txt")  # the lab's key pair, off the nodes
        base = ["restore", *site, "--backup", name]
        args = [*base, "--identity", ident, "--yes"]
        killed = kill_when_printed(args, RESTORED_STEP)
        # module resumable_state's layout: {"schema": 1, "etcd_restore": {...}}
        interrupted_doc = json.loads(_ssh(site_dir, f"cat {STATE}").stdout or "{}")
        interrupted = interrupted_doc.get("etcd_restore", {})
        restore = cli(*args, timeout=1200)
        after = _cluster(site_dir)
        # what the restored etcd holds, read from it: its version and the drill's ConfigMaps' keys
        etcd_status = json.loads(_ok(site_dir, f"{ETCDCTL} endpoint status -w json"))
        etcd_cms = json.loads(_ok(site_dir, f"{ETCDCTL} get /registry/configmaps/default/ --prefix -w json"))
        manifest = _ok(site_dir, "cat /etc/kubernetes/manifests/etcd.yaml")
        dirs = _ok(site_dir, "ls -d /var/lib/etcd /var/lib/etcd-restore-* 2>/dev/null; true").split()
        state_doc = json.loads(
            _ssh(site_dir, f"cat {STATE}").stdout or "{}"
        )  # none: the restore's output says why
        state = state_doc.get("etcd_restore", {})
        again = cli("install", *site, "--skip-diagnose", timeout=1800)
        backup2 = cli("backup", *site, timeout=600)
        name2 = re.search(r"^backup on master1: /var/lib/appliance/backups/(\S+) ", backup2.out, re.M).group(
            1
        )
        pre_corrupt = _cluster(site_dir)
        work_left = "ls -A /run/appliance-restore /var/lib/appliance/restore/work 2>&1; true"
        # the encrypted backup without the identity, then with another one: refused, nothing changes
        no_identity = cli(*base, "--yes")
        other = tmp_path_factory.mktemp("other") / "other-identity.txt"
        subprocess.run(["age-keygen", "-o", str(other)], check=True, capture_output=True)
        wrong_identity = cli(*base, "--identity", str(other), "--yes")
        wrong_left = _ok(site_dir, work_left)
        post_identity = _cluster(site_dir)
        # one byte of the (first) backup's snapshot flipped: refused before anything stops
        snap = f"/var/lib/appliance/backups/{name}/etcd-snapshot.db.age"
        _ok(site_dir, f"printf 'X' | dd of={snap} bs=1 seek=10 count=1 conv=notrunc 2>/dev/null")
        corrupt = cli(*args)
        post_corrupt = _cluster(site_dir)
        recipient = subprocess.run(
            ["age-keygen", "-y", ident], check=True, capture_output=True, text=True
        ).stdout.strip()
        resum = "find . -type f ! -name SHA256SUMS -printf '%P\\n' | sort | xargs sha256sum > SHA256SUMS"
        # altered after it was encrypted, its sums made to match: age's authentication refuses it
        tampered = "20000101T000001Z"
        _ok(site_dir, f"cd /var/lib/appliance/backups && rm -rf {tampered} && cp -a {name2} {tampered} && "
                      f"cd {tampered} && f=etcd-snapshot.db.age && "
                      "printf 'X' | dd of=$f bs=1 seek=$(( $(stat -c %s $f) - 100 )) count=1 conv=notrunc 2>/dev/null && "
                      + resum)  # fmt: skip
        altered = cli("restore", *site, "--backup", tampered, "--identity", ident, "--yes")
        post_altered = _cluster(site_dir)
        altered_left = _ok(site_dir, work_left)
        # a backup whose sums match and that decrypts, but whose snapshot is no database: etcdutl refuses it
        bogus = "20000101T000000Z"
        _ok(site_dir, f"cd /var/lib/appliance/backups && rm -rf {bogus} && cp -a {name} {bogus} && cd {bogus} && "
                      f"head -c 4096 /dev/urandom | /usr/local/bin/age -r {recipient} -o etcd-snapshot.db.age && "
                      + resum)  # fmt: skip
        unreadable = cli("restore", *site, "--backup", bogus, "--identity", ident, "--yes")
        post_unreadable = _cluster(site_dir)
        manifest_after_corrupt = _ok(site_dir, "cat /etc/kubernetes/manifests/etcd.yaml")
        # the identity went to the master for each run and was removed; no run's log holds it
        key = next(ln for ln in Path(ident).read_text().splitlines() if ln.startswith("AGE-SECRET-KEY-1"))
        key_on_master = _ok(
            site_dir, "grep -rlF AGE-SECRET-KEY-1 /run /var/lib/appliance /etc /root /tmp; true"
        )
        runs = sorted((site_dir / "runs").glob("*-restore"))
        key_in_runs = [
            str(p) for r in runs for p in r.rglob("*") if p.is_file() and key.encode() in p.read_bytes()
        ]
        # a backup taken before backups were encrypted: its snapshot in clear, restored without an
        # identity (the second backup's, decrypted on the controller as an operator would)
        legacy = "20000101T000002Z"
        sealed = subprocess.run(
            ["ssh", "-F", str(site_dir / "ssh_config"), "-o", "BatchMode=yes", "master1",
             f"sudo cat /var/lib/appliance/backups/{name2}/etcd-snapshot.db.age"],
            capture_output=True, check=True, timeout=120,
        ).stdout  # fmt: skip
        opened = agebackup.decrypt(Path(ident), sealed)
        assert opened.returncode == 0, opened.stderr
        clear = opened.stdout
        _ok(site_dir, f"cd /var/lib/appliance/backups && rm -rf {legacy} && mkdir -m 700 {legacy} && "
                      f"cp -p {name2}/kubeadm-cluster-configuration.yaml {name2}/helm-releases.json {legacy}/")  # fmt: skip
        put = subprocess.run(
            ["ssh", "-F", str(site_dir / "ssh_config"), "-o", "BatchMode=yes", "master1",
             "sudo sh -c " + shlex.quote(f"umask 077; cat > /var/lib/appliance/backups/{legacy}/etcd-snapshot.db")],
            input=clear, capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        assert put.returncode == 0, put.stderr
        _ok(site_dir, f"cd /var/lib/appliance/backups/{legacy} && " + resum)
        unencrypted = cli("restore", *site, "--backup", legacy, "--yes", timeout=1200)
        post_unencrypted = _cluster(site_dir)
        for what, run in {
            "restore": restore,
            "unencrypted": unencrypted,
            "no identity": no_identity,
            "wrong identity": wrong_identity,
            "corrupt": corrupt,
            "altered": altered,
            "unreadable": unreadable,
            "again": again,
        }.items():
            print(f"--- appliance {what}: rc={run.rc}\n{run.out}\n--- stderr\n{run.err}")  # the record (-s)
        yield {
            "name": name, "before": before, "changed": changed, "killed": killed, "interrupted": interrupted,
            "restore": restore, "after": after, "old_manifest": old_manifest, "manifest": manifest,
            "dirs": dirs, "state": state, "again": again, "backup2": backup2, "corrupt": corrupt,
            "pre_corrupt": pre_corrupt, "post_corrupt": post_corrupt,
            "manifest_after_corrupt": manifest_after_corrupt, "unreadable": unreadable,
            "post_unreadable": post_unreadable, "no_identity": no_identity, "wrong_identity": wrong_identity,
            "wrong_left": wrong_left, "post_identity": post_identity, "altered": altered,
            "post_altered": post_altered, "altered_left": altered_left, "key_on_master": key_on_master,
            "key_in_runs": key_in_runs, "restore_runs": len(runs), "unencrypted": unencrypted,
            "post_unencrypted": post_unencrypted, "name2": name2,
            "schemas": (interrupted_doc.get("schema"), state_doc.get("schema")),
            "etcd_status": etcd_status, "etcd_cms": etcd_cms,
        }  # fmt: skip


def test_the_drill_changed_the_cluster_after_the_backup(drill):
    assert (
        "drill-before" in drill["before"]["configmaps"] and "drill-after" not in drill["before"]["configmaps"]
    )
    assert (
        "drill-after" in drill["changed"]["configmaps"]
        and "drill-before" not in drill["changed"]["configmaps"]
    )
    assert drill["changed"]["labels"]["worker1"].get(LABEL) == "yes"


def test_a_restore_killed_after_etcd_was_restored_is_finished_not_redone(drill):
    assert drill["killed"], f"the first restore ended before '{RESTORED_STEP}'"
    assert drill["schemas"] == (1, 1)
    mid = drill["interrupted"]
    assert mid["backup"] == drill["name"] and mid["phase"] in ("stopping", "restored"), mid
    restore = drill["restore"]
    assert restore.rc == 0, restore.out[-3000:] + restore.err[-3000:]
    state = drill["state"]
    assert state["phase"] == "done" and state["data_dir"] == mid["data_dir"], (mid, state)
    assert [d for d in drill["dirs"] if d.startswith("/var/lib/etcd-restore-")] == [mid["data_dir"]]
    assert f"an unfinished restore of {drill['name']} is on master1" in restore.out
    assert f"new etcd data dir, {mid['data_dir']}; the live one is kept" in restore.out


def test_the_restore_brought_back_the_backups_state(drill):
    before, after = drill["before"], drill["after"]
    assert "drill-before" in after["configmaps"] and "drill-after" not in after["configmaps"], after
    assert after["configmaps"] == before["configmaps"]
    assert LABEL not in after["labels"]["worker1"]
    assert after["ready"] == {"master1": True, "worker1": True}, after
    assert after["releases"] == before["releases"] and after["releases"], after


def test_etcd_runs_from_the_new_data_dir_and_the_old_one_is_kept(drill):
    state, manifest = drill["state"], drill["manifest"]
    new, old = state["data_dir"], state["old_data_dir"]
    assert old == "/var/lib/etcd" and new.startswith("/var/lib/etcd-restore-")
    assert f"--data-dir={old}\n" in drill["old_manifest"]
    assert (
        f"--data-dir={new}\n" in manifest
        and f"path: {new}\n" in manifest
        and f"mountPath: {new}\n" in manifest
    )
    assert f"{old}\n" not in manifest
    assert "/var/lib/etcd" in drill["dirs"]  # kept
    out = drill["restore"].out
    assert f"the data dir it replaced is kept: master1:{old}" in out
    assert f"etcd's data dir is {new} now" in out
    assert re.search(rf"restored backup {drill['name']} on master1: etcd revision \d+, \d+ keys", out), out


def test_the_restored_etcd_is_a_real_etcd_holding_the_snapshots_revisions(drill):
    """etcd 3.5.1 answers from inside its pod; drill-before's key was last written at or before the
    snapshot's revision (what etcdutl read from it and the restore printed), drill-after's is gone,
    and etcd's revision went on from there."""
    snap_rev = int(re.search(rf"restored backup {drill['name']} on master1: etcd revision (\d+),",
                             drill["restore"].out).group(1))  # fmt: skip
    (status,) = drill["etcd_status"]
    assert status["Status"]["version"] == "3.5.1", status
    assert status["Status"]["header"]["revision"] >= snap_rev and status["Status"]["dbSize"] > 0, status
    keys = {base64.b64decode(kv["key"]).decode(): kv for kv in drill["etcd_cms"].get("kvs", [])}
    assert "/registry/configmaps/default/drill-after" not in keys, sorted(keys)
    before = keys["/registry/configmaps/default/drill-before"]
    assert 0 < before["create_revision"] <= before["mod_revision"] <= snap_rev, (before, snap_rev)
    print(f"etcd {status['Status']['version']}: snapshot revision {snap_rev}, revision now "
          f"{status['Status']['header']['revision']}, db {status['Status']['dbSize']} bytes; drill-before "
          f"created at {before['create_revision']}, last written at {before['mod_revision']}")  # fmt: skip


def test_install_after_the_restore_changes_nothing_and_backups_still_work(drill):
    again = drill["again"]
    assert again.rc == 0, again.out[-2000:] + again.err[-3000:]
    assert _changed(again) == 0, again.recap
    assert drill["backup2"].rc == 0, drill["backup2"].out[-2000:] + drill["backup2"].err[-2000:]


def test_a_corrupted_backup_is_refused_in_one_line_and_nothing_changes(drill):
    run = drill["corrupt"]
    assert run.rc != 0
    lines = [ln for ln in run.err.strip().splitlines() if ln.strip()]
    assert any(
        re.search(
            rf"backup {drill['name']}: sha256 mismatch in etcd-snapshot\.db\.age \(SHA256SUMS on master1\)",
            ln,
        )
        for ln in lines
    ), run.err
    assert "Traceback" not in run.err
    assert drill["post_corrupt"] == drill["pre_corrupt"]
    assert drill["manifest_after_corrupt"] == drill["manifest"]


def test_a_snapshot_etcdutl_cannot_read_is_refused_before_anything_stops(drill):
    run = drill["unreadable"]
    assert run.rc != 0
    assert re.search(
        # etcdutl 3.5.1's own words (bbolt's) for 4 KiB that are no database
        r"backup 20000101T000000Z: etcd-snapshot\.db\.age holds no snapshot etcdutl can read: Error: file size too small",
        run.err,
    ), run.err
    assert "Etcd restore | Stop the control plane" not in run.out
    assert drill["post_unreadable"] == drill["pre_corrupt"]
    assert drill["manifest_after_corrupt"] == drill["manifest"]


def test_an_encrypted_backup_without_its_identity_or_with_another_is_refused_and_nothing_changes(drill):
    none, wrong = drill["no_identity"], drill["wrong_identity"]
    assert none.rc == 1 and "Traceback" not in none.err
    assert (
        f"backup {drill['name']}: its snapshot is encrypted (etcd-snapshot.db.age) and no identity was given; "
        "nothing was changed" in none.err
    ), none.err
    assert "Etcd restore |" not in none.out  # refused before the playbook
    assert wrong.rc != 0 and "Traceback" not in wrong.err
    assert re.search(
        rf"backup {drill['name']}: etcd-snapshot\.db\.age does not decrypt: no identity matched any of the "
        r"recipients \(the identity is not the key the backup was encrypted to\); nothing was changed",
        wrong.err,
    ), wrong.err
    assert "Etcd restore | Stop the control plane" not in wrong.out
    assert drill["post_identity"] == drill["pre_corrupt"]
    assert drill["wrong_left"].count("No such file or directory") == 2, drill[
        "wrong_left"
    ]  # identity removed


def test_an_encrypted_snapshot_altered_after_the_backup_fails_age_authentication_naming_it(drill):
    run = drill["altered"]
    assert run.rc != 0 and "Traceback" not in run.err
    assert re.search(
        r"backup 20000101T000001Z: etcd-snapshot\.db\.age does not decrypt: failed to decrypt and authenticate "
        r"payload chunk \(the file is damaged or was altered: restore another backup\); nothing was changed",
        run.err,
    ), run.err
    assert "Etcd restore | Stop the control plane" not in run.out
    assert drill["post_altered"] == drill["pre_corrupt"]
    # neither the identity nor a partly decrypted snapshot stays on the master
    assert drill["altered_left"].count("No such file or directory") == 2, drill["altered_left"]


def test_the_identity_is_never_left_on_the_master_nor_in_a_runs_artifacts(drill):
    assert drill["key_on_master"].strip() == "", drill["key_on_master"]
    # the killed run, the restore, the wrong identity, the altered file, the unreadable snapshot (the
    # runs refused before any playbook leave no run directory)
    assert drill["restore_runs"] >= 5 and drill["key_in_runs"] == []


def test_a_backup_taken_before_backups_were_encrypted_restores_without_an_identity(drill):
    run = drill["unencrypted"]
    assert run.rc == 0, run.out[-3000:] + run.err[-3000:]
    assert "  1. check its sha256 sums, read its etcd snapshot with etcdutl" in run.out
    assert "Etcd restore | Bring the identity for the decryption" not in run.out
    assert re.search(r"restored backup 20000101T000002Z on master1: etcd revision \d+, \d+ keys", run.out)
    assert drill["post_unencrypted"]["ready"] == {"master1": True, "worker1": True}
    assert drill["post_unencrypted"]["configmaps"] == drill["after"]["configmaps"]  # the second backup's
