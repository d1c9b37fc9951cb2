"""What an upgrade driven by Ansible meets in the stand-in: `kubeadm upgrade apply` (version policy,
the target's images pulled first), and the API server's /version after the manifest moved. (The etcd
snapshot is the real etcdctl's in etcd's container: test_standin_etcd.py.)"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests._support.standin_cluster import Cluster, node_images, put
from tests.standin.k8s_standin import kubeadm_ops, util
from tests.standin.k8s_standin.apiserver import version_info
from tests.standin.k8s_standin.entry import main
from tests.standin.k8s_standin.kubelet import image_version

REPO = "registry.k8s.io"
CTR = """#!/bin/sh
# a running containerd 1.6: `images ls -q` lists $IMAGES; pulls fail (an air-gapped node)
case "$*" in
  *" version"*) printf "Client:\\n  Version:  1.6.20\\n\\nServer:\\n  Version:  1.6.20\\n" ;;
  *"images ls -q"*) cat "$IMAGES" 2>/dev/null ;;
  *"images pull"*) echo "ctr: failed to resolve reference: not found"; exit 1 ;;
  *"tasks ls"*) printf "TASK    PID    STATUS\\n" ;;
esac
"""


@pytest.fixture
def node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A fake node tree (STANDIN_ROOT), `ctr` and `systemctl` (every unit active) on PATH."""
    root = tmp_path / "root"
    bindir = tmp_path / "bin"
    bindir.mkdir()
    for name, text in {"ctr": CTR, "systemctl": "#!/bin/sh\nexit 0\n"}.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("IMAGES", str(tmp_path / "images"))
    monkeypatch.setattr(util, "ROOT", str(root))
    return root


def manifest(name: str, version: str) -> str:
    return yaml.safe_dump({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "kube-system"},
                           "spec": {"containers": [{"name": name, "image": f"{REPO}/{name}:{version}",
                                                    "command": [name]}]}})  # fmt: skip


# ---------------------------------------------------------------- kubeadm upgrade apply


@pytest.fixture
def cluster(tmp_path: Path, node: Path) -> Iterator[Cluster]:
    """A cluster at v1.23.16 (kubeadm-config, the control-plane manifests, the kube-proxy addon)."""
    (tmp_path / "cluster").mkdir()
    c = Cluster(tmp_path / "cluster")
    admin = c.admin()
    ccfg = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration", "kubernetesVersion": "v1.23.16",
            "imageRepository": REPO, "etcd": {"local": {"dataDir": "/var/lib/etcd"}}}  # fmt: skip
    admin.call("POST", "/api/v1/namespaces/kube-system/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubeadm-config", "namespace": "kube-system"},
        "data": {"ClusterConfiguration": yaml.safe_dump(ccfg)}})  # fmt: skip
    admin.call("POST", "/api/v1/namespaces/kube-system/configmaps", {
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kubelet-config-1.23", "namespace": "kube-system"},
        "data": {"kubelet": "kind: KubeletConfiguration\napiVersion: kubelet.config.k8s.io/v1beta1\n"}})  # fmt: skip
    tpl = {"metadata": {"labels": {"k8s-app": "kube-proxy"}},
           "spec": {"containers": [{"name": "kube-proxy", "image": f"{REPO}/kube-proxy:v1.23.16"}]}}  # fmt: skip
    admin.call("POST", "/apis/apps/v1/namespaces/kube-system/daemonsets", {
        "apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "kube-proxy", "namespace": "kube-system"},
        "spec": {"selector": {"matchLabels": {"k8s-app": "kube-proxy"}}, "template": tpl}})  # fmt: skip
    for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        put(node, f"/etc/kubernetes/manifests/{n}.yaml", manifest(n, "v1.23.16"))
    put(node, "/etc/kubernetes/admin.conf", c.kubeconfig.read_text())  # kubeadm's default, on this node
    yield c
    c.srv.shutdown()


