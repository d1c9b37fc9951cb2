"""The stand-in's DaemonSet controller and kubelet pod worker against the stand-in API server (real
mutual TLS, node credentials): scheduling by selector, affinity and taints; a pod that pulls
reports Running and its ConfigMap copy lands on the host; a pull failure reports ErrImagePull /
ImagePullBackOff naming the image and writes nothing; the kubelet's image events on the pod; its
sandbox and app containers, their exits and restarts. containerd is replaced by a recorded puller
and tests/_support/fake_ctr.py here (no daemon on this machine); the lab e2e runs the real one."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests._support.fake_ctr import FakeCtr, busybox_cp
from tests._support.standin_cluster import Cluster
from tests.standin.k8s_standin import podnet, pods, runtime, util
from tests.standin.k8s_standin.client import ApiClient, ApiError, Credentials, load_kubeconfig
from tests.standin.k8s_standin.controllers import eligible, pod_name
from tests.standin.k8s_standin.pods import PodWorker

CNI_CONF = '{"name": "cbr0", "cniVersion": "0.3.1", "plugins": [{"type": "flannel"}]}'
FLANNEL = "10.77.0.10:5000/flannel/flannel:v0.22.3"
SANDBOX = "registry.k8s.io/pause:3.6"  # containerd's default: no config.toml in the fake root


def _flannel(image: str = FLANNEL) -> list[dict]:
    ds_spec = {
        "selector": {"matchLabels": {"app": "flannel"}},
        "template": {
            "metadata": {"labels": {"app": "flannel"}},
            "spec": {
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/os", "operator": "In", "values": ["linux"]}]}]}}},
                "hostNetwork": True,
                "tolerations": [{"operator": "Exists", "effect": "NoSchedule"}],
                "initContainers": [{
                    "name": "install-cni", "image": image, "command": ["cp"],
                    "args": ["-f", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"],
                    "volumeMounts": [{"name": "cni", "mountPath": "/etc/cni/net.d"},
                                     {"name": "flannel-cfg", "mountPath": "/etc/kube-flannel/"}]}],
                "containers": [{"name": "kube-flannel", "image": image}],
                "volumes": [{"name": "cni", "hostPath": {"path": "/etc/cni/net.d"}},
                            {"name": "flannel-cfg", "configMap": {"name": "kube-flannel-cfg"}}],
            },
        },
    }  # fmt: skip
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kube-flannel"}},
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "kube-flannel-cfg", "namespace": "kube-flannel"},
         "data": {"cni-conf.json": CNI_CONF}},
        {"apiVersion": "apps/v1", "kind": "DaemonSet", "metadata": {"name": "kube-flannel-ds", "namespace": "kube-flannel"},
         "spec": ds_spec},
    ]  # fmt: skip


@pytest.fixture(autouse=True)
def ctrd(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> FakeCtr:
    """containerd's containers and tasks, as runtime.py sees them through ctr; busybox's cp runs."""
    fake = FakeCtr(execute=busybox_cp(str(tmp_path / "root")))
    monkeypatch.setattr(runtime, "ctr", fake)
    return fake


@pytest.fixture
def cluster(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setattr(util, "ROOT", str(tmp_path / "root"))  # host paths land under here
    c = Cluster(tmp_path)
    yield c
    c.srv.shutdown()


def _node_client(c: Cluster, node: str) -> ApiClient:
    path = c.root / f"{node}.conf"
    path.write_text(c.client_kubeconfig(f"system:node:{node}", ["system:nodes"]))
    return ApiClient(Credentials.from_kubeconfig(load_kubeconfig(str(path))))


def _apply(c: Cluster, docs: list[dict]) -> None:
    admin = c.admin()
    for d in docs:
        ns = d["metadata"].get("namespace")
        plural = {"Namespace": "namespaces", "ConfigMap": "configmaps", "DaemonSet": "daemonsets"}[d["kind"]]
        base = "/apis/apps/v1" if d["kind"] == "DaemonSet" else "/api/v1"
        admin.call("POST", f"{base}/namespaces/{ns}/{plural}" if ns else f"{base}/{plural}", d)


def _label(c: Cluster, node: str, **labels: str) -> None:
    c.admin().call("PATCH", f"/api/v1/nodes/{node}", {"metadata": {"labels": labels}})


class Puller:
    def __init__(self, missing: set[str] = frozenset()) -> None:
        self.missing, self.pulled = set(missing), []

    def __call__(self, endpoint: str, image: str) -> tuple[int, str]:
        if image in self.missing:
            return 1, (f'time="x" level=fatal msg="pulling image: rpc error: code = Unknown desc = failed to pull '
                       f'and unpack image \\"{image}\\": {image}: not found"\n')  # fmt: skip
        self.pulled.append(image)
        return 0, f"Image is up to date for {image}\n"


def _pod(c: Cluster, node: str) -> dict:
    return c.admin().get(f"/api/v1/namespaces/kube-flannel/pods/{pod_name('kube-flannel-ds', node)}")


def test_daemonset_pods_follow_selector_affinity_and_taints(cluster: Cluster) -> None:
    for n in ("m1", "w1"):
        cluster.add_node(n)
        _label(cluster, n, **{"kubernetes.io/os": "linux"})
    cluster.add_node("other")  # no kubernetes.io/os label: the affinity excludes it
    _apply(cluster, _flannel())
    pods = {p["spec"]["nodeName"] for p in cluster.admin().get("/api/v1/pods")["items"]}
    assert pods == {"m1", "w1"}
    pod = _pod(cluster, "w1")
    assert (
        pod["metadata"]["ownerReferences"][0]["kind"] == "DaemonSet" and pod["status"]["phase"] == "Pending"
    )
    # a NoExecute taint the DaemonSet does not tolerate takes its pod off the node
    cluster.admin().call(
        "PATCH", "/api/v1/nodes/w1", {"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}
    )
    assert {p["spec"]["nodeName"] for p in cluster.admin().get("/api/v1/pods")["items"]} == {"m1"}
    assert eligible(
        {"tolerations": [{"operator": "Exists"}]}, {"spec": {"taints": [{"key": "x", "effect": "NoExecute"}]}}
    )


def test_a_pulled_pod_runs_its_init_container_on_its_configmap_volume_and_reports_running(
    cluster: Cluster, tmp_path: Path, ctrd: FakeCtr
) -> None:
    """install-cni runs as a container, busybox's cp (modelled by the fake) reading the ConfigMap's
    key from the volume the kubelet wrote and bound in read-only, before the app container starts."""
    cluster.add_node("w1")
    _label(cluster, "w1", **{"kubernetes.io/os": "linux"})
    _apply(cluster, _flannel())
    puller = Puller()
    worker = PodWorker(
        _node_client(cluster, "w1"), "w1", "unix:///run/containerd/containerd.sock", puller, lambda e: set()
    )
    worker.sync()
    assert puller.pulled == [SANDBOX, FLANNEL]  # the kube-flannel container reuses the init's image
    conflist = tmp_path / "root/etc/cni/net.d/10-flannel.conflist"
    assert json.loads(conflist.read_text()) == json.loads(CNI_CONF)
    pod = _pod(cluster, "w1")
    uid = pod["metadata"]["uid"]
    volume = f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/flannel-cfg"
    (init,) = [
        c for c in ctrd.containers.values() if c.labels.get("io.kubernetes.container.name") == "install-cni"
    ]
    assert init.argv == ["cp", "-f", "/etc/kube-flannel/cni-conf.json", "/etc/cni/net.d/10-flannel.conflist"]
    assert _flag_pairs(init.flags, "--mount") == [
        ["--mount", "type=bind,src=/etc/cni/net.d,dst=/etc/cni/net.d,options=rbind:rw"],
        ["--mount", f"type=bind,src={volume},dst=/etc/kube-flannel/,options=rbind:ro"],
    ]
    projected = tmp_path / f"root{volume}"
    assert os.readlink(projected / "cni-conf.json") == "..data/cni-conf.json"
    assert re.fullmatch(r"\.\.\d{4}(_\d\d){5}\.\d{9}", os.readlink(projected / "..data"))
    assert (projected / "cni-conf.json").stat().st_mode & 0o777 == 0o644
    assert init.task == "STOPPED" or init.task is None  # ran to its end; its exit read
    assert [e.get("exit") for e in runtime.record(uid) if e.get("init")] == [0]
    assert pod["status"]["phase"] == "Running"
    assert pod["status"]["initContainerStatuses"][0]["state"]["terminated"]["reason"] == "Completed"
    assert pod["status"]["containerStatuses"][0]["ready"] is True
    pulling, pulled, present, *started = _events(cluster)
    assert pulling == ("Normal", "Pulling", f'Pulling image "{FLANNEL}"', 1)
    assert pulled[:2] == ("Normal", "Pulled")
    assert re.fullmatch(rf'Successfully pulled image "{re.escape(FLANNEL)}" in [0-9.]+(ms|s)', pulled[2]), (
        pulled
    )
    assert present == ("Normal", "Pulled", f'Container image "{FLANNEL}" already present on machine', 1)
    assert started == [("Normal", "Created", "Created container install-cni", 1),
                       ("Normal", "Started", "Started container install-cni", 1),
                       ("Normal", "Created", "Created container kube-flannel", 1),
                       ("Normal", "Started", "Started container kube-flannel", 1)]  # fmt: skip
    runs = len([c for c in ctrd.calls if c[:1] == ["run"]])
    worker.sync()  # nothing left to do: no second pull, no init run again, no new event
    assert puller.pulled == [SANDBOX, FLANNEL]
    assert len([c for c in ctrd.calls if c[:1] == ["run"]]) == runs
    assert len(_events(cluster)) == 7


@pytest.mark.parametrize("policy", ["Always", "Never"])
def test_an_init_container_that_fails_holds_the_pod_then_runs_again_or_fails_it(
    cluster: Cluster, tmp_path: Path, ctrd: FakeCtr, monkeypatch: pytest.MonkeyPatch, policy: str
) -> None:
    """The ConfigMap lacks the key cp reads: cp exits 1, the pod stays Pending (Init:Error) with no
    app container started; restartPolicy Never fails the pod, else the init runs again once its
    retry is due and, the key there, the pod runs."""
    cluster.add_node("w1")
    _label(cluster, "w1", **{"kubernetes.io/os": "linux"})
    docs = _flannel()
    docs[1]["data"] = {"other": "x"}
    docs[2]["spec"]["template"]["spec"]["restartPolicy"] = policy
    _apply(cluster, docs)
    worker = _worker(cluster)
    worker.sync()
    status = _pod(cluster, "w1")["status"]
    assert status["phase"] == ("Failed" if policy == "Never" else "Pending")
    assert status["initContainerStatuses"][0]["state"] == {"terminated": {"exitCode": 1, "reason": "Error"}}
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert (
        ctrd.running("container") == [] and not (tmp_path / "root/etc/cni/net.d/10-flannel.conflist").exists()
    )
    if policy == "Never":
        return
    cluster.admin().call("PATCH", "/api/v1/namespaces/kube-flannel/configmaps/kube-flannel-cfg",
                         {"data": {"cni-conf.json": CNI_CONF}})  # fmt: skip
    monkeypatch.setattr(pods, "INIT_RETRY_S", 0)
    worker.sync()
    status = _pod(cluster, "w1")["status"]
    assert status["phase"] == "Running" and status["initContainerStatuses"][0]["restartCount"] == 1
    assert json.loads((tmp_path / "root/etc/cni/net.d/10-flannel.conflist").read_text()) == json.loads(
        CNI_CONF
    )
    assert [
        e.get("exit") for e in runtime.record(_pod(cluster, "w1")["metadata"]["uid"]) if e.get("init")
    ] == [0]


def test_an_init_container_still_running_is_reported_and_found_again_by_the_next_sync(
    cluster: Cluster, tmp_path: Path, ctrd: FakeCtr, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A sync does not wait past INIT_WAIT_S (its loop also sends the node's heartbeats): the pod
    reports the init container running, the app container waits; a later sync reads its exit and
    starts the app container, without running the init container again."""
    cluster.add_node("w1")
    _label(cluster, "w1", **{"kubernetes.io/os": "linux"})
    docs = _flannel()
    docs[2]["spec"]["template"]["spec"]["initContainers"][0]["command"] = ["sleep"]  # the fake runs no sleep
    _apply(cluster, docs)
    monkeypatch.setattr(pods, "INIT_WAIT_S", 0)
    worker = _worker(cluster)
    worker.sync()
    status = _pod(cluster, "w1")["status"]
    assert status["phase"] == "Pending" and "running" in status["initContainerStatuses"][0]["state"]
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
    assert ctrd.running("container")[0].labels["io.kubernetes.container.name"] == "install-cni"
    ctrd.exit("install-cni", 0)
    worker.sync()
    status = _pod(cluster, "w1")["status"]
    assert status["phase"] == "Running", status
    assert status["initContainerStatuses"][0]["state"]["terminated"]["exitCode"] == 0
    names = [c.labels["io.kubernetes.container.name"] for c in ctrd.containers.values() if c.labels.get(
        "io.kubernetes.container.name")]  # fmt: skip
    assert names == ["install-cni", "kube-flannel"]  # the init container ran once


