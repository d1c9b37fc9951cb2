"""Debian's real kubectl client (kubernetes-client, v1.20) against the stand-in API server on
127.0.0.1 with real mutual TLS: what the roles and the day-2 commands run on the lab's master.

The binary comes from the Debian mirror (tests/_support/real_kubectl.py: scripts/bootstrap.sh
fetches the .deb into build/debs; without it the module fails, saying so)."""

from __future__ import annotations

import json
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.real_kubectl import real_kubectl, run_kubectl
from tests._support.standin_cluster import Cluster
from tests.standin.k8s_standin import pods
from tests.standin.k8s_standin.client import ApiClient, Credentials, load_kubeconfig
from tests.standin.k8s_standin.util import rfc3339


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    exe = real_kubectl()
    c = Cluster(tmp_path_factory.mktemp("realkubectl"))
    c.add_node("w1")
    c.add_node("w2")
    yield c, exe
    c.srv.shutdown()


def run(kc: tuple[Cluster, Path], *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return run_kubectl(kc[0].kubeconfig, *args, stdin=stdin)


def ok(kc: tuple[Cluster, Path], *args: str, stdin: str | None = None) -> str:
    p = run(kc, *args, stdin=stdin)
    assert p.returncode == 0, f"kubectl {' '.join(args)}: {p.stderr}"
    return p.stdout


def test_client_is_debians_1_20(kc: tuple[Cluster, Path]) -> None:
    v = json.loads(ok(kc, "version", "-o", "json"))
    assert v["clientVersion"]["gitVersion"].startswith("v1.20.")
    assert v["serverVersion"]["gitVersion"] == "v1.23.17"


def test_get_tables_json_jsonpath(kc: tuple[Cluster, Path]) -> None:
    lines = ok(kc, "get", "nodes").splitlines()  # a server-side Table, not kubectl's NAME/AGE fallback
    assert lines[0].split() == ["NAME", "STATUS", "ROLES", "AGE", "VERSION"]
    assert [ln.split()[:2] for ln in lines[1:]] == [["w1", "Ready"], ["w2", "Ready"]]
    wide = ok(kc, "get", "nodes", "-o", "wide").splitlines()
    assert "INTERNAL-IP" in wide[0] and "10.77.0.11" in wide[1]
    assert ok(kc, "get", "ns").splitlines()[0].split() == ["NAME", "STATUS", "AGE"]
    items = json.loads(ok(kc, "get", "nodes", "-o", "json"))["items"]
    assert [n["metadata"]["name"] for n in items] == ["w1", "w2"]
    assert ok(kc, "get", "node", "w2", "-o", "jsonpath={.status.nodeInfo.kubeletVersion}") == "v1.23.17"
    assert ok(kc, "get", "--raw", "/healthz") == "ok"
    p = run(kc, "get", "node", "nope")
    assert p.returncode == 1 and p.stderr.strip() == 'Error from server (NotFound): nodes "nope" not found'


def test_cordon_taint_label(kc: tuple[Cluster, Path]) -> None:
    assert ok(kc, "cordon", "w2") == "node/w2 cordoned\n"  # a strategic merge patch
    assert ok(kc, "get", "node", "w2").splitlines()[1].split()[1] == "Ready,SchedulingDisabled"
    assert ok(kc, "taint", "nodes", "w2", "runai=drain:NoExecute") == "node/w2 tainted\n"
    p = run(kc, "taint", "nodes", "w2", "runai=drain:NoExecute")
    assert p.returncode == 1 and "already has runai taint(s) with same effect(s)" in p.stderr
    assert ok(kc, "label", "node", "w2", "gpu=yes") == "node/w2 labeled\n"
    p = run(kc, "label", "node", "w2", "gpu=no")
    assert p.returncode == 1 and "'gpu' already has a value (yes), and --overwrite is false" in p.stderr
    ok(kc, "label", "node", "w2", "gpu=no", "--overwrite")
    spec = json.loads(ok(kc, "get", "node", "w2", "-o", "json"))
    assert spec["metadata"]["labels"]["gpu"] == "no"
    assert {"key": "runai", "value": "drain", "effect": "NoExecute"} in spec["spec"]["taints"]
    assert ok(kc, "taint", "nodes", "w2", "runai=drain:NoExecute-") == "node/w2 untainted\n"
    assert ok(kc, "label", "node", "w2", "gpu-") == "node/w2 labeled\n"  # 1.20 wording, 1.23 says unlabeled
    assert ok(kc, "uncordon", "w2") == "node/w2 uncordoned\n"
    node = json.loads(ok(kc, "get", "node", "w2", "-o", "json"))
    assert "unschedulable" not in node["spec"] and not node["spec"].get("taints")
    assert "gpu" not in node["metadata"]["labels"]


MANIFEST = """\
apiVersion: apps/v1
kind: DaemonSet
metadata: {name: agent, namespace: kube-system}
spec:
  selector: {matchLabels: {app: agent}}
  template:
    metadata: {labels: {app: agent}}
    spec:
      containers:
      - {name: agent, image: busybox, env: [{name: A, value: "1"}, {name: B, value: "b"}]}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: cfg, namespace: default}
data: {a: "1", b: "2"}
"""


def test_apply_create_delete(kc: tuple[Cluster, Path]) -> None:
    assert ok(kc, "apply", "-f", "-", stdin=MANIFEST).splitlines() == [
        "daemonset.apps/agent created", "configmap/cfg created"]  # fmt: skip
    assert ok(kc, "apply", "-f", "-", stdin=MANIFEST).splitlines() == [
        "daemonset.apps/agent unchanged", "configmap/cfg unchanged"]  # fmt: skip
    # a changed env entry is merged by name (strategic merge), a dropped key removed (3-way)
    changed = MANIFEST.replace('value: "1"', 'value: "2"').replace(', b: "2"', "")
    assert ok(kc, "apply", "-f", "-", stdin=changed).splitlines() == [
        "daemonset.apps/agent configured", "configmap/cfg configured"]  # fmt: skip
    ds = json.loads(ok(kc, "-n", "kube-system", "get", "ds", "agent", "-o", "json"))
    assert ds["spec"]["template"]["spec"]["containers"][0]["env"] == [
        {"name": "A", "value": "2"}, {"name": "B", "value": "b"}]  # fmt: skip
    assert json.loads(ok(kc, "get", "cm", "cfg", "-o", "jsonpath={.data}")) == {"a": "1"}
    pods = ok(kc, "-n", "kube-system", "get", "pods", "-o", "wide").splitlines()
    assert pods[0].split()[:5] == ["NAME", "READY", "STATUS", "RESTARTS", "AGE"]
    assert sorted(ln.split()[6] for ln in pods[1:]) == ["w1", "w2"]  # one per node, NODE column
    assert ok(kc, "create", "namespace", "proj-a") == "namespace/proj-a created\n"
    p = run(kc, "create", "namespace", "proj-a")
    assert p.returncode == 1 and 'namespaces "proj-a" already exists' in p.stderr
    assert ok(kc, "delete", "namespace", "proj-a") == 'namespace "proj-a" deleted\n'
    assert ok(kc, "delete", "namespace", "proj-a", "--ignore-not-found") == ""
    p = run(kc, "patch", "cm", "cfg", "--type", "json", "-p", '[{"op":"add","path":"/data/c","value":"3"}]')
    assert p.returncode == 0 and json.loads(ok(kc, "get", "cm", "cfg", "-o", "jsonpath={.data}")) == {
        "a": "1", "c": "3"}  # fmt: skip


def _pod(name: str, node: str, owner: str | None, labels: dict[str, str], mirror: bool = False) -> str:
    refs = [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": owner, "controller": True,
             "uid": "0c1d2e3f-0000-4000-8000-000000000001"}] if owner else []  # fmt: skip
    notes = {"kubernetes.io/config.mirror": "0123456789abcdef0123456789abcdef"} if mirror else {}
    return json.dumps({"apiVersion": "v1", "kind": "Pod", "metadata": {
        "name": name, "namespace": "default", "labels": labels, "ownerReferences": refs, "annotations": notes},
        "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox"}]}})  # fmt: skip


