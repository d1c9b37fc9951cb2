"""The stand-in API server on 127.0.0.1 (random port, real mutual TLS) driven by the stand-in's
client, kubelet and kubeadm code, and by Debian's real kubectl (the lab nodes' client,
tests/_support/real_kubectl.py)."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests._support.standin_cluster import TOKEN, Cluster
from tests.standin.k8s_standin import kubelet, util
from tests.standin.k8s_standin.client import (
    ApiClient,
    ApiError,
    Credentials,
    Unreachable,
    kubeconfig,
    load_kubeconfig,
)
from tests.standin.k8s_standin.join import discover
from tests.standin.k8s_standin.kubelet import Kubelet
from tests.standin.k8s_standin.pki import ca_cert_hash, token_secret_object
from tests.standin.k8s_standin.util import Fail


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("standin"))
    yield c
    c.srv.shutdown()


def test_health_and_auth(cluster: Cluster) -> None:
    anon = ApiClient(Credentials(f"https://{cluster.endpoint}", ca_pem=cluster.ca))
    assert anon.raw("GET", "/healthz") == (200, b"ok")
    with pytest.raises(ApiError) as e:
        anon.get("/api/v1/nodes")
    assert e.value.code == 401 and e.value.message == "Unauthorized"
    bad = ApiClient(
        Credentials(f"https://{cluster.endpoint}", ca_pem=cluster.ca, token="zzzzzz.zzzzzzzzzzzzzzzz")
    )
    with pytest.raises(ApiError, match="Unauthorized"):
        bad.get("/api/v1/namespaces/kube-public/configmaps/cluster-info")
    other_ca = ApiClient(Credentials(f"https://{cluster.endpoint}"))
    with pytest.raises(Unreachable, match="x509: certificate signed by unknown authority"):
        other_ca.get("/version")


def test_kubectl_nodes_label_taint_cordon(cluster: Cluster) -> None:
    cluster.add_node("w1")
    rc, out, _ = cluster.kubectl("get", "nodes", "-o", "name")
    assert (rc, out) == (0, "node/w1\n")
    node = json.loads(cluster.kubectl("get", "node", "w1", "-o", "json")[1])
    assert node["spec"]["podCIDR"] == "10.244.0.0/24"
    assert cluster.kubectl("label", "node", "w1", "gpu=yes")[1] == "node/w1 labeled\n"
    rc, _, err = cluster.kubectl("label", "node", "w1", "gpu=no")
    assert rc == 1 and err == "error: 'gpu' already has a value (yes), and --overwrite is false\n"
    assert cluster.kubectl("label", "node", "w1", "gpu=no", "--overwrite")[1] == "node/w1 labeled\n"
    assert cluster.kubectl("get", "node", "w1", "-o", "jsonpath={.metadata.labels.gpu}")[1] == "no"
    assert (
        cluster.kubectl("label", "node", "w1", "gpu-")[1] == "node/w1 labeled\n"
    )  # 1.20's word (1.23: unlabeled)
    assert cluster.kubectl("taint", "nodes", "w1", "runai=drain:NoExecute")[1] == "node/w1 tainted\n"
    rc, _, err = cluster.kubectl("taint", "nodes", "w1", "runai=drain:NoExecute")
    assert rc == 1 and "already has runai taint(s) with same effect(s) and --overwrite is false" in err
    assert cluster.kubectl("taint", "nodes", "w1", "runai=drain:NoExecute-")[1] == "node/w1 untainted\n"
    rc, _, err = cluster.kubectl("taint", "nodes", "w1", "runai-")
    assert rc == 1 and err == 'error: taint "runai" not found\n'
    assert cluster.kubectl("cordon", "w1")[1] == "node/w1 cordoned\n"
    table = cluster.kubectl("get", "nodes")[1].splitlines()
    assert table[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert table[1].split()[:3] == ["w1", "Ready,SchedulingDisabled", "<none>"]
    taints = json.loads(cluster.kubectl("get", "node", "w1", "-o", "jsonpath={.spec.taints}")[1])
    assert {"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"} in taints
    assert cluster.kubectl("uncordon", "w1")[1] == "node/w1 uncordoned\n"
    rc, out, _ = cluster.kubectl("wait", "--for=condition=Ready", "node", "--all", "--timeout=5s")
    assert (rc, out) == (0, "node/w1 condition met\n")
    rc, _, err = cluster.kubectl("get", "node", "nope")
    assert (rc, err) == (1, 'Error from server (NotFound): nodes "nope" not found\n')


def test_kubectl_apply_and_drain(cluster: Cluster, tmp_path: Path) -> None:
    manifest = tmp_path / "m.yaml"
    manifest.write_text("""\
