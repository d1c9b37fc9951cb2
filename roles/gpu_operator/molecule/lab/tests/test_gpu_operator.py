"""gpu_operator on the lab: the release deployed with private-registry values, its CRDs, and
every image of it pulled on the GPU node."""

import json

import pytest
import yaml

HELM = "helm --kubeconfig /etc/kubernetes/admin.conf -n gpu-operator"


def _vars(host):
    return host.ansible.get_variables()


def test_release_deployed_with_private_images(host):
    v = _vars(host)
    if "masters" not in v["group_names"]:
        pytest.skip("helm runs on the master")
    rel = next(
        r for r in json.loads(host.check_output(f"{HELM} list -o json")) if r["name"] == "gpu-operator"
    )
    assert rel["status"] == "deployed"
    values = yaml.safe_load(host.file("/etc/appliance/helm/gpu-operator.values.yaml").content_string)
    assert values["operator"]["repository"].startswith(v["appliance_registry_address"] + "/")
    assert values["node-feature-discovery"]["image"]["repository"].startswith(
        v["appliance_registry_address"] + "/"
    )
    crds = host.check_output("kubectl --kubeconfig /etc/kubernetes/admin.conf get crd -o name")
    assert "clusterpolicies.nvidia.com" in crds


def test_gpu_node_holds_the_release_images(host):
    v = _vars(host)
    if "gpu_workers" not in v["group_names"]:
        pytest.skip("images are pulled ahead on the GPU nodes")
    stored = host.check_output("ctr -n k8s.io images ls -q")
    assert f"{v['appliance_registry_address']}/nvidia/gpu-operator:v24.6.2" in stored
    assert f"{v['appliance_registry_address']}/nfd/node-feature-discovery:v0.16.3" in stored
