"""etcd_snapshot on the installed lab's master, read back from the node (testinfra)."""

import json

DIR = "/var/lib/appliance/molecule-etcd-snapshots"
ETCDCTL = (
    "etcdctl --endpoints=https://127.0.0.1:2379 --cacert=/etc/kubernetes/pki/etcd/ca.crt "
    "--cert=/etc/kubernetes/pki/etcd/server.crt --key=/etc/kubernetes/pki/etcd/server.key"
)


def test_the_snapshot_is_kept_root_only(host):
    d = host.file(DIR)
    assert d.is_directory and d.user == "root" and d.mode == 0o700
    snap = host.file(f"{DIR}/molecule.db")
    assert snap.is_file and snap.user == "root" and snap.size > 0


def test_the_snapshot_reads_back_with_etcdctl(host):
    etcd = host.check_output("crictl ps --name '^etcd$' -q").strip()
    status = json.loads(
        host.check_output(f"crictl exec {etcd} {ETCDCTL} snapshot status {DIR}/molecule.db -w json")
    )
    assert status["revision"] > 0 and status["totalKey"] > 0, status


def test_nothing_is_left_in_etcds_data_dir(host):
    """The snapshot is saved where the etcd pod can write (its data dir) and then moved out."""
    assert not host.file("/var/lib/etcd/molecule.db").exists