apiVersion: v1
kind: Namespace
metadata: {name: gpu-operator}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata: {name: flannel}
rules: []
---
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: kube-flannel-ds, namespace: gpu-operator}
spec: {selector: {matchLabels: {app: flannel}}, template: {metadata: {labels: {app: flannel, tier: node}}}}
---
apiVersion: policy/v1beta1
kind: PodSecurityPolicy
metadata: {name: psp.flannel.unprivileged}
spec: {}
""")
    rc, out, err = cluster.kubectl("apply", "-f", str(manifest))
    assert rc == 0, err
    assert out == ("namespace/gpu-operator created\nclusterrole.rbac.authorization.k8s.io/flannel created\n"
                   "daemonset.apps/kube-flannel-ds created\npodsecuritypolicy.policy/psp.flannel.unprivileged created\n")  # fmt: skip
    assert "Warning: policy/v1beta1 PodSecurityPolicy is deprecated in v1.21+, unavailable in v1.25+" in err
    assert cluster.kubectl("apply", "-f", str(manifest))[1].count("unchanged") == 4
    manifest.write_text(manifest.read_text().replace("rules: []", "rules: [{verbs: [get]}]"))
    assert (
        "clusterrole.rbac.authorization.k8s.io/flannel configured"
        in cluster.kubectl("apply", "-f", str(manifest))[1]
    )
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "apiVersion: extensions/v1beta1\nkind: Deployment\nmetadata: {name: x}\n---\nkind: ConfigMap\n"
    )
    rc, _, err = cluster.kubectl("apply", "-f", str(bad))
    assert rc == 1
    assert (
        f'unable to recognize "{bad}": no matches for kind "Deployment" in version "extensions/v1beta1"'
        in err
    )
    assert "error validating data: apiVersion not set" in err
    rc, out, _ = cluster.kubectl("get", "ds", "-A", "-o", "name")
    assert out == "daemonset.apps/kube-flannel-ds\n"
    rc, _, err = cluster.kubectl("drain", "w1")
    assert rc == 1 and "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore)" in err
    rc, out, _ = cluster.kubectl("drain", "w1", "--ignore-daemonsets", "--delete-emptydir-data")
    assert rc == 0 and out.endswith("node/w1 drained\n")
    assert cluster.kubectl("create", "namespace", "runai")[1] == "namespace/runai created\n"
    rc, _, err = cluster.kubectl("create", "namespace", "runai")
    assert err == 'Error from server (AlreadyExists): namespaces "runai" already exists\n'


def test_discovery_token_and_pins(cluster: Cluster) -> None:
    good = ca_cert_hash(cluster.ca)
    kc, ca = discover(cluster.endpoint, TOKEN, [good], timeout=1, interval=0.2)
    assert ca == cluster.ca and "certificate-authority-data" in kc
    with pytest.raises(
        Fail, match='could not find a JWS signature in the cluster-info ConfigMap for token ID "zzzzzz"'
    ):
        discover(cluster.endpoint, "zzzzzz.0123456789abcdef", [good], timeout=0.5, interval=0.2)
    wrong = "sha256:" + "0" * 64
    with pytest.raises(Fail, match=f'none of the public keys "{good}" are pinned'):
        discover(cluster.endpoint, TOKEN, [wrong], timeout=1, interval=0.2)
    with pytest.raises(Fail, match="connect: connection refused"):
        discover("127.0.0.1:1", TOKEN, [good], timeout=0.3, interval=0.1)


def test_expired_token_loses_its_signature(cluster: Cluster) -> None:
    admin = cluster.admin()
    admin.call(
        "POST", "/api/v1/namespaces/kube-system/secrets", token_secret_object("shortt.0123456789abcdef", 3)
    )
    discover(cluster.endpoint, "shortt.0123456789abcdef", [], timeout=1, interval=0.2)
    time.sleep(3.1)
    with pytest.raises(Fail, match='for token ID "shortt"'):
        discover(cluster.endpoint, "shortt.0123456789abcdef", [], timeout=0.3, interval=0.1)


def test_kubelet_tls_bootstrap_and_node_authz(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(util, "ROOT", str(tmp_path))
    boot = tmp_path / "etc/kubernetes/bootstrap-kubelet.conf"
    boot.parent.mkdir(parents=True)
    boot.write_text(
        kubeconfig(f"https://{cluster.endpoint}", cluster.ca, "tls-bootstrap-token-user", {"token": TOKEN})
    )
    kl = Kubelet({"bootstrap-kubeconfig": "/etc/kubernetes/bootstrap-kubelet.conf", "hostname-override": "w2"},
                   {"cgroupDriver": "systemd"})  # fmt: skip
    kl.tls_bootstrap()
    assert (tmp_path / "etc/kubernetes/kubelet.conf").exists()
    creds = Credentials.from_kubeconfig(load_kubeconfig(str(tmp_path / "etc/kubernetes/kubelet.conf")))
    kl.client = ApiClient(creds)
    monkeypatch.setattr(kubelet, "ctr", lambda *a, **k: (1, "ctr: failed to dial"))
    kl.register()
    node = cluster.admin().get("/api/v1/nodes/w2")
    ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
    assert ready["status"] == "False" and "container runtime is down" in ready["message"]
    assert node["status"]["nodeInfo"]["kubeletVersion"] == "v1.23.17"
    kl.heartbeat()
    # a node may not touch another node (one of this test's own: under xdist, the module's first
    # test, which adds w1, may run in another process)
    cluster.add_node("w2-neighbour")
    other = cluster.admin().get("/api/v1/nodes/w2-neighbour")
    with pytest.raises(ApiError) as e:
        kl.client.call("PUT", "/api/v1/nodes/w2-neighbour", other)
    assert e.value.code == 403


def test_the_api_refuses_what_kubernetes_refuses(cluster: Cluster, tmp_path: Path) -> None:
    """Label values and keys, taints, a workload whose selector misses its template: 422 Invalid,
    worded as the 1.23 API server words it, and nothing stored."""
    cluster.add_node("w9")
    admin = cluster.admin()  # the API itself: kubectl refuses some of these before sending them

    def refused(patch: dict) -> str:
        with pytest.raises(ApiError) as e:
            admin.call("PATCH", "/api/v1/nodes/w9", patch, "application/merge-patch+json")
        assert (e.value.code, e.value.reason) == (422, "Invalid")
        return e.value.message

    def labels(value: dict) -> dict:
        return {"metadata": {"labels": value}}

    assert 'metadata.labels: Invalid value: "QCT_S5SP=x": a valid label must be an empty string' in refused(
        labels({"run.ai/type": "QCT_S5SP=x"})
    )
    assert "must be no more than 63 characters" in refused(labels({"run.ai/type": "S" * 64}))
    assert 'Invalid value: "run.ai/gpu type": name part must consist of alphanumeric characters' in refused(
        labels({"run.ai/gpu type": "x"})
    )
    refused({"spec": {"taints": [{"key": "runai", "value": "drain", "effect": "NoScheduled"}]}})
    node = admin.get("/api/v1/nodes/w9")
    assert "run.ai/type" not in node["metadata"]["labels"] and not node["spec"].get("taints")
    rc, _, err = cluster.kubectl("taint", "nodes", "w9", "runai=drain:NoScheduled")  # kubectl's own refusal
    assert rc == 1 and "NoScheduled" in err
    manifest = tmp_path / "ds.yaml"
    manifest.write_text(
        "apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: mismatched, namespace: default}\n"
        "spec: {selector: {matchLabels: {app: a}}, template: {metadata: {labels: {app: b}}}}\n"
    )
    cluster.kubectl("create", "namespace", "default")
    with pytest.raises(ApiError) as e:
        admin.call(
            "POST", "/apis/apps/v1/namespaces/default/daemonsets", yaml.safe_load(manifest.read_text())
        )
    assert e.value.code == 422 and e.value.message == (
        'DaemonSet.apps "mismatched" is invalid: spec.template.metadata.labels: Invalid value: '
        'map[string]string{"app":"b"}: `selector` does not match template `labels`'
    )
    rc, _, err = cluster.kubectl("apply", "-f", str(manifest))  # the Status has no details.causes: so
    assert (rc, err) == (1, 'The daemonset "mismatched" is invalid\n')  # kubectl shows no reason
    assert cluster.kubectl("get", "ds", "-A", "-o", "name")[1].count("mismatched") == 0


def test_mirror_pod_of_the_apiserver_and_node_restriction(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kubelet posts kube-apiserver-<node> from the manifest it started the API server with; a
    changed manifest replaces it; a kubelet may create only mirror pods bound to itself."""
    node = cluster.client_kubeconfig("system:node:m1", ["system:nodes"])
    (tmp_path / "m1.conf").write_text(node)
    manifest = tmp_path / "kube-apiserver.yaml"
    manifest.write_text(
        "apiVersion: v1\nkind: Pod\nmetadata:\n  name: kube-apiserver\n  namespace: kube-system\n"
        "  labels: {component: kube-apiserver}\nspec:\n  containers:\n  - name: kube-apiserver\n"
        "    image: r/kube-apiserver:v1.23.17\n    command: [kube-apiserver, --secure-port=6443]\n"
    )
    kl = Kubelet({"hostname-override": "m1"}, {})
    kl.client = ApiClient(Credentials.from_kubeconfig(load_kubeconfig(str(tmp_path / "m1.conf"))))
    monkeypatch.setattr(kubelet, "systemctl", lambda *a: (0, ""))  # the apiserver unit is active
    kl._load_static_pod(str(manifest))
    kl.sync_mirror_pod()
    path = "/api/v1/namespaces/kube-system/pods/kube-apiserver-m1"
    pod = cluster.admin().get(path)
    assert pod["spec"]["containers"][0]["command"] == ["kube-apiserver", "--secure-port=6443"]
    assert (
        pod["spec"]["nodeName"] == "m1"
        and pod["metadata"]["annotations"]["kubernetes.io/config.source"] == "file"
    )
    assert {c["type"]: c["status"] for c in pod["status"]["conditions"]}["Ready"] == "True"
    first_hash = pod["metadata"]["annotations"]["kubernetes.io/config.hash"]
    manifest.write_text(
        manifest.read_text().replace("--secure-port=6443]", "--secure-port=6443, --oidc-client-id=x]")
    )
    kl._load_static_pod(str(manifest))
    kl.sync_mirror_pod()
    pod = cluster.admin().get(path)
    assert pod["spec"]["containers"][0]["command"][-1] == "--oidc-client-id=x"
    assert pod["metadata"]["annotations"]["kubernetes.io/config.hash"] != first_hash
    assert (
        pod["metadata"]["annotations"]["kubernetes.io/config.mirror"]
        == pod["metadata"]["annotations"]["kubernetes.io/config.hash"]
    )
    plain = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
             "spec": {"nodeName": "m1", "containers": [{"name": "c", "image": "i"}]}}  # fmt: skip
    with pytest.raises(ApiError, match='node "m1" can only create mirror pods'):
        kl.client.call("POST", "/api/v1/namespaces/default/pods", plain)
    elsewhere = dict(plain, metadata={"name": "q", "namespace": "default",
                                      "annotations": {"kubernetes.io/config.mirror": "h"}},
                     spec={"nodeName": "m2", "containers": [{"name": "c", "image": "i"}]})  # fmt: skip
    with pytest.raises(ApiError, match=r"can only create pods with spec\.nodeName set to itself"):
        kl.client.call("POST", "/api/v1/namespaces/default/pods", elsewhere)