def _ready(c: Cluster, name: str) -> None:
    path = f"/api/v1/namespaces/default/pods/{name}"
    pod = c.admin().get(path)
    pod["status"] = {"phase": "Running", "conditions": [{"type": "Ready", "status": "True"}]}
    c.admin().call("PUT", path + "/status", pod)


def test_drain(kc: tuple[Cluster, Path]) -> None:
    c, _ = kc
    ok(kc, "apply", "-f", "-", stdin=MANIFEST)  # the DaemonSet: a pod on each node
    ok(kc, "create", "-f", "-", stdin=_pod("bare", "w1", None, {"app": "bare"}))
    ok(kc, "create", "-f", "-", stdin=_pod("static-w1", "w1", None, {"app": "static"}, mirror=True))
    p = run(kc, "drain", "w1", "--timeout=20s")
    assert p.returncode == 1
    assert (
        "cannot delete DaemonSet-managed Pods (use --ignore-daemonsets to ignore): kube-system/agent-"
        in p.stderr
    )
    assert (
        "cannot delete Pods not managed by ReplicationController" in p.stderr and "default/bare" in p.stderr
    )
    assert "static-w1" not in p.stderr  # a mirror pod is neither refused nor evicted
    assert ok(kc, "get", "pod", "bare", "-o", "name") == "pod/bare\n"  # refused: nothing was evicted
    ok(kc, "create", "-f", "-", stdin=_pod("web-1", "w1", "web", {"app": "web"}))
    _ready(c, "web-1")
    ok(kc, "create", "-f", "-", stdin=json.dumps({
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": "web", "namespace": "default"},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {"app": "web"}}}}))  # fmt: skip
    t0 = time.monotonic()
    p = run(kc, "drain", "w1", "--ignore-daemonsets", "--force", "--timeout=8s")
    assert p.returncode == 1 and time.monotonic() - t0 >= 5  # kubectl retried the refused eviction
    assert "Cannot evict pod as it would violate the pod's disruption budget." in p.stderr
    assert "global timeout reached: 8s" in p.stderr
    assert "pod/bare evicted" in p.stdout  # --force: the bare pod went, the budget kept web-1
    assert ok(kc, "get", "pod", "web-1", "-o", "name") == "pod/web-1\n"
    ok(kc, "create", "-f", "-", stdin=_pod("web-2", "w2", "web", {"app": "web"}))
    _ready(c, "web-2")  # now the budget allows one disruption
    out = ok(kc, "drain", "w1", "--ignore-daemonsets", "--force", "--delete-emptydir-data", "--timeout=20s")
    assert "pod/web-1 evicted" in out and "agent" not in out
    names = ok(kc, "get", "pods", "-A", "-o", "jsonpath={.items[*].metadata.name}").split()
    assert "web-1" not in names and "bare" not in names and "web-2" in names and "static-w1" in names
    assert sum(n.startswith("agent-") for n in names) == 2  # the DaemonSet pods stay
    ok(kc, "uncordon", "w1")


def test_wait(kc: tuple[Cluster, Path]) -> None:
    c, _ = kc
    c.admin().call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w3"},
                                              "status": {"conditions": [{"type": "Ready", "status": "False"}]}})  # fmt: skip

    def later() -> None:  # the kubelet posts Ready while kubectl waits (a watch)
        time.sleep(1.5)
        node = c.admin().get("/api/v1/nodes/w3")
        node["status"]["conditions"] = [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                         "lastHeartbeatTime": rfc3339(), "lastTransitionTime": rfc3339()}]  # fmt: skip
        c.admin().call("PUT", "/api/v1/nodes/w3/status", node)

    threading.Thread(target=later, daemon=True).start()
    assert ok(kc, "wait", "--for=condition=Ready", "node/w3", "--timeout=20s") == "node/w3 condition met\n"
    p = run(kc, "wait", "--for=condition=Ready", "node/w3", "node/nope", "--timeout=2s")
    assert p.returncode == 1 and 'nodes "nope" not found' in p.stderr
    c.admin().call("DELETE", "/api/v1/nodes/w3")


