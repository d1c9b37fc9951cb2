"""etcd_snapshot on the installed lab's master, read back from the node (testinfra)."""

import json

import yaml

DIR = "/var/lib/appliance/molecule-etcd-snapshots"
MANIFEST = "/etc/kubernetes/manifests/etcd.yaml"


def test_the_snapshot_is_kept_root_only(host):
    d = host.file(DIR)
    assert d.is_directory and d.user == "root" and d.mode == 0o700
    snap = host.file(f"{DIR}/molecule.db")
    assert snap.is_file and snap.user == "root" and snap.size > 0


def test_the_snapshot_reads_back_with_etcdutl(host):
    """etcdutl of the image etcd's static pod runs (its manifest names it: the site's registry; the
    lab's carries the official 3.5.1 build), the snapshot's directory mounted read-only: the way
    etcd_restore reads a snapshot."""
    image = yaml.safe_load(host.file(MANIFEST).content_string)["spec"]["containers"][0]["image"]
    etcdutl = (f"ctr -n k8s.io run --rm --mount type=bind,src={DIR},dst={DIR},options=rbind:ro {image} "
               "molecule-etcd-snapshot-status etcdutl")  # fmt: skip
    status = json.loads(host.check_output(f"{etcdutl} snapshot status {DIR}/molecule.db -w json"))
    assert status["revision"] > 0 and status["totalKey"] > 0, status


def test_nothing_is_left_in_etcds_data_dir(host):
    """The snapshot is saved where the etcd pod can write (its data dir) and then moved out."""
    assert not host.file("/var/lib/etcd/molecule.db").exists