def test_a_pod_on_a_silent_node_stays_terminating_and_drain_waits_for_it(cluster: Cluster) -> None:
    """As Kubernetes: a graceful delete of a pod whose kubelet is silent (Ready Unknown) only marks
    it Terminating; kubectl drain waits for it until --timeout, or leaves it out once its
    deletionTimestamp is older than --skip-wait-for-delete-timeout; deleting the Node object takes
    its pods along. (A bare pod: drain needs --force.)"""
    old = util.rfc3339(time.time() - 120)  # past the node monitor grace: the node reads Unknown
    admin = cluster.admin()
    admin.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "cut"},
               "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": old}]}})  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "stuck", "namespace": "default"},
           "spec": {"nodeName": "cut", "terminationGracePeriodSeconds": 0, "containers": [{"name": "c", "image": "x"}]}}  # fmt: skip
    admin.call("POST", "/api/v1/namespaces/default/pods", pod)
    rc, out, err = cluster.kubectl("drain", "cut", "--ignore-daemonsets", "--force", "--timeout=2s")
    assert rc == 1 and 'error when waiting for pod "stuck" terminating: global timeout reached: 2s' in err
    left = admin.get("/api/v1/namespaces/default/pods/stuck")
    assert left["metadata"]["deletionTimestamp"]
    rc, out, err = cluster.kubectl(
        "drain", "cut", "--ignore-daemonsets", "--force", "--timeout=60s", "--skip-wait-for-delete-timeout=1"
    )
    assert rc == 0, err
    assert out.endswith("node/cut drained\n") and "stuck" not in out  # 1.20 filters it out, silently
    assert admin.get("/api/v1/namespaces/default/pods/stuck")["metadata"]["name"] == "stuck"
    assert cluster.kubectl("delete", "node", "cut")[0] == 0
    with pytest.raises(ApiError) as e:
        admin.get("/api/v1/namespaces/default/pods/stuck")
    assert e.value.code == 404