def test_describe_shows_the_kubelets_image_events(
    kc: tuple[Cluster, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A pod run on w1 whose image cannot be pulled: `kubectl describe pod` lists the kubelet's
    events (kubectl 1.20 asks for them by a field selector on involvedObject), and `get events`
    selects them by the pod's name, as the fault test does on the lab."""
    c = kc[0]
    image = "10.77.0.10:5000/nvidia/k8s-device-plugin:v0.16.2-ubi8"
    overrides = json.dumps({"apiVersion": "v1", "spec": {"nodeName": "w1"}})
    ok(kc, "-n", "default", "run", "gone", "--image", image, "--restart", "Never", "--overrides", overrides)
    conf = c.root / "w1-node.conf"
    conf.write_text(c.client_kubeconfig("system:node:w1", ["system:nodes"]))
    monkeypatch.setattr(pods, "containerd_config", lambda: {"sandbox_image": "registry.k8s.io/pause:3.6"})
    error = f'rpc error: code = Unknown desc = failed to pull and unpack image "{image}": {image}: not found'

    def pull(endpoint: str, ref: str) -> tuple[int, str]:
        if ref != image:
            return 0, ""
        return 1, f'time="x" level=fatal msg="pulling image: {error.replace(chr(34), chr(92) + chr(34))}"\n'

    client = ApiClient(Credentials.from_kubeconfig(load_kubeconfig(str(conf))))
    pods.PodWorker(client, "w1", "unix:///x.sock", pull, lambda e: set()).sync()
    described = ok(kc, "-n", "default", "describe", "pod", "gone")
    events = described[described.index("Events:") :].splitlines()
    print("\n".join(events))  # shown by pytest -rP
    assert events[1].split() == ["Type", "Reason", "Age", "From", "Message"], events
    assert any(ln.split()[:2] == ["Warning", "Failed"] and f'Failed to pull image "{image}": {error}' in ln
               for ln in events), events  # fmt: skip
    assert any(
        ln.split()[:2] == ["Warning", "Failed"] and ln.endswith("Error: ErrImagePull") for ln in events
    ), events
    selected = json.loads(ok(kc, "-n", "default", "get", "events", "--field-selector",
                             "involvedObject.name=gone", "-o", "json"))["items"]  # fmt: skip
    assert [e["reason"] for e in selected] == ["Pulling", "Failed", "Failed"], selected
    assert {e["source"]["host"] for e in selected} == {"w1"}
    ok(kc, "-n", "default", "delete", "pod", "gone", "--grace-period=0", "--force")
