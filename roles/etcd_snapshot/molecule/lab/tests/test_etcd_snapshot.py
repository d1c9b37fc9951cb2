"""etcd_snapshot on the installed lab's master, read back from the node (testinfra)."""

import json

DIR = "/var/lib/appliance/molecule-etcd-snapshots"
# etcdutl of the etcd image the static pod runs (the lab's carries the official 3.5.1 build), with
# the snapshot's directory mounted read-only: the way etcd_restore reads a snapshot
ETCDUTL = (
    f"ctr -n k8s.io run --rm --mount type=bind,src={DIR},dst={DIR},options=rbind:ro "
    "registry.k8s.io/etcd:3.5.6-0 molecule-etcd-snapshot-status etcdutl"
)


def test_the_snapshot_is_kept_root_only(host):
    d = host.file(DIR)
    assert d.is_directory and d.user == "root" and d.mode == 0o700
    snap = host.file(f"{DIR}/molecule.db")
    assert snap.is_file and snap.user == "root" and snap.size > 0


def test_the_snapshot_reads_back_with_etcdutl(host):
    status = json.loads(host.check_output(f"{ETCDUTL} snapshot status {DIR}/molecule.db -w json"))
    assert status["revision"] > 0 and status["totalKey"] > 0, status


def test_nothing_is_left_in_etcds_data_dir(host):
    """The snapshot is saved where the etcd pod can write (its data dir) and then moved out."""
    assert not host.file("/var/lib/etcd/molecule.db").exists