def test_a_configmap_volume_whose_configmap_is_missing_is_failed_mount_and_nothing_runs(
    cluster: Cluster, ctrd: FakeCtr
) -> None:
    cluster.add_node("w1")
    _label(cluster, "w1", **{"kubernetes.io/os": "linux"})
    docs = _flannel()
    _apply(cluster, [docs[0], docs[2]])  # no kube-flannel-cfg
    _worker(cluster).sync()
    status = _pod(cluster, "w1")["status"]
    assert status["phase"] == "Pending"
    assert status["initContainerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    message = 'MountVolume.SetUp failed for volume "flannel-cfg" : configmap "kube-flannel-cfg" not found'
    assert [e[:2] for e in _events(cluster)] == [("Warning", "FailedMount")]  # mounted before any pull
    assert ("Warning", "FailedMount", message, 1) in _events(cluster)
    assert ctrd.running("container") == [] and ctrd.running("sandbox") == []


def _events(c: Cluster) -> list[tuple[str, str, str, int]]:
    """(type, reason, message, count) of the kube-flannel events, oldest first."""
    items = c.admin().get("/api/v1/namespaces/kube-flannel/events")["items"]
    return [(e["type"], e["reason"], e["message"], e["count"]) for e in items]


def test_a_missing_image_is_err_image_pull_naming_it_then_back_off_and_nothing_is_written(
    cluster: Cluster, tmp_path: Path
) -> None:
    cluster.add_node("w1")
    _label(cluster, "w1", **{"kubernetes.io/os": "linux"})
    _apply(cluster, _flannel())
    worker = PodWorker(
        _node_client(cluster, "w1"), "w1", "unix:///x.sock", Puller({FLANNEL}), lambda e: set()
    )
    worker.sync()  # pulls, fails: ErrImagePull, its message the pull's own error
    status = _pod(cluster, "w1")["status"]
    assert status["phase"] == "Pending"
    waiting = status["initContainerStatuses"][0]["state"]["waiting"]
    error = (
        f'rpc error: code = Unknown desc = failed to pull and unpack image "{FLANNEL}": {FLANNEL}: not found'
    )
    assert waiting == {"reason": "ErrImagePull", "message": error}
    assert not (tmp_path / "root/etc/cni/net.d/10-flannel.conflist").exists()
    pulls = [
        ("Normal", "Pulling", f'Pulling image "{FLANNEL}"', 1),
        ("Warning", "Failed", f'Failed to pull image "{FLANNEL}": {error}', 1),
        ("Warning", "Failed", "Error: ErrImagePull", 1),
    ]
    assert _events(cluster) == pulls
    event = cluster.admin().get("/api/v1/namespaces/kube-flannel/events")["items"][0]
    pod = _pod(cluster, "w1")
    assert event["involvedObject"]["fieldPath"] == "spec.initContainers{install-cni}"
    assert (event["involvedObject"]["uid"], event["source"]) == (
        pod["metadata"]["uid"], {"component": "kubelet", "host": "w1"}
    )  # fmt: skip
    assert event["metadata"]["name"].startswith(pod["metadata"]["name"] + ".")

    worker.sync()  # inside the back-off: said once, no pull
    waiting = _pod(cluster, "w1")["status"]["initContainerStatuses"][0]["state"]["waiting"]
    assert waiting == {"reason": "ImagePullBackOff", "message": f'Back-off pulling image "{FLANNEL}"'}
    backoff = [
        ("Normal", "BackOff", f'Back-off pulling image "{FLANNEL}"', 1),
        ("Warning", "Failed", "Error: ImagePullBackOff", 1),
    ]
    worker.sync()
    assert _events(cluster) == pulls + backoff

    for b in worker.backoff.values():
        b.due = 0.0  # the back-off has passed: it pulls again, and the same events count up
    worker.sync()
    assert (
        _pod(cluster, "w1")["status"]["initContainerStatuses"][0]["state"]["waiting"]["reason"]
        == "ErrImagePull"
    )
    assert _events(cluster) == [(t, r, m, 2) for t, r, m, _ in pulls] + backoff


def test_a_node_reads_only_the_configmaps_its_pods_mount(cluster: Cluster) -> None:
    cluster.add_node("w1")
    cluster.add_node("w2")
    _label(cluster, "w1", **{"kubernetes.io/os": "linux"})
    _apply(cluster, _flannel())
    assert _node_client(cluster, "w1").get("/api/v1/namespaces/kube-flannel/configmaps/kube-flannel-cfg")[
        "data"
    ]
    with pytest.raises(ApiError) as e:  # w2 runs no pod mounting it (the Node authorizer's rule)
        _node_client(cluster, "w2").get("/api/v1/namespaces/kube-flannel/configmaps/kube-flannel-cfg")
    assert e.value.code == 403


def test_the_kubelet_back_confirms_the_delete_of_a_pod_left_terminating(cluster: Cluster) -> None:
    """A pod deleted while its node's kubelet was silent stays Terminating; the kubelet, posting
    again, stops it and confirms the delete (its own delete is final)."""
    old = util.rfc3339(util.now() - 120)  # past the node monitor grace: Unknown
    admin = cluster.admin()
    admin.call("POST", "/api/v1/nodes", {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "w2"},
               "status": {"conditions": [{"type": "Ready", "status": "True", "lastHeartbeatTime": old}]}})  # fmt: skip
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "default"},
           "spec": {"nodeName": "w2", "containers": [{"name": "c", "image": SANDBOX}]}}  # fmt: skip
    admin.call("POST", "/api/v1/namespaces/default/pods", pod)
    admin.call("DELETE", "/api/v1/namespaces/default/pods/p")
    assert admin.get("/api/v1/namespaces/default/pods/p")["metadata"]["deletionTimestamp"]
    puller = Puller()
    PodWorker(
        _node_client(cluster, "w2"), "w2", "unix:///run/containerd/containerd.sock", puller, lambda e: set()
    ).sync()
    with pytest.raises(ApiError) as e:
        admin.get("/api/v1/namespaces/default/pods/p")
    assert e.value.code == 404 and puller.pulled == []  # stopped, not started


