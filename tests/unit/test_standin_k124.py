"""The stand-in packed at v1.24.17 (what a bundle entry `version: v1.24.17-standin` gets: the
package with a generated `_build.py`, appliance_cli/bundle/zipapp.py) against what a real 1.24
kubeadm and kubelet do differently from 1.23: the upgrade version policy, the images kubeadm 1.24
pulls, the unversioned kubelet ConfigMap, the control-plane label/taint migration on `upgrade
apply`, and the kubelet that lost dockershim and its flags."""

from __future__ import annotations

import importlib
import os
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import yaml

from tests._support.standin_cluster import Cluster, node_images, put
from tests.standin.k8s_standin import kubelet as kubelet123
from tests.standin.k8s_standin import util as util123

SOURCE = Path(__file__).resolve().parents[1] / "standin" / "k8s_standin"
REPO = "registry.k8s.io"
CTR = """#!/bin/sh
case "$*" in
  *" version"*) printf "Client:\\n  Version:  1.6.20\\n\\nServer:\\n  Version:  1.6.20\\n" ;;
  *"images ls -q"*) cat "$IMAGES" 2>/dev/null ;;
  *"images pull"*) echo "ctr: failed to resolve reference: not found"; exit 1 ;;
esac
"""
MASTER, CP = "node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane"


@pytest.fixture(scope="module")
def v124(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, ModuleType]]:
    """The package as packed for v1.24.17, imported under a name of its own."""
    top = tmp_path_factory.mktemp("v124")
    pkg = top / "k8s_standin_v124"
    shutil.copytree(SOURCE, pkg, ignore=shutil.ignore_patterns("__pycache__", "_build.py"))
    (pkg / "_build.py").write_text('KUBERNETES_VERSION = "v1.24.17"\n')
    sys.path.insert(0, str(top))
    try:
        yield {m: importlib.import_module(f"k8s_standin_v124.{m}") for m in
               ("util", "entry", "config", "files", "kubeadm_ops", "kubelet", "apiserver")}  # fmt: skip
    finally:
        sys.path.remove(str(top))
        for name in [n for n in sys.modules if n.startswith("k8s_standin_v124")]:
            del sys.modules[name]