def apply(c: Cluster, capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    rc = main(["/usr/bin/kubeadm", "upgrade", "apply", *args])
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_apply_refuses_when_the_targets_images_cannot_be_pulled(
    cluster: Cluster, node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_images(tmp_path, "v1.23.16")  # the old version's images only: an air-gapped node cannot pull
    rc, out, err = apply(cluster, capsys, "v1.23.17", "-y")
    assert rc == 1
    assert "[upgrade/prepull] Pulling images required for setting up a Kubernetes cluster" in out
    assert err.startswith("[preflight] Some fatal errors occurred:\n\t[ERROR ImagePull]: failed to pull image "
                          f"{REPO}/kube-apiserver:v1.23.17: output: ")  # fmt: skip
    for n in ("kube-controller-manager", "kube-scheduler", "kube-proxy"):
        assert f"[ERROR ImagePull]: failed to pull image {REPO}/{n}:v1.23.17" in err
    assert "pause:3.6" not in err and "etcd:3.5.6-0" not in err  # those are present
    assert (
        "v1.23.16" in (node / "etc/kubernetes/manifests/kube-apiserver.yaml").read_text()
    )  # nothing changed
    cm = cluster.admin().get("/api/v1/namespaces/kube-system/configmaps/kubeadm-config")
    assert yaml.safe_load(cm["data"]["ClusterConfiguration"])["kubernetesVersion"] == "v1.23.16"
    # --ignore-preflight-errors=ImagePull makes it a warning, as in kubeadm
    rc, out, err = apply(cluster, capsys, "v1.23.17", "-y", "--ignore-preflight-errors=ImagePull")
    assert rc == 0 and "[WARNING ImagePull]" in err, err


def test_apply_with_the_images_present_moves_the_control_plane(
    cluster: Cluster, node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node_images(tmp_path, "v1.23.17")
    rc, out, err = apply(cluster, capsys, "v1.23.17", "-y")
    assert rc == 0, err
    assert 'SUCCESS! Your cluster was upgraded to "v1.23.17"' in out
    for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        doc = yaml.safe_load((node / f"etc/kubernetes/manifests/{n}.yaml").read_text())
        assert doc["spec"]["containers"][0]["image"] == f"{REPO}/{n}:v1.23.17"
    ds = cluster.admin().get("/apis/apps/v1/namespaces/kube-system/daemonsets/kube-proxy")
    assert ds["spec"]["template"]["spec"]["containers"][0]["image"] == f"{REPO}/kube-proxy:v1.23.17"
    # the API server restarted from that manifest reports it
    assert image_version(str(node / "etc/kubernetes/manifests/kube-apiserver.yaml")) == "v1.23.17"


def test_an_api_server_that_does_not_come_back_at_the_target_is_rolled_back(
    cluster: Cluster, node: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch
) -> None:
    """kubeadm waits for the restarted API server (UpgradeManifestTimeout); one still answering at
    the old version puts the old manifest back and fails with kubeadm's words."""
    node_images(tmp_path, "v1.23.17")
    cluster.api.git_version = "v1.23.16"  # the kubelet never restarts it from the new manifest
    monkeypatch.setattr(kubeadm_ops, "UPGRADE_MANIFEST_TIMEOUT", 2.0)
    before = (node / "etc/kubernetes/manifests/kube-apiserver.yaml").read_text()
    rc, out, err = apply(cluster, capsys, "v1.23.17", "-y")
    assert rc == 1
    assert "[upgrade/staticpods] Waiting for the kubelet to restart the component" in out
    assert "[upgrade/apply] FATAL: couldn't upgrade control plane. kubeadm has tried to recover" in err
    assert (node / "etc/kubernetes/manifests/kube-apiserver.yaml").read_text() == before


def test_an_older_kubeadm_refuses_a_higher_target(
    cluster: Cluster, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    node_images(tmp_path, "v1.23.17")
    monkeypatch.setattr(kubeadm_ops, "VERSION", "v1.23.16")  # what a v1.23.16-standin pack has
    rc, _, err = apply(cluster, capsys, "v1.23.17", "-y")
    assert rc == 1
    assert ('Specified version to upgrade to "v1.23.17" is higher than the kubeadm version "v1.23.16". '
            "Upgrade kubeadm first using the tool you used to install kubeadm") in err  # fmt: skip
    assert "Can be bypassed if you pass the --force flag" in err


def test_apiserver_version_follows_the_manifest_image(node: Path) -> None:
    put(node, "/m.yaml", manifest("kube-apiserver", "v1.23.16"))
    assert image_version(str(node / "m.yaml")) == "v1.23.16"
    put(node, "/m.yaml", "not: [a pod")
    assert image_version(str(node / "m.yaml")) == util.VERSION
    assert (
        version_info("v1.23.16")["gitVersion"] == "v1.23.16" and version_info()["gitVersion"] == util.VERSION
    )