# ---- the pod network: a pod not on the host's network gets its sandbox network from CNI -----------


def _plain_pod(c: Cluster, node: str, name: str = "web") -> dict:
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": "default"},
           "spec": {"nodeName": node, "containers": [{"name": "c", "image": FLANNEL}]}}  # fmt: skip
    return c.admin().call("POST", "/api/v1/namespaces/default/pods", pod)


def _default_pod(c: Cluster, name: str = "web") -> dict:
    return c.admin().get(f"/api/v1/namespaces/default/pods/{name}")


def test_a_pod_waits_for_the_network_then_reports_the_ip_its_sandbox_got(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.add_node("w1")
    _plain_pod(cluster, "w1")
    made: list[str] = []
    monkeypatch.setattr(podnet, "setup", lambda pod: made.append(pod["metadata"]["name"]) or "10.244.1.2")
    worker = PodWorker(
        _node_client(cluster, "w1"), "w1", "unix:///run/containerd/containerd.sock", Puller(), lambda e: set()
    )
    worker.sync()  # no CNI config on the node yet: no sandbox, the pod waits
    status = _default_pod(cluster)["status"]
    assert status["phase"] == "Pending" and made == [] and "podIP" not in status
    assert status["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    conf = tmp_path / "root/etc/cni/net.d/10-flannel.conflist"
    conf.parent.mkdir(parents=True)
    conf.write_text(CNI_CONF)
    worker.sync()
    status = _default_pod(cluster)["status"]
    assert (status["phase"], status["podIP"], status["podIPs"], made) == (
        "Running", "10.244.1.2", [{"ip": "10.244.1.2"}], ["web"]
    )  # fmt: skip


def test_a_sandbox_whose_network_fails_is_failed_create_pod_sandbox_with_the_plugins_error(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster.add_node("w1")
    _plain_pod(cluster, "w1")
    conf = tmp_path / "root/etc/cni/net.d/10-flannel.conflist"
    conf.parent.mkdir(parents=True)
    conf.write_text(CNI_CONF)
    err = ('failed to setup network for sandbox "abc": plugin type="flannel" failed (add): '
           "open /run/flannel/subnet.env: no such file or directory")  # fmt: skip

    def fail(pod: dict) -> str:
        raise podnet.NetError(err)

    monkeypatch.setattr(podnet, "setup", fail)
    worker = PodWorker(
        _node_client(cluster, "w1"), "w1", "unix:///run/containerd/containerd.sock", Puller(), lambda e: set()
    )
    worker.sync()
    assert _default_pod(cluster)["status"]["phase"] == "Pending"
    events = [(e["type"], e["reason"], e["message"])
              for e in cluster.admin().get("/api/v1/namespaces/default/events")["items"]]  # fmt: skip
    assert ("Warning", "FailedCreatePodSandBox",
            f"Failed to create pod sandbox: rpc error: code = Unknown desc = {err}") in events  # fmt: skip


# ---- containers: a sandbox per pod, then its app containers, through containerd (fake_ctr here) --------


def _worker(c: Cluster, node: str = "w1") -> PodWorker:
    return PodWorker(
        _node_client(c, node), node, "unix:///run/containerd/containerd.sock", Puller(), lambda e: set()
    )


def _network_ready(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conf = tmp_path / "root/etc/cni/net.d/10-flannel.conflist"
    conf.parent.mkdir(parents=True)
    conf.write_text(CNI_CONF)
    monkeypatch.setattr(podnet, "setup", lambda pod: "10.244.1.2")
    monkeypatch.setattr(podnet, "sandbox_id", lambda uid: "5" * 64)


def test_a_pod_runs_a_sandbox_in_its_network_namespace_then_its_containers_and_the_delete_removes_them(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrd: FakeCtr
) -> None:
    cluster.add_node("w1")
    _network_ready(tmp_path, monkeypatch)
    uid = _plain_pod(cluster, "w1")["metadata"]["uid"]
    worker = _worker(cluster)
    worker.sync()
    status = _default_pod(cluster)["status"]
    assert status["phase"] == "Running" and status["containerStatuses"][0]["state"].keys() == {"running"}
    (sandbox,), (app,) = ctrd.running("sandbox"), ctrd.running("container")
    netns = ["--with-ns", f"network:/var/run/netns/cni-{uid}"]
    assert ctrd.containers["5" * 64] is sandbox and sandbox.image == SANDBOX  # the id podnet's CNI calls used
    assert _flag_pairs(sandbox.flags, "--with-ns") == [netns] == _flag_pairs(app.flags, "--with-ns")
    assert sandbox.labels == {"io.cri-containerd.kind": "sandbox", "io.kubernetes.pod.name": "web",
                              "io.kubernetes.pod.namespace": "default", "io.kubernetes.pod.uid": uid}  # fmt: skip
    assert app.labels["io.kubernetes.container.name"] == "c" and app.image == FLANNEL
    assert _flag_pairs(app.flags, "--log-uri") == [
        ["--log-uri", f"file:///var/log/pods/default_web_{uid}/c/0.log"]
    ]
    reasons = [e["reason"] for e in cluster.admin().get("/api/v1/namespaces/default/events")["items"]]
    assert reasons[-2:] == ["Created", "Started"]
    runs = len([c for c in ctrd.calls if c[:1] == ["run"]])
    worker.sync()  # all running: nothing started again
    assert len([c for c in ctrd.calls if c[:1] == ["run"]]) == runs
    monkeypatch.setattr(podnet, "leftover_uids", lambda: set())
    cluster.admin().call("DELETE", "/api/v1/namespaces/default/pods/web")
    worker.sync()
    assert ctrd.containers == {} and not (tmp_path / f"root/run/k8s-standin/containers/{uid}").exists()


def _flag_pairs(flags: list[str], name: str) -> list[list[str]]:
    return [flags[i : i + 2] for i in range(len(flags)) if flags[i] == name]


def test_a_container_whose_program_the_lab_image_lacks_is_left_to_the_emulation(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrd: FakeCtr
) -> None:
    cluster.add_node("w1")
    _network_ready(tmp_path, monkeypatch)
    ctrd.programs[FLANNEL] = {"/bin/sh"}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"nodeName": "w1", "containers": [{"name": "c", "image": FLANNEL, "command": ["/opt/bin/flanneld"]}]}}  # fmt: skip
    cluster.admin().call("POST", "/api/v1/namespaces/default/pods", pod)
    _worker(cluster).sync()
    assert _default_pod(cluster)["status"]["phase"] == "Running"
    assert ctrd.running("container") == [] and len(ctrd.running("sandbox")) == 1
    assert len(ctrd.containers) == 1  # the failed one removed


@pytest.mark.parametrize(("policy", "phase", "restarts"), [("Never", "Failed", 0), ("Always", "Running", 1)])
def test_an_exited_container_ends_the_pod_or_starts_again_by_its_restart_policy(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrd: FakeCtr,
    policy: str, phase: str, restarts: int,
) -> None:  # fmt: skip
    cluster.add_node("w1")
    _network_ready(tmp_path, monkeypatch)
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"nodeName": "w1", "restartPolicy": policy, "containers": [{"name": "c", "image": FLANNEL}]}}  # fmt: skip
    cluster.admin().call("POST", "/api/v1/namespaces/default/pods", pod)
    worker = _worker(cluster)
    worker.sync()
    ctrd.exit("c", 3)
    worker.sync()
    worker.sync()
    status = _default_pod(cluster)["status"]
    (c,) = status["containerStatuses"]
    assert (status["phase"], c["restartCount"]) == (phase, restarts), status
    if policy == "Never":
        assert c["state"]["terminated"]["exitCode"] == 3 and c["state"]["terminated"]["reason"] == "Error"
        assert ctrd.running("container") == [] == ctrd.running("sandbox")  # an ended pod's sandbox goes
        assert status["podIP"] == "10.244.1.2"  # its status keeps the address
        runs = len([c for c in ctrd.calls if c[:1] == ["run"]])
        _worker(cluster).sync()  # a restarted kubelet: an ended pod stays ended
        assert len([c for c in ctrd.calls if c[:1] == ["run"]]) == runs
        logs = tmp_path / "root/var/log/pods"
        assert [p.name for p in logs.glob("default_web_*/*")] == ["c"]  # kept for `kubectl logs`
        monkeypatch.setattr(podnet, "leftover_uids", lambda: set())
        cluster.admin().call("DELETE", "/api/v1/namespaces/default/pods/web")
        worker.sync()
        assert not list(logs.glob("default_web_*"))  # until the pod is deleted
    else:
        assert "running" in c["state"] and len(ctrd.running("container")) == 1
        assert _flag_pairs(ctrd.running("container")[0].flags, "--log-uri")[0][1].endswith("/c/1.log")