def run(mods: dict[str, ModuleType], capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    rc = mods["entry"].main(list(argv))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def test_it_reports_1_24_and_kubeadm_1_24s_constants(v124, capsys) -> None:
    u = v124["util"]
    assert (u.VERSION, u.PAUSE_VERSION, u.ETCD_VERSION, u.COREDNS_VERSION) == (
        "v1.24.17",
        "3.7",
        "3.5.6-0",
        "v1.8.6",
    )
    assert u.MIN_CONTROL_PLANE == (1, 23, 0) and u.DOCKERSHIM_REMOVED
    assert (util123.PAUSE_VERSION, util123.MIN_CONTROL_PLANE, util123.DOCKERSHIM_REMOVED) == (
        "3.6",
        (1, 22, 0),
        False,
    )
    assert run(v124, capsys, "/usr/bin/kubeadm", "version", "-o", "short")[1].strip() == "v1.24.17"
    assert run(v124, capsys, "/usr/bin/kubelet", "--version")[1].strip() == "Kubernetes v1.24.17"
    rc, out, _ = run(
        v124, capsys, "/usr/bin/kubeadm", "config", "images", "list", "--kubernetes-version", "v1.24.17"
    )
    assert rc == 0
    assert out.split() == [f"{REPO}/{n}:v1.24.17" for n in
                           ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")] + [
        f"{REPO}/pause:3.7", f"{REPO}/etcd:3.5.6-0", f"{REPO}/coredns/coredns:v1.8.6"]  # fmt: skip


def test_kubeadm_1_24s_version_policy(v124) -> None:
    policy, Fail = v124["kubeadm_ops"].version_policy, v124["util"].Fail
    assert policy("v1.23.17", "v1.24.17", force=False) == []
    with pytest.raises(Fail, match="kubeadm can upgrade only 1 minor version at a time"):
        policy("v1.22.17", "v1.24.17", force=True)  # from 1.23.x only
    with pytest.raises(
        Fail, match=r"at least one minor release higher than the kubeadm minor release \(25 > 24\)"
    ):
        policy("v1.24.17", "v1.25.0", force=True)
    with pytest.raises(Fail, match=r'is equal to or lower than the minimum supported version "v1\.23\.17"'):
        policy("v1.23.17", "v1.23.0", force=True)
    # kubeadm 1.24 upgrading to a 1.23 patch: the binary must be the target's minor
    with pytest.raises(Fail) as e:
        policy("v1.23.16", "v1.23.17", force=False)
    assert (
        "Kubeadm version v1.24.17 can only be used to upgrade to Kubernetes version 1.24" in e.value.message
    )
    assert "Can be bypassed if you pass the --force flag" in e.value.message


@pytest.fixture
def cluster(v124, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """A v1.23.17 cluster as kubeadm 1.23 made it (legacy kubelet ConfigMap, both master marks on
    master1; worker1 without), this node's tree under STANDIN_ROOT, `ctr` with $IMAGES present."""
    root, bindir = tmp_path / "root", tmp_path / "bin"
    bindir.mkdir()
    for name, text in {"ctr": CTR, "systemctl": "#!/bin/sh\nexit 0\n"}.items():
        (bindir / name).write_text(text)
        (bindir / name).chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}:{os.environ['PATH']}")
    monkeypatch.setenv("IMAGES", str(tmp_path / "images"))
    monkeypatch.setattr(v124["util"], "ROOT", str(root))
    (tmp_path / "cluster").mkdir()
    c = Cluster(tmp_path / "cluster")
    admin = c.admin()
    ccfg = {"apiVersion": "kubeadm.k8s.io/v1beta3", "kind": "ClusterConfiguration", "kubernetesVersion": "v1.23.17",
            "imageRepository": REPO, "etcd": {"local": {"dataDir": "/var/lib/etcd"}}}  # fmt: skip
    for name, key, text in (("kubeadm-config", "ClusterConfiguration", yaml.safe_dump(ccfg)),
                            ("kubelet-config-1.23", "kubelet", "kind: KubeletConfiguration\ncgroupDriver: systemd\n")):  # fmt: skip
        admin.call("POST", "/api/v1/namespaces/kube-system/configmaps", {"apiVersion": "v1", "kind": "ConfigMap",
                   "metadata": {"name": name, "namespace": "kube-system"}, "data": {key: text}})  # fmt: skip
    for node in ("master1", "worker1", "cp-untainted"):
        c.add_node(node)
    for node, labels, taints in (("master1", {MASTER: "", CP: ""}, [{"key": MASTER, "effect": "NoSchedule"}]),
                                 ("cp-untainted", {MASTER: "", CP: ""}, [])):  # fmt: skip
        n = admin.get(f"/api/v1/nodes/{node}")
        n["metadata"]["labels"].update(labels)
        n["spec"] = {"taints": taints} if taints else {}
        admin.call("PUT", f"/api/v1/nodes/{node}", n)
    for n in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        put(root, f"/etc/kubernetes/manifests/{n}.yaml", yaml.safe_dump({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": n, "namespace": "kube-system"},
            "spec": {"containers": [{"name": n, "image": f"{REPO}/{n}:v1.23.17", "command": [n]}]}}))  # fmt: skip
    put(root, "/etc/kubernetes/admin.conf", c.kubeconfig.read_text())
    put(root, "/etc/kubernetes/kubelet.conf", c.kubeconfig.read_text())  # `upgrade node`'s (admin's here)
    c.api.git_version = "v1.24.17"  # the kubelet restarted it from the new manifest
    yield c
    c.srv.shutdown()


def test_upgrade_apply_to_1_24_needs_pause_3_7(v124, cluster, tmp_path, capsys) -> None:
    node_images(tmp_path, "v1.24.17", "3.6")  # a registry holding 1.23's pause only
    rc, _, err = run(v124, capsys, "/usr/bin/kubeadm", "upgrade", "apply", "v1.24.17", "-y")
    assert rc == 1
    assert f"[ERROR ImagePull]: failed to pull image {REPO}/pause:3.7" in err
    nodes = {n["metadata"]["name"]: n for n in cluster.admin().get("/api/v1/nodes")["items"]}
    assert MASTER in nodes["master1"]["metadata"]["labels"]  # nothing changed


def test_upgrade_apply_to_1_24_moves_the_kubelet_config_and_the_control_plane_marks(
    v124, cluster, tmp_path, capsys
) -> None:
    node_images(tmp_path, "v1.24.17", "3.7")
    rc, out, err = run(v124, capsys, "/usr/bin/kubeadm", "upgrade", "apply", "v1.24.17", "-y")
    assert rc == 0, err
    assert 'SUCCESS! Your cluster was upgraded to "v1.24.17"' in out
    assert '[kubelet] Creating a ConfigMap "kubelet-config" in namespace kube-system' in out
    admin = cluster.admin()
    new = admin.get("/api/v1/namespaces/kube-system/configmaps/kubelet-config")
    old = admin.get("/api/v1/namespaces/kube-system/configmaps/kubelet-config-1.23")
    assert new["data"] == old["data"]  # the same KubeletConfiguration, the legacy one left in place
    nodes = {n["metadata"]["name"]: n for n in admin.get("/api/v1/nodes")["items"]}
    m = nodes["master1"]
    assert MASTER not in m["metadata"]["labels"] and CP in m["metadata"]["labels"]
    assert {(t["key"], t["effect"]) for t in m["spec"]["taints"]} == {
        (MASTER, "NoSchedule"),
        (CP, "NoSchedule"),
    }
    u = nodes["cp-untainted"]  # untainted by hand: kubeadm 1.24.1+ leaves it so (kubernetes#109840)
    assert MASTER not in u["metadata"]["labels"] and not (u.get("spec") or {}).get("taints")
    assert not (nodes["worker1"].get("spec") or {}).get("taints")
    # `upgrade node` (1.24) reads the new ConfigMap
    rc, out, err = run(v124, capsys, "/usr/bin/kubeadm", "upgrade", "node")
    assert rc == 0, err
    assert "cgroupDriver: systemd" in (tmp_path / "root/var/lib/kubelet/config.yaml").read_text()


def test_upgrade_node_1_24_falls_back_to_the_legacy_config_map(v124, cluster, tmp_path, capsys) -> None:
    rc, _, err = run(v124, capsys, "/usr/bin/kubeadm", "upgrade", "node")
    assert rc == 0, err  # only kubelet-config-1.23 exists: read as UnversionedKubeletConfigMap's fallback
    assert "cgroupDriver: systemd" in (tmp_path / "root/var/lib/kubelet/config.yaml").read_text()
    cluster.admin().call("DELETE", "/api/v1/namespaces/kube-system/configmaps/kubelet-config-1.23")
    rc, _, err = run(v124, capsys, "/usr/bin/kubeadm", "upgrade", "node")
    assert rc == 1 and err.startswith("[upgrade/config] FATAL: failed to get config map: ")
    assert "kubelet-config-1.23" in err


@pytest.mark.parametrize("flag", ["--network-plugin=cni", "--cni-bin-dir=/opt/cni/bin", "--cni-conf-dir=/etc/cni/net.d",
                                  "--docker-endpoint=unix:///var/run/docker.sock", "--image-pull-progress-deadline=2m",
                                  "--network-plugin-mtu=1450", "--cni-cache-dir=/var/lib/cni/cache",
                                  "--experimental-dockershim-root-directory=/var/lib/dockershim"])  # fmt: skip
def test_kubelet_1_24_refuses_the_dockershim_flags(v124, capsys, flag: str) -> None:
    rc, _, err = run(v124, capsys, "/usr/bin/kubelet", "--config=/var/lib/kubelet/config.yaml", flag)
    assert rc == 1
    assert err == f"Error: failed to parse kubelet flag: unknown flag: {flag.split('=')[0]}\n"
    # the 1.23 kubelet still has them
    assert flag.split("=")[0][2:] in kubelet123.kubelet_flags()


def test_kubelet_1_24_runs_only_a_remote_runtime_with_an_endpoint(v124, capsys) -> None:
    rc, _, err = run(v124, capsys, "/usr/bin/kubelet", "--container-runtime=docker")
    assert rc == 1
    assert ('"command failed" err="failed to validate kubelet flags: unsupported CRI runtime: "docker", '
            'only "remote" is currently supported"') in err  # fmt: skip
    rc, _, err = run(v124, capsys, "/usr/bin/kubelet", "--container-runtime=remote")
    assert rc == 1 and "the container runtime endpoint address was not specified or empty" in err
    # what kubeadm 1.23 wrote for containerd passes this check (a 1.24 kubelet starts with it)
    flags = {
        "container-runtime": "remote",
        "container-runtime-endpoint": "unix:///run/containerd/containerd.sock",
    }
    assert v124["kubelet"].validate_runtime_flags(flags) is None
    assert kubelet123.validate_runtime_flags({"container-runtime": "docker"}) is None  # 1.23: dockershim


def test_api_server_1_24_lets_nodes_read_both_kubelet_config_maps(v124) -> None:
    assert v124["apiserver"].KUBELET_CONFIG_NAMES == ("kubelet-config", "kubelet-config-1.23")
    assert v124["files"].KUBELET_CONFIG_CM == "kubelet-config"


def test_kubeadm_1_24_taints_a_new_control_plane_with_both(v124) -> None:
    cfg = v124["config"].load_init_config(None, {"kubernetes-version": "v1.24.17"}, resolve_host=False)
    assert cfg.init["nodeRegistration"]["taints"] == [{"effect": "NoSchedule", "key": MASTER},
                                                       {"effect": "NoSchedule", "key": CP}]  # fmt: skip
