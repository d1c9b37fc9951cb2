"""A stand-in API server on 127.0.0.1 (random port, real mutual TLS) keeping its objects in a real
etcd 3.5.1 (tests/_support/real_etcd.py), with a bootstrap token and cluster-info, for tests that
need a cluster to talk to (no tests here); `Cluster.kubectl` runs the real kubectl against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tests._support.real_etcd import Etcd
from tests._support.real_kubectl import run_kubectl
from tests.standin.k8s_standin.apiserver import serve_api
from tests.standin.k8s_standin.client import (
    ApiClient,
    Credentials,
    cluster_info_kubeconfig,
    kubeconfig,
    load_kubeconfig,
)
from tests.standin.k8s_standin.pki import make_ca, make_cert, token_secret_object
from tests.standin.k8s_standin.util import b64, rfc3339

TOKEN = "abcdef.0123456789abcdef"


class Cluster:
    def __init__(self, root: Path) -> None:
        self.root = root
        pki = root / "pki"
        pki.mkdir()
        make_ca(str(pki / "ca.crt"), str(pki / "ca.key"), "kubernetes")
        make_cert(str(pki / "apiserver.crt"), str(pki / "apiserver.key"), str(pki / "ca.crt"), str(pki / "ca.key"),
                    "kube-apiserver", server=True, client=False, sans=["IP:127.0.0.1"])  # fmt: skip
        self.etcd = Etcd(root / "etcd")
        self.srv, self.api = serve_api(self.etcd.client(), str(pki / "apiserver.crt"), str(pki / "apiserver.key"),
                                         str(pki / "ca.crt"), str(pki / "ca.key"), "127.0.0.1", 0, "10.244.0.0/16")  # fmt: skip
        self.endpoint = f"127.0.0.1:{self.srv.server_address[1]}"
        self.ca = (pki / "ca.crt").read_text()
        self.kubeconfig = root / "admin.conf"
        self.kubeconfig.write_text(self.client_kubeconfig("kubernetes-admin", ["system:masters"]))
        admin = self.admin()
        admin.call("POST", "/api/v1/namespaces/kube-system/secrets", token_secret_object(TOKEN, 3600))
        admin.call("POST", "/api/v1/namespaces/kube-public/configmaps", {
            "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cluster-info", "namespace": "kube-public"},
            "data": {"kubeconfig": cluster_info_kubeconfig(f"https://{self.endpoint}", self.ca)}})  # fmt: skip

    def client_kubeconfig(self, user: str, orgs: list[str]) -> str:
        pki = self.root / "pki"
        crt, key = self.root / f"{user}.crt", self.root / f"{user}.key"
        make_cert(str(crt), str(key), str(pki / "ca.crt"), str(pki / "ca.key"), user, orgs)
        cred = {"client-certificate-data": b64(crt.read_text()), "client-key-data": b64(key.read_text())}
        return kubeconfig(f"https://{self.endpoint}", self.ca, user, cred)

    def admin(self) -> Any:
        return ApiClient(Credentials.from_kubeconfig(load_kubeconfig(str(self.kubeconfig))))

    def kubectl(self, *args: str, stdin: str | None = None) -> tuple[int, str, str]:
        """Debian's real kubectl (the lab nodes' client, tests/_support/real_kubectl.py) as admin."""
        p = run_kubectl(self.kubeconfig, *args, stdin=stdin)
        return p.returncode, p.stdout, p.stderr

    def add_node(self, name: str, ready: bool = True) -> None:
        conds = [{"type": "Ready", "status": "True" if ready else "False", "reason": "KubeletReady",
                  "lastHeartbeatTime": rfc3339(), "lastTransitionTime": rfc3339()}]  # fmt: skip
        self.admin().call("POST", "/api/v1/nodes", {
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            "status": {"conditions": conds, "nodeInfo": {"kubeletVersion": "v1.23.17"},
                       "addresses": [{"type": "InternalIP", "address": "10.77.0.11"}]}})  # fmt: skip


def put(root: Path, path: str, text: str) -> None:
    """Write `text` at node path `path` under a fake node tree `root` (the stand-in's ROOT)."""
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def node_images(tmp_path: Path, version: str, pause: str = "3.6") -> None:
    """The images the node's registry holds (the list the stand-in reads at `tmp_path/images`): the
    control plane's at `version`, pause `pause`, and kubeadm's etcd and CoreDNS of 1.23 and 1.24."""
    names = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kube-proxy")
    refs = [f"registry.k8s.io/{n}:{version}" for n in names]
    refs += [
        f"registry.k8s.io/pause:{pause}",
        "registry.k8s.io/etcd:3.5.6-0",
        "registry.k8s.io/coredns/coredns:v1.8.6",
    ]
    (tmp_path / "images").write_text("\n".join(refs) + "\n")
