"""The open scheduler stack's filters (roles/scheduler_stack/filter_plugins/scheduler_open.py):
HAMi's and Volcano's values against the real HAMi chart (read from the archive) and Volcano
1.9.0's values.yaml (the test chart carries upstream's file byte for byte), and the Volcano
queues of the site's projects."""

from __future__ import annotations

import hashlib
import json
import tarfile
from typing import Any

import pytest
import yaml

from appliance_cli.bundle import completeness
from tests._support.modules import load_file
from tests._support.paths import ROOT

CHARTS = ROOT / "tests" / "fixtures" / "charts"
HAMI = CHARTS / "hami-2.4.1.tgz"
HAMI_DIGEST = "a9151a78340c06525b9071bef1f0f24cf52bddc3aa5f20d3045310449b37657a"
VOLCANO = CHARTS / "volcano"
HAMI_OURS = yaml.safe_load((ROOT / "bundles" / "values" / "hami-2.4.1.yaml").read_text())
VOLCANO_OURS = yaml.safe_load((ROOT / "bundles" / "values" / "volcano-1.9.0.yaml").read_text())
REG = "master1:5000"
SELECTOR = {"node-role.kubernetes.io/runai-gpu-worker": "true"}
s = load_file("scheduler_open", ROOT / "roles" / "scheduler_stack" / "filter_plugins" / "scheduler_open.py")


def hami_chart() -> dict[str, Any]:
    with tarfile.open(HAMI) as t:
        member = t.extractfile("hami/values.yaml")
        assert member is not None
        return yaml.safe_load(member.read())


def hami_template(name: str) -> str:
    with tarfile.open(HAMI) as t:
        member = t.extractfile(f"hami/templates/{name}")
        assert member is not None
        return member.read().decode()


def volcano_chart() -> dict[str, Any]:
    return yaml.safe_load((VOLCANO / "values.yaml").read_text())


def test_the_kept_hami_chart_is_the_published_archive() -> None:
    assert hashlib.sha256(HAMI.read_bytes()).hexdigest() == HAMI_DIGEST


def test_the_hami_templates_read_the_keys_the_filter_moves() -> None:
    """What the role relies on, read from the real 2.4.1 templates (not remembered)."""
    deploy = hami_template("scheduler/deployment.yaml")
    assert (
        "image: {{ .Values.scheduler.kubeScheduler.image }}:{{ .Capabilities.KubeVersion.Version }}" in deploy
    )
    assert "image: {{ .Values.scheduler.extender.image }}:{{ .Values.version }}" in deploy
    job = hami_template("scheduler/job-patch/job-createSecret.yaml")
    assert "image: {{ .Values.scheduler.patch.imageNew }}" in job
    ds = hami_template("device-plugin/daemonsetnvidia.yaml")
    assert "image: {{ .Values.devicePlugin.image }}:{{ .Values.version }}" in ds
    assert "nodeSelector: {{ toYaml .Values.devicePlugin.nvidianodeSelector" in ds
    assert hami_chart()["devicePlugin"]["nvidianodeSelector"] == {"gpu": "on"}
    assert "imageTag" not in hami_chart()["scheduler"]["kubeScheduler"]  # 2.4.1 tags with the cluster


def test_hami_values_move_every_image_to_the_private_registry() -> None:
    values = s.hami_values(HAMI_OURS, REG, SELECTOR)
    for key in s.HAMI_IMAGE_KEYS:
        node: Any = values
        for part in key.split("."):
            node = node[part]
        assert node.startswith(f"{REG}/"), (key, node)
    assert values["scheduler"]["kubeScheduler"]["image"] == f"{REG}/kube-scheduler"
    assert values["scheduler"]["patch"]["imageNew"] == f"{REG}/liangjw/kube-webhook-certgen:v1.1.1"
    assert values["devicePlugin"]["nvidianodeSelector"] == SELECTOR
    assert HAMI_OURS["scheduler"]["kubeScheduler"]["image"] == "registry.k8s.io/kube-scheduler"  # not mutated


def test_hami_images_over_the_real_chart_on_1_23() -> None:
    images = s.hami_images(s.hami_values(HAMI_OURS, REG, SELECTOR), hami_chart(), "v1.23.17")
    assert images == [
        f"{REG}/kube-scheduler:v1.23.17",  # the control plane's own image, tagged as the cluster
        f"{REG}/projecthami/hami:v2.4.1",
        f"{REG}/liangjw/kube-webhook-certgen:v1.1.1",
    ]
    assert s.outside_registry(images, REG) == []
    # below 1.22 the jobs take scheduler.patch.image
    assert f"{REG}/liangjw/kube-webhook-certgen:v1.1.1" in s.hami_images(
        s.hami_values(HAMI_OURS, REG, SELECTOR), hami_chart(), "v1.21.0"
    )


def test_the_chart_defaults_alone_would_leave_the_registry() -> None:
    images = s.hami_images({}, hami_chart(), "v1.23.17")
    assert "registry.cn-hangzhou.aliyuncs.com/google_containers/kube-scheduler:v1.23.17" in images
    assert s.outside_registry(images, REG) == images