def test_a_sandbox_that_cannot_start_is_failed_create_pod_sandbox_with_containerds_error(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrd: FakeCtr
) -> None:
    cluster.add_node("w1")
    _network_ready(tmp_path, monkeypatch)
    ctrd.fail_run = (
        "failed to create shim task: OCI runtime create failed: runc create failed: permission denied"
    )
    _plain_pod(cluster, "w1")
    _worker(cluster).sync()
    assert _default_pod(cluster)["status"]["phase"] == "Pending"
    events = [
        (e["reason"], e["message"]) for e in cluster.admin().get("/api/v1/namespaces/default/events")["items"]
    ]
    assert ("FailedCreatePodSandBox", "Failed to create pod sandbox: rpc error: code = Unknown desc = failed to "
            f"create containerd task: {ctrd.fail_run}") in events, events  # fmt: skip
    assert ctrd.containers == {}


def test_host_path_mounts_are_made_as_the_kubelet_and_containerd_make_them(
    cluster: Cluster, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, ctrd: FakeCtr
) -> None:
    """A missing hostPath: FileOrCreate an empty file, DirectoryOrCreate and an unset type a
    directory (containerd makes any missing bind source one); each bind-mounted where it asks."""
    cluster.add_node("w1")
    _network_ready(tmp_path, monkeypatch)
    mounts = [("run", "/run/flannel", "", "/run/flannel"), ("lock", "/run/xtables.lock", "FileOrCreate", "/run/xtables.lock"),
              ("lib", "/var/lib/x", "DirectoryOrCreate", "/data")]  # fmt: skip
    c = {
        "name": "c",
        "image": FLANNEL,
        "volumeMounts": [{"name": n, "mountPath": dst} for n, _, _, dst in mounts],
    }
    vols = [{"name": n, "hostPath": {"path": p, **({"type": t} if t else {})}} for n, p, t, _ in mounts]
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "web", "namespace": "default"},
           "spec": {"nodeName": "w1", "hostNetwork": True, "containers": [c], "volumes": vols}}  # fmt: skip
    cluster.admin().call("POST", "/api/v1/namespaces/default/pods", pod)
    _worker(cluster).sync()
    root = tmp_path / "root"
    assert (root / "run/flannel").is_dir() and (root / "var/lib/x").is_dir()
    assert (root / "run/xtables.lock").is_file() and (root / "run/xtables.lock").stat().st_size == 0
    (app,) = ctrd.running("container")
    assert [f[1] for f in _flag_pairs(app.flags, "--mount")] == [
        f"type=bind,src={p},dst={dst},options=rbind:rw" for _, p, _, dst in mounts
    ]
    assert "--net-host" in app.flags and "--with-ns" not in app.flags  # hostNetwork: the node's own


