"""scheduler_stack on the lab (scheduler.stack: open): HAMi and Volcano deployed with
private-registry values, Volcano's CRDs, one queue per project, and every image of both releases
pulled on the GPU node."""

import json

import pytest
import yaml

KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"
HELM = "helm --kubeconfig /etc/kubernetes/admin.conf"


def _vars(host):
    v = host.ansible.get_variables()
    if v.get("appliance_scheduler_stack") != "open":
        pytest.skip("the lab site runs another scheduler stack")
    return v


def test_releases_deployed_with_private_images(host):
    v = _vars(host)
    if "masters" not in v["group_names"]:
        pytest.skip("helm runs on the master")
    reg = v["appliance_registry_address"] + "/"
    for ns, name in (("kube-system", "hami"), ("volcano-system", "volcano")):
        rel = next(
            r for r in json.loads(host.check_output(f"{HELM} -n {ns} list -o json")) if r["name"] == name
        )
        assert rel["status"] == "deployed", rel
    hami = yaml.safe_load(host.file("/etc/appliance/helm/hami.values.yaml").content_string)
    assert hami["scheduler"]["kubeScheduler"]["image"].startswith(reg)
    assert hami["scheduler"]["patch"]["imageNew"].startswith(reg)
    volcano = yaml.safe_load(host.file("/etc/appliance/helm/volcano.values.yaml").content_string)
    assert volcano["basic"]["scheduler_image_name"].startswith(reg)
    crds = host.check_output(f"{KUBECTL} get crd -o name")
    assert "queues.scheduling.volcano.sh" in crds and "podgroups.scheduling.volcano.sh" in crds


def test_one_queue_per_project(host):
    v = _vars(host)
    if "masters" not in v["group_names"]:
        pytest.skip("kubectl runs on the master")
    queues = {
        q["metadata"]["name"]: q["spec"]
        for q in json.loads(host.check_output(f"{KUBECTL} get queues.scheduling.volcano.sh -o json"))["items"]
    }
    for p in v["appliance_scheduler_projects"]:
        assert float(queues[p["name"]]["deserved"]["nvidia.com/gpu"]) == float(p["gpus"]), p


def test_gpu_node_holds_the_release_images(host):
    v = _vars(host)
    if "gpu_workers" not in v["group_names"]:
        pytest.skip("images are pulled ahead on the GPU nodes")
    stored = host.check_output("ctr -n k8s.io images ls -q")
    reg = v["appliance_registry_address"]
    for image in (
        "projecthami/hami:v2.4.1",
        "liangjw/kube-webhook-certgen:v1.1.1",
        "volcanosh/vc-scheduler:v1.9.0",
    ):
        assert f"{reg}/{image}" in stored, image