def test_hami_values_without_an_image_key_are_refused() -> None:
    broken = json.loads(json.dumps(HAMI_OURS))
    del broken["scheduler"]["patch"]["imageNew"]
    with pytest.raises(s.SchedulerValuesError, match=r"scheduler\.patch\.imageNew is not set"):
        s.hami_values(broken, REG, SELECTOR)
    with pytest.raises(s.SchedulerValuesError, match="node selector is empty"):
        s.hami_values(HAMI_OURS, REG, {})


def test_volcano_values_are_the_real_1_9_keys() -> None:
    """1.9.0 has no basic.image_registry (1.10.0 added it): the names carry the registry."""
    chart = volcano_chart()["basic"]
    assert "image_registry" not in chart
    assert set(VOLCANO_OURS["basic"]) <= set(chart), set(VOLCANO_OURS["basic"]) - set(chart)
    values = s.volcano_values(VOLCANO_OURS, REG)
    images = s.volcano_images(values, volcano_chart())
    assert images == [
        f"{REG}/volcanosh/vc-controller-manager:v1.9.0",
        f"{REG}/volcanosh/vc-scheduler:v1.9.0",
        f"{REG}/volcanosh/vc-webhook-manager:v1.9.0",
    ]
    assert values["basic"]["image_pull_policy"] == "IfNotPresent"
    assert s.volcano_images({}, volcano_chart())[0] == "volcanosh/vc-controller-manager:v1.9.0"  # docker.io


def test_private_image_follows_dockers_host_rule() -> None:
    assert s.private_image("projecthami/hami", REG) == f"{REG}/projecthami/hami"
    assert s.private_image("docker.io/projecthami/hami", REG) == f"{REG}/projecthami/hami"
    assert s.private_image("registry.k8s.io/kube-scheduler", REG) == f"{REG}/kube-scheduler"
    assert s.private_image("busybox", REG) == f"{REG}/library/busybox"


def test_the_profiles_hold_every_image_the_values_pull() -> None:
    """The production and lab profiles list each image the releases pull (upstream names)."""
    from appliance_cli.bundle.profile import load_profile

    pulled = s.hami_images(HAMI_OURS, hami_chart(), "v1.23.17") + s.volcano_images(
        VOLCANO_OURS, volcano_chart()
    )
    pulled = [completeness._normalize(i) for i in pulled]
    for name in ("appliance-k8s1.23", "lab"):
        refs = {i.reference for i in load_profile(name).images}
        assert set(pulled) <= refs, (name, set(pulled) - refs)


def test_completeness_reads_volcano_1_9_image_names() -> None:
    pulls = list(completeness._volcano(VOLCANO_OURS, "0.1", "v1.23.17"))
    assert [p[1] for p in pulls] == [
        "docker.io/volcanosh/vc-controller-manager:v1.9.0",
        "docker.io/volcanosh/vc-scheduler:v1.9.0",
        "docker.io/volcanosh/vc-webhook-manager:v1.9.0",
    ]
    assert [p[2] for p in pulls] == [p[0] for p in pulls]  # each name overridden by our values


# ---- queues -----------------------------------------------------------------------------------------
LAB_PROJECTS = [
    {"name": "team-a", "gpus": 4, "department": "default", "over_quota": True},
    {"name": "team-b", "gpus": 2, "department": "default", "over_quota": True},
    {"name": "team-c", "gpus": 2, "department": "default", "over_quota": False},
    {"name": "team-d", "gpus": 4, "department": "research", "over_quota": True},
]


def test_one_queue_per_project_with_its_quota() -> None:
    qs = {q["metadata"]["name"]: q for q in s.queues(LAB_PROJECTS, 12)}
    assert list(qs) == ["team-a", "team-b", "team-c", "team-d"]
    a = qs["team-a"]
    assert a["apiVersion"] == "scheduling.volcano.sh/v1beta1" and a["kind"] == "Queue"
    assert a["spec"] == {
        "weight": 4,
        "reclaimable": True,
        "deserved": {"nvidia.com/gpu": 4},
        "capability": {"nvidia.com/gpu": 12},  # over quota: up to the site's GPUs
    }
    assert qs["team-c"]["spec"]["capability"] == {"nvidia.com/gpu": 2}  # no over quota: capped
    assert qs["team-c"]["spec"]["reclaimable"] is False
    assert qs["team-d"]["metadata"]["labels"] == {
        "app.kubernetes.io/managed-by": "appliance",
        "appliance.io/project": "team-d",
        "appliance.io/department": "research",
    }


def test_fractional_and_zero_quotas() -> None:
    q = s.queues([{"name": "tiny", "gpus": 0.5, "over_quota": False}, {"name": "none", "gpus": 0}], 8)
    assert q[0]["spec"]["deserved"] == {"nvidia.com/gpu": "0.5"} and q[0]["spec"]["weight"] == 1
    assert q[1]["spec"]["weight"] == 1  # Volcano refuses weight 0
    assert q[1]["spec"]["capability"] == {"nvidia.com/gpu": 8}


