"""The stand-in's Job controller and its Volcano scheduler (controllers.py), through its real API
server and Debian's real kubectl: a Job of schedulerName volcano gets one pod, bound once its
queue exists to a node that fits; the pod's end completes the Job or, past backoffLimit, fails it
with the controller's reason; a deleted Job takes its pods. What Volcano would not place stays
Pending and unbound: no queue, a closed queue, a GPU no node offers, a cordoned node."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import yaml

from tests._support.paths import ROOT
from tests._support.standin_cluster import Cluster
from tests.standin.k8s_standin import controllers

CRDS = ROOT / "tests/fixtures/charts/volcano/crds"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    c = Cluster(tmp_path_factory.mktemp("standin-jobs"))
    c.add_node("w1")
    c.add_node("w2")
    yield c
    c.srv.shutdown()


def _apply(cluster: Cluster, *docs: dict) -> None:
    rc, _, err = cluster.kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(docs))
    assert rc == 0, err


def _job(
    name: str, queue: str | None = "team-a", gpus: int = 0, backoff: int = 0, command: str = "true"
) -> dict:
    container: dict = {
        "name": "c",
        "image": "10.77.0.10:5000/library/busybox:1.36-lab",
        "command": ["sh", "-c", command],
    }
    if gpus:
        container["resources"] = {"limits": {"nvidia.com/gpu": gpus}}
    meta = {
        "labels": {"app": name},
        **({"annotations": {controllers.QUEUE_ANNOTATION: queue}} if queue else {}),
    }
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "namespace": "default"},
            "spec": {"backoffLimit": backoff, "template": {"metadata": meta, "spec": {
                "schedulerName": "volcano", "restartPolicy": "Never", "containers": [container]}}}}  # fmt: skip


def _pods(cluster: Cluster, job: str) -> list[dict]:
    out = cluster.kubectl("get", "pods", "-n", "default", "-l", f"job-name={job}", "-o", "json")[1]
    return json.loads(out)["items"]


def _job_status(cluster: Cluster, job: str) -> dict:
    return json.loads(cluster.kubectl("get", "job", job, "-n", "default", "-o", "json")[1]).get("status", {})


def _end(cluster: Cluster, pod: dict, phase: str) -> None:
    """What the node's kubelet reports when the pod's container exits."""
    path = f"/api/v1/namespaces/default/pods/{pod['metadata']['name']}/status"
    cluster.admin().call("PUT", path, dict(pod, status={"phase": phase}))


def test_no_pod_is_bound_before_volcano_and_its_queue_are_there(cluster: Cluster) -> None:
    _apply(cluster, _job("early"))
    [pod] = _pods(cluster, "early")
    meta = pod["metadata"]
    assert meta["name"].startswith("early-") and len(meta["name"]) == len("early-") + 5
    assert all(ch in controllers._ALNUM for ch in meta["name"][len("early-") :])
    assert meta["labels"] == {
        "app": "early",
        "controller-uid": meta["labels"]["controller-uid"],
        "job-name": "early",
    }
    [owner] = meta["ownerReferences"]
    assert (owner["kind"], owner["name"], owner["controller"]) == ("Job", "early", True)
    assert not pod["spec"].get("nodeName")  # no Queue kind yet: Volcano is not installed
    _apply(cluster, *(yaml.safe_load(p.read_text()) for p in sorted(CRDS.glob("*.yaml"))))
    assert not _pods(cluster, "early")[0]["spec"].get("nodeName")  # no queue team-a
    _apply(cluster, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "team-a"},
                     "spec": {"weight": 1}})  # fmt: skip
    [pod] = _pods(cluster, "early")
    assert pod["spec"]["nodeName"] in ("w1", "w2")
    assert _job_status(cluster, "early")["active"] == 1
    cluster.kubectl("delete", "job", "early", "-n", "default")
    assert _pods(cluster, "early") == []  # the garbage collector's part


def test_a_job_completes_when_its_pod_succeeds(cluster: Cluster) -> None:
    _apply(cluster, _job("ok"))
    [pod] = _pods(cluster, "ok")
    assert pod["spec"]["nodeName"] in ("w1", "w2")
    _end(cluster, pod, "Succeeded")
    status = _job_status(cluster, "ok")
    assert status["succeeded"] == 1 and "active" not in status
    assert [(c["type"], c["status"]) for c in status["conditions"]] == [("Complete", "True")]
    assert len(_pods(cluster, "ok")) == 1  # no other pod once it completed
    cluster.kubectl("delete", "pod", pod["metadata"]["name"], "-n", "default")
    assert _job_status(cluster, "ok") == status and not _pods(
        cluster, "ok"
    )  # a finished Job stays as it ended
    cluster.kubectl("delete", "job", "ok", "-n", "default")


def test_a_failed_pod_is_replaced_until_the_backoff_limit_then_the_job_fails(cluster: Cluster) -> None:
    _apply(cluster, _job("flaky", backoff=1))
    [first] = _pods(cluster, "flaky")
    _end(cluster, first, "Failed")
    pods = _pods(cluster, "flaky")
    assert len(pods) == 2 and _job_status(cluster, "flaky")["failed"] == 1
    [second] = [p for p in pods if p["metadata"]["name"] != first["metadata"]["name"]]
    assert second["spec"]["nodeName"] in ("w1", "w2")
    _end(cluster, second, "Failed")
    status = _job_status(cluster, "flaky")
    assert status["failed"] == 2 and len(_pods(cluster, "flaky")) == 2
    [cond] = status["conditions"]
    assert (cond["type"], cond["reason"], cond["message"]) == (
        "Failed", "BackoffLimitExceeded", "Job has reached the specified backoff limit")  # fmt: skip
    cluster.kubectl("delete", "job", "flaky", "-n", "default")


def test_what_volcano_would_not_place_stays_pending(cluster: Cluster) -> None:
    _apply(cluster, _job("gpu", gpus=1), _job("nowhere", queue="team-z"))
    assert not _pods(cluster, "gpu")[0]["spec"].get("nodeName")  # no node offers nvidia.com/gpu
    assert not _pods(cluster, "nowhere")[0]["spec"].get("nodeName")  # no such queue
    _apply(cluster, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "shut"},
                     "spec": {"weight": 1}})  # fmt: skip
    queue = cluster.admin().get("/apis/scheduling.volcano.sh/v1beta1/queues/shut")
    cluster.admin().call("PUT", "/apis/scheduling.volcano.sh/v1beta1/queues/shut/status",
                         dict(queue, status={"state": "Closed"}))  # fmt: skip
    _apply(cluster, _job("closed", queue="shut"))
    assert not _pods(cluster, "closed")[0]["spec"].get("nodeName")
    cluster.kubectl("cordon", "w1")
    cluster.kubectl("cordon", "w2")
    _apply(cluster, _job("cordoned"))
    assert not _pods(cluster, "cordoned")[0]["spec"].get("nodeName")
    cluster.kubectl("uncordon", "w2")
    assert _pods(cluster, "cordoned")[0]["spec"]["nodeName"] == "w2"  # placed once a node fits
    cluster.kubectl("uncordon", "w1")
    for job in ("gpu", "nowhere", "closed", "cordoned"):
        cluster.kubectl("delete", "job", job, "-n", "default")