def test_a_restarted_kubelet_keeps_the_api_server_running_from_the_same_manifests(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real kubelet that restarts keeps a static pod's running container whose spec hash is the
    pod's; the stand-in restarted its API server unit on every kubelet start, which no node does
    (kube_upgrade's molecule converge met "connection refused" right after restarting the kubelet).
    A changed manifest, or a unit someone else restarted since, is still started anew."""
    monkeypatch.setattr(util, "ROOT", str(tmp_path))
    manifests = tmp_path / "etc/kubernetes/manifests"
    manifests.mkdir(parents=True)
    (tmp_path / "etc/systemd/system").mkdir(parents=True)
    (tmp_path / f"etc/systemd/system/{util.APISERVER_UNIT}").write_text("[Service]\n")
    (tmp_path / "var/lib/kubelet").mkdir(parents=True)
    api = manifests / "kube-apiserver.yaml"
    api.write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: kube-apiserver}\nspec: {containers: []}\n")
    (manifests / "etcd.yaml").write_text("apiVersion: v1\nkind: Pod\nmetadata: {name: etcd}\n")
    unit = {"invocation": "inv-1", "restarts": 0}

    def systemctl(*args: str) -> tuple[int, str]:
        if args[0] == "restart":
            unit["restarts"] += 1
            unit["invocation"] = f"inv-{unit['restarts'] + 1}"
        return (0, unit["invocation"] + "\n") if args[0] == "show" else (0, "")

    monkeypatch.setattr(kubelet, "systemctl", systemctl)

    def kubelet_starts() -> Kubelet:
        kl = Kubelet({"hostname-override": "m1"}, {})
        kl.sync_static_pods()
        return kl

    kubelet_starts()  # the first start: no record of what runs
    assert unit["restarts"] == 1
    kl = kubelet_starts()  # restarted: the same manifests run, kept
    assert unit["restarts"] == 1 and kl.static_pod and kl.static_mtime == api.stat().st_mtime
    kl.sync_static_pods()  # and its next pass leaves it alone too
    assert unit["restarts"] == 1
    api.write_text(api.read_text().replace("containers: []", "containers: [{name: a}]"))
    kubelet_starts()  # a manifest rewritten meanwhile: a new pod
    assert unit["restarts"] == 2
    unit["invocation"] = "inv-by-hand"  # `systemctl restart` by someone else: not the one recorded
    kubelet_starts()
    assert unit["restarts"] == 3


def test_a_node_deleted_and_registered_again_gets_the_next_range_not_its_old_one(cluster: Cluster) -> None:
    """The controller-manager's allocator moves on from the last range it gave (cidr_set.go's
    nextCandidate): a worker deleted and joined again gets a new podCIDR, as on a site."""

    def cidr(n: str) -> str:
        return json.loads(cluster.kubectl("get", "node", n, "-o", "json")[1])["spec"]["podCIDR"]

    for n in ("cidr-a", "cidr-b", "cidr-c"):
        cluster.add_node(n)
    before = {n: cidr(n) for n in ("cidr-a", "cidr-b", "cidr-c")}
    assert len(set(before.values())) == 3
    assert cluster.kubectl("delete", "node", "cidr-b")[0] == 0
    cluster.add_node("cidr-b")
    after = cidr("cidr-b")
    assert after != before["cidr-b"] and after not in before.values(), (before, after)
    assert (
        int(after.split(".")[2]) == int(before["cidr-c"].split(".")[2]) + 1
    )  # the next one after the last given