def test_the_queues_match_the_real_crd_schema() -> None:
    crd = yaml.safe_load((VOLCANO / "crds" / "scheduling.volcano.sh_queues.yaml").read_text())
    version = crd["spec"]["versions"][0]
    assert crd["spec"]["group"] + "/" + version["name"] == s.QUEUE_API and crd["spec"]["scope"] == "Cluster"
    spec_schema = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    for q in s.queues(LAB_PROJECTS, 12):
        for key, value in q["spec"].items():
            assert key in spec_schema, key
            want = spec_schema[key].get("type")
            if want == "object":
                assert isinstance(value, dict)
            elif want == "integer":
                assert isinstance(value, int) and value > 0
            elif want == "boolean":
                assert isinstance(value, bool)


def _live(queues: list[dict[str, Any]], **status: Any) -> str:
    items = json.loads(json.dumps(queues))
    for i in items:
        i.setdefault("status", status)
    return json.dumps({"kind": "QueueList", "items": items})


def test_plan_applies_only_what_differs() -> None:
    wanted = s.queues(LAB_PROJECTS, 12)
    assert s.queue_plan("", wanted) == {"apply": ["team-a", "team-b", "team-c", "team-d"], "stale": []}
    assert s.queue_plan(_live(wanted), wanted) == {"apply": [], "stale": []}
    # what Volcano's webhook adds, and a quantity written as a string, are not differences
    live = json.loads(_live(wanted))
    live["items"][0]["spec"]["guarantee"] = {}
    live["items"][0]["spec"]["deserved"]["nvidia.com/gpu"] = "4"
    live["items"].append({"metadata": {"name": "default"}, "spec": {"weight": 1}})
    assert s.queue_plan(json.dumps(live), wanted) == {"apply": [], "stale": []}
    # another quota, or a lost label, is
    live["items"][1]["spec"]["deserved"]["nvidia.com/gpu"] = 3
    del live["items"][2]["metadata"]["labels"]["appliance.io/project"]
    assert s.queue_plan(json.dumps(live), wanted)["apply"] == ["team-b", "team-c"]


def test_stale_queues_are_ours_only() -> None:
    old = s.queues([*LAB_PROJECTS, {"name": "team-e", "gpus": 1}], 12)
    live = json.loads(_live(old))
    live["items"].append({"metadata": {"name": "default", "labels": {}}, "spec": {"weight": 1}})
    assert s.queue_plan(json.dumps(live), s.queues(LAB_PROJECTS, 12)) == {"apply": [], "stale": ["team-e"]}
    # a project once named `default` adopted Volcano's queue: gone from the site, it stays
    live = json.loads(_live(s.queues([{"name": "default", "gpus": 1}], 12)))
    assert s.queue_plan(json.dumps(live), [])["stale"] == []


def test_stale_queues_in_use_are_kept_with_a_warning() -> None:
    live = _live(s.queues([{"name": "team-e", "gpus": 1}, {"name": "team-f", "gpus": 1}], 12))
    pgs = json.dumps(
        {"items": [{"metadata": {"namespace": "ml", "name": "job-1"}, "spec": {"queue": "team-e"}},
                   {"metadata": {"namespace": "ml", "name": "job-2"}, "spec": {"queue": "default"}}]}
    )  # fmt: skip
    users = s.queue_users(["team-e", "team-f"], pgs, live)
    assert users == {"team-e": ["ml/job-1"]}  # team-f is unused: deleted
    warnings = s.queue_warnings(users)
    assert warnings == [
        "queue team-e: its project is no longer in the site config, but it is kept (ml/job-1); "
        "a later run deletes it once no PodGroup uses it"
    ]
    running = _live(s.queues([{"name": "team-f", "gpus": 1}], 12), running=2)
    assert s.queue_users(["team-f"], "{}", running) == {"team-f": ["status: running 2, pending 0, inqueue 0"]}
    assert list(s.queue_users(["team-f"], "{}", live, delete=False)) == ["team-f"]


def test_filters_are_registered() -> None:
    names = s.FilterModule().filters()
    assert {"scheduler_open_hami_values", "scheduler_open_queues", "scheduler_open_queue_plan"} <= set(names)


def test_the_device_plugin_selects_the_label_node_roles_writes():
    """HAMi's device plugin goes where node_roles puts the gpu-worker label (K1: runai-gpu-worker)."""
    node_roles = yaml.safe_load((ROOT / "roles" / "node_roles" / "defaults" / "main.yml").read_text())
    stack = yaml.safe_load((ROOT / "roles" / "scheduler_stack" / "defaults" / "main.yml").read_text())
    gpu_label = node_roles["node_roles_role_labels"]["gpu-worker"]
    assert stack["scheduler_stack_hami_node_selector"] == {gpu_label: "true"}