def test_crictl_lists_the_pods_sandboxes_and_their_containers_apart(
    cluster: Cluster,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ctrd: FakeCtr,
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.standin.k8s_standin import crictl

    cluster.add_node("w1")
    _network_ready(tmp_path, monkeypatch)
    _plain_pod(cluster, "w1")
    _worker(cluster).sync()
    monkeypatch.setattr(crictl, "ctr", lambda ep, *a, **kw: (0, "Server:\n  Version: 1.6.20\n"))
    monkeypatch.setattr(crictl, "_apiserver_rows", lambda all_states: [])

    def run(*args: str) -> str:
        assert crictl.crictl_main(["-r", "unix:///run/containerd/containerd.sock", *args]) == 0
        return capsys.readouterr().out

    sid = "5" * 64
    assert run("pods", "--name", "^web$", "-q") == sid + "\n"
    table = run("pods").splitlines()
    assert table[0].split()[:2] == ["POD", "ID"] and table[1].split()[:4] == [
        sid[:13],
        "Ready",
        "web",
        "default",
    ]
    (app,) = [cid for cid, c in ctrd.containers.items() if c.labels["io.cri-containerd.kind"] == "container"]
    assert run("ps", "--pod", sid[:6], "-q") == app + "\n"  # the sandbox itself is not a container here
    assert run("ps", "--pod", "0" * 6, "-q") == ""
    assert run("ps").splitlines()[1].split() == [app[:13], FLANNEL, "Running", "c", "0", sid[:13]]
