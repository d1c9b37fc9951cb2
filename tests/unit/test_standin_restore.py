"""The stand-in's etcd for `appliance restore`: the API server's store lives where the etcd
manifest's data dir says (member/snap/db), etcdutl restores a snapshot into a new dir and refuses
as etcdutl does, and a manifest pointed at that dir brings the snapshot's state back."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.standin.k8s_standin import kubeadm_ops, util
from tests.standin.k8s_standin.apiserver import Store
from tests.standin.k8s_standin.entry import main
from tests.standin.k8s_standin.files import store_path


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setattr(util, "ROOT", str(root))
    return root


def etcd_manifest(node: Path, data_dir: str, host_path: str | None = None) -> None:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "etcd", "namespace": "kube-system"},
           "spec": {"containers": [{"name": "etcd", "image": "registry.k8s.io/etcd:3.5.6-0",
                                    "command": ["etcd", "--name=m1", f"--data-dir={data_dir}"],
                                    "volumeMounts": [{"mountPath": data_dir, "name": "etcd-data"}]}],
                    "volumes": [{"name": "etcd-data", "hostPath": {"path": host_path or data_dir}}]}}  # fmt: skip
    p = node / "etc/kubernetes/manifests/etcd.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(pod))


def etcdutl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["/usr/local/bin/etcdutl", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


RESTORE = [
    "--name=m1",
    "--initial-cluster=m1=https://10.0.0.1:2380",
    "--initial-advertise-peer-urls=https://10.0.0.1:2380",
]


def test_the_store_is_where_the_etcd_manifest_says(node: Path) -> None:
    assert store_path() == f"{node}/var/lib/standin-apiserver/state.json"  # no etcd manifest
    etcd_manifest(node, "/var/lib/etcd")
    assert store_path() == f"{node}/var/lib/etcd/member/snap/db"
    etcd_manifest(node, "/var/lib/etcd", host_path="/var/lib/etcd-other")  # the pod sees the host's dir
    assert store_path() == f"{node}/var/lib/etcd-other/member/snap/db"


def test_restore_into_a_new_dir_brings_the_old_state_back(
    node: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    etcd_manifest(node, "/var/lib/etcd")
    live = Store(str(Path(store_path()).parent), "db")
    live.put(
        Store.key("", "configmaps", "default", "before"),
        {"kind": "ConfigMap", "metadata": {"name": "before"}},
    )
    snap = node / "backup/etcd-snapshot.db"
    snap.parent.mkdir()
    snap.write_bytes(Path(store_path()).read_bytes())
    live.delete(Store.key("", "configmaps", "default", "before"))
    rc, out, err = etcdutl(
        capsys, "snapshot", "restore", "/backup/etcd-snapshot.db", "--data-dir=/var/lib/etcd-r1", *RESTORE
    )
    assert rc == 0, err
    assert [json.loads(line)["msg"] for line in err.splitlines()] == [
        "restoring snapshot",
        "restored snapshot",
    ]
    assert (node / "var/lib/etcd-r1/member/snap/db").read_bytes() == snap.read_bytes()
    assert (node / "var/lib/etcd-r1/member/wal").is_dir()
    assert (node / "var/lib/etcd-r1").stat().st_mode & 0o777 == 0o700
    assert (
        Store(str(Path(store_path()).parent), "db").items("", "configmaps") == []
    )  # the live one: untouched
    etcd_manifest(node, "/var/lib/etcd-r1")
    back = Store(str(Path(store_path()).parent), "db").items("", "configmaps")
    assert [o["metadata"]["name"] for o in back] == ["before"]
    rc, out, err = etcdutl(capsys, "snapshot", "status", "/backup/etcd-snapshot.db", "-w", "json")
    assert rc == 0 and json.loads(out)["totalKey"] == 5 and "Deprecated" not in err  # 4 namespaces + 1


def test_restore_refuses_as_etcdutl_does(node: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (node / "snap.db").write_text(json.dumps({"resourceVersion": 3, "objects": {}}))
    (node / "bad.db").write_bytes(b"\x00not a database")
    (node / "var/lib/etcd/member").mkdir(parents=True)
    cases = [
        (["/nope.db", "--data-dir=/d1"], "Error: open /nope.db: no such file or directory"),
        (["/bad.db", "--data-dir=/d1"], "Error: invalid database"),
        (
            ["/snap.db", "--data-dir=/var/lib/etcd"],
            'Error: data-dir "/var/lib/etcd" not empty or could not be read',
        ),
    ]
    for args, want in cases:
        rc, _, err = etcdutl(capsys, "snapshot", "restore", *args, *RESTORE)
        assert (rc, err.strip().splitlines()[-1]) == (1, want), args
        assert not (node / "d1").exists()
    rc, _, err = etcdutl(capsys, "snapshot", "restore", "/snap.db", "--data-dir=/d1", "--name=m2",
                         "--initial-cluster=m1=https://10.0.0.1:2380")  # fmt: skip
    assert (rc, err.strip()) == (
        1,
        'Error: couldn\'t find local name "m2" in the initial cluster configuration',
    )
    rc, _, err = etcdutl(capsys, "snapshot", "status", "/bad.db")
    assert (rc, err.strip()) == (1, "Error: invalid database")


def test_reset_clears_the_data_dir_etcds_manifest_names(
    node: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """1.23's reset reads etcd's data dir from its manifest: after a restore, the restored dir."""
    monkeypatch.setattr(kubeadm_ops, "systemctl", lambda *a: (0, ""))
    monkeypatch.setattr(kubeadm_ops, "root_check", lambda ignore: None)
    etcd_manifest(node, "/var/lib/etcd-restore-1")
    for d in ("var/lib/etcd-restore-1/member/snap", "var/lib/etcd/member/snap"):
        (node / d).mkdir(parents=True)
        (node / d / "db").write_text("{}")
    assert main(["/usr/bin/kubeadm", "reset", "-f"]) == 0
    out = capsys.readouterr().out
    assert "Deleting contents of stateful directories: [/var/lib/etcd-restore-1 /var/lib/kubelet" in out
    assert list((node / "var/lib/etcd-restore-1").iterdir()) == []
    assert (node / "var/lib/etcd/member/snap/db").exists()  # the replaced dir is the operator's to remove
