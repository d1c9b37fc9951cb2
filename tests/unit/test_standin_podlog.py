"""`kubectl logs` through the stand-in: Debian's real kubectl asks the API server for pods/log, and
the API server asks the pod's node's kubelet API (kubeletapi.py) over mutual TLS, which reads the
log file the runtime wrote. A Job's log is found by the selector the API server gives the Job."""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from tests._support.paths import ROOT
from tests._support.standin_cluster import Cluster
from tests.standin.k8s_standin import kubeletapi, util
from tests.standin.k8s_standin.pki import make_cert
from tests.standin.k8s_standin.util import rfc3339

CRDS = ROOT / "tests/fixtures/charts/volcano/crds"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    root = tmp_path_factory.mktemp("podlog")
    (root / "cluster").mkdir()
    c = Cluster(root / "cluster")
    pki = root / "cluster" / "pki"
    crt, key = str(root / "apiserver-kubelet-client.crt"), str(root / "apiserver-kubelet-client.key")
    make_cert(
        crt,
        key,
        str(pki / "ca.crt"),
        str(pki / "ca.key"),
        "kube-apiserver-kubelet-client",
        ["system:masters"],
    )
    c.api.kubelet_client = (crt, key)
    node_root = root / "node"
    kcrt, kkey = kubeletapi.serving_cert(str(node_root / "pki"), "n1")
    srv = kubeletapi.serve(kcrt, kkey, str(pki / "ca.crt"), "127.0.0.1", 0)
    c.admin().call("POST", "/api/v1/nodes", {
        "apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": rfc3339()}],
                   "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
                   "daemonEndpoints": {"kubeletEndpoint": {"Port": srv.server_address[1]}}}})  # fmt: skip
    old, util.ROOT = util.ROOT, str(node_root)
    yield c, node_root
    util.ROOT = old
    srv.shutdown()
    c.srv.shutdown()


def _pod(c: Cluster, name: str, containers: list[str], node: str = "n1") -> str:
    spec = {
        "containers": [{"name": n, "image": "busybox"} for n in containers],
        **({"nodeName": node} if node else {}),
    }
    doc = c.admin().call("POST", "/api/v1/namespaces/default/pods", {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"}, "spec": spec})  # fmt: skip
    return doc["metadata"]["uid"]


def _log(node_root: Path, pod: str, uid: str, container: str, attempt: int, text: str) -> None:
    p = node_root / f"var/log/pods/default_{pod}_{uid}/{container}/{attempt}.log"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)


def test_kubectl_logs_reads_the_newest_attempt_from_the_node(cluster: tuple[Cluster, Path]) -> None:
    c, node_root = cluster
    uid = _pod(c, "one", ["main"])
    _log(node_root, "one", uid, "main", 0, "first try\n")
    _log(node_root, "one", uid, "main", 1, "a\nb\nc\n")
    assert c.kubectl("logs", "one", "-n", "default") == (0, "a\nb\nc\n", "")
    assert c.kubectl("logs", "one", "-n", "default", "--tail=1")[1] == "c\n"


def test_the_container_rule_and_its_wording_are_log_locations(cluster: tuple[Cluster, Path]) -> None:
    c, _ = cluster
    _pod(c, "two", ["a", "b"])
    rc, _, err = c.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log")
    assert rc == 1 and "a container name must be specified for pod two, choose one of: [a b]" in err, err
    rc, _, err = c.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log?container=zz")
    assert rc == 1 and "container zz is not valid for pod two" in err, err
    rc, out, err = c.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/two/log?container=b")
    assert rc == 1 and 'container "b" in pod "two" is not available' in err, (out, err)
    _pod(c, "nowhere", ["a"], node="")  # LogLocation: a pod on no node has an empty log
    assert c.kubectl("get", "--raw", "/api/v1/namespaces/default/pods/nowhere/log") == (0, "", "")


def test_the_kubelet_api_refuses_a_caller_without_a_client_certificate(cluster: tuple[Cluster, Path]) -> None:
    c, _ = cluster
    node = json.loads(c.kubectl("get", "node", "n1", "-o", "json")[1])
    port = node["status"]["daemonEndpoints"]["kubeletEndpoint"]["Port"]
    ctx = ssl.create_default_context()
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    with pytest.raises(urllib.error.HTTPError) as e:
        urllib.request.urlopen(
            f"https://127.0.0.1:{port}/containerLogs/default/one/main", context=ctx, timeout=10
        )
    assert e.value.code == 401


def test_kubectl_logs_of_a_job_finds_its_pod_by_the_selector_the_api_server_gave(
    cluster: tuple[Cluster, Path],
) -> None:
    c, node_root = cluster
    crds = [yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))]
    assert c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(crds))[0] == 0  # first: kinds to apply
    docs: list[dict] = []
    docs.append({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "default"},
                 "spec": {"weight": 1}})  # fmt: skip
    docs.append({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "smoke", "namespace": "default"},
                 "spec": {"backoffLimit": 0, "template": {"spec": {"schedulerName": "volcano", "restartPolicy": "Never",
                          "containers": [{"name": "cpu", "image": "busybox"}]}}}})  # fmt: skip
    rc, _, err = c.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert rc == 0, err
    job = json.loads(c.kubectl("get", "job", "smoke", "-n", "default", "-o", "json")[1])
    uid = job["metadata"]["uid"]
    assert job["spec"]["selector"] == {"matchLabels": {"controller-uid": uid}}
    [pod] = json.loads(
        c.kubectl("get", "pods", "-n", "default", "-l", f"controller-uid={uid}", "-o", "json")[1]
    )["items"]
    assert pod["spec"]["nodeName"] == "n1" and pod["metadata"]["labels"]["job-name"] == "smoke"
    _log(node_root, pod["metadata"]["name"], pod["metadata"]["uid"], "cpu", 0, "cpu smoke: 2 CPUs\n")
    assert c.kubectl("logs", "-n", "default", "job/smoke", "--tail=200") == (0, "cpu smoke: 2 CPUs\n", "")
