"""The GPU Operator release's values and images (roles/gpu_operator/filter_plugins), against the
real chart: its values.yaml is read from the archive, never copied."""

from __future__ import annotations

import hashlib
import json
import tarfile
from typing import Any

import pytest
import yaml

from appliance_cli.bundle import completeness
from appliance_cli.rules.helmvalues import coalesce
from tests._support.modules import load_file
from tests._support.paths import ROOT

CHART = ROOT / "tests" / "fixtures" / "charts" / "gpu-operator-v24.6.2.tgz"
PUBLISHED_DIGEST = "99a2be4396c60ac0278dbc5bb42df12e11b9b2568875a9366328d2faa832a219"
OURS = yaml.safe_load((ROOT / "bundles" / "values" / "gpu-operator-v24.6.2.yaml").read_text())
REG = "master1:5000"
g = load_file(
    "gpu_operator_values", ROOT / "roles" / "gpu_operator" / "filter_plugins" / "gpu_operator_values.py"
)


def chart_values() -> dict[str, Any]:
    with tarfile.open(CHART) as t:
        member = t.extractfile("gpu-operator/values.yaml")
        assert member is not None
        return yaml.safe_load(member.read())


def test_the_kept_chart_is_the_published_archive() -> None:
    assert hashlib.sha256(CHART.read_bytes()).hexdigest() == PUBLISHED_DIGEST


def _repositories(node: Any, path: str = "") -> dict[str, str]:
    """Every key path with repository + image in a values tree (NFD's image as its own key)."""
    out: dict[str, str] = {}
    if isinstance(node, dict):
        if {"repository", "image"} <= node.keys():
            out[path] = str(node["repository"])
        for k, v in node.items():
            out.update(_repositories(v, f"{path}.{k}" if path else k))
    return out


def test_every_image_key_of_the_real_chart_is_overridden_to_the_private_registry() -> None:
    upstream = _repositories(chart_values())
    assert len(upstream) >= 18 and "driver" in upstream and "vgpuManager.driverManager" in upstream
    values = g.gpu_operator_values(OURS, REG)
    merged = g.coalesce(chart_values(), values)
    left = {
        k: v for k, v in _repositories(merged).items() if v and not v.startswith(f"{REG}/")
    }  # an enabled or disabled component left pointing upstream would pull from the internet if enabled
    enabled_left = {k for k in left if g._enabled(merged, k)}
    assert enabled_left == set(), left
    nfd = merged["node-feature-discovery"]["image"]["repository"]
    assert nfd == f"{REG}/nfd/node-feature-discovery"


def test_images_of_the_release_are_the_private_copies_of_what_the_profile_lists() -> None:
    prod = yaml.safe_load((ROOT / "bundles" / "profiles" / "appliance-k8s1.23.yml").read_text())
    listed = {completeness.path_of(i["reference"]) for i in prod["images"]}
    values = g.gpu_operator_values(OURS, REG, driver="container", mig_strategy="single")
    images = g.gpu_operator_images(values, chart_values(), "ubuntu20.04")
    refs = [i["reference"] for i in images]
    assert all(r.startswith(f"{REG}/") for r in refs)
    assert {r[len(REG) + 1 :] for r in refs} <= listed
    assert f"{REG}/nvidia/driver:550.90.07-ubuntu20.04" in refs
    assert f"{REG}/nvidia/cloud-native/k8s-mig-manager:v0.8.0-ubuntu20.04" in refs
    assert len(refs) == len(set(refs))  # gfd shares the device plugin's image: pulled once


def test_the_role_and_the_completeness_check_agree_on_what_is_pulled() -> None:
    """Two readers of the same chart: the bundle's completeness check and the role's pre-pull."""
    values = g.gpu_operator_values(OURS, completeness.PRIVATE, driver="container", mig_strategy="single")
    role = {i["reference"] for i in g.gpu_operator_images(values, chart_values(), completeness.NODE_OS)}
    merged = coalesce(chart_values(), OURS)  # as the completeness check merges them
    check = {
        completeness.PRIVATE + "/" + completeness.path_of(ref)
        for _, ref, _ in completeness._gpu_operator(merged, "v24.6.2", "v1.23.17")
    }
    assert role == check


@pytest.mark.parametrize("runtime", ["containerd", "docker"])
def test_default_runtime_follows_the_site(runtime: str) -> None:
    assert g.gpu_operator_values(OURS, REG, runtime=runtime)["operator"]["defaultRuntime"] == runtime


def test_driver_in_a_container_reads_the_bundle_apt_repository() -> None:
    v = g.gpu_operator_values(OURS, REG, driver="container", driver_repo_configmap="appliance-driver-repo")
    assert v["driver"]["enabled"] is True
    assert v["driver"]["repoConfig"] == {"configMapName": "appliance-driver-repo"}
    assert "osTag" not in v["driver"]  # ours, not a chart key
    refs = [i["reference"] for i in g.gpu_operator_images(v, chart_values(), "ubuntu20.04")]
    assert f"{REG}/nvidia/driver:550.90.07-ubuntu20.04" in refs
    assert f"{REG}/nvidia/cloud-native/k8s-driver-manager:v0.6.10" in refs
    with pytest.raises(g.GpuValuesError, match="OS is unknown"):
        g.gpu_operator_images(v, chart_values(), "")


def test_driver_on_the_hosts_pulls_neither_driver_nor_its_manager() -> None:
    v = g.gpu_operator_values(OURS, REG, driver="host", driver_repo_configmap="appliance-driver-repo")
    assert v["driver"]["enabled"] is False and "repoConfig" not in v["driver"]
    refs = " ".join(i["reference"] for i in g.gpu_operator_images(v, chart_values(), ""))
    assert "/driver:" not in refs and "k8s-driver-manager" not in refs


def test_the_open_stack_leaves_nvidia_gpu_to_hamis_device_plugin() -> None:
    """Two device plugins must not both register nvidia.com/gpu: with HAMi the operator's is off
    (its DaemonSet not deployed); the role's default follows the site's scheduler stack."""
    off = g.gpu_operator_values(OURS, REG, device_plugin=False)
    assert off["devicePlugin"]["enabled"] is False
    keys = {i["key"] for i in g.gpu_operator_images(off, chart_values(), "ubuntu20.04")}
    assert "devicePlugin" not in keys and "gfd" in keys  # GFD's image is the same repository: still pulled
    on = g.gpu_operator_values(OURS, REG)
    assert on["devicePlugin"]["enabled"] is True
    assert "devicePlugin" in {i["key"] for i in g.gpu_operator_images(on, chart_values(), "ubuntu20.04")}
    defaults = yaml.safe_load((ROOT / "roles" / "gpu_operator" / "defaults" / "main.yml").read_text())
    assert defaults["gpu_operator_device_plugin"] == "{{ appliance_scheduler_stack != 'open' }}"


def test_mig_none_keeps_gpus_whole_and_fixed_profiles_deploy_mig_manager() -> None:
    none = g.gpu_operator_values(OURS, REG, mig_strategy="none")
    assert none["mig"] == {"strategy": "none"} and none["migManager"]["enabled"] is False
    refs = " ".join(i["reference"] for i in g.gpu_operator_images(none, chart_values(), "ubuntu20.04"))
    assert "k8s-mig-manager" not in refs
    mixed = g.gpu_operator_values(OURS, REG, mig_strategy="mixed")
    assert mixed["mig"] == {"strategy": "mixed"} and mixed["migManager"]["enabled"] is True
    with pytest.raises(g.GpuValuesError, match=r"gpu\.mig\.strategy: 'dynamic'"):
        g.gpu_operator_values(OURS, REG, mig_strategy="dynamic")


def test_values_without_a_version_or_repository_are_refused_naming_the_key() -> None:
    bad = yaml.safe_load(yaml.safe_dump(OURS))
    del bad["validator"]["version"]
    with pytest.raises(g.GpuValuesError, match=r"validator\.version is not set"):
        g.gpu_operator_images(g.gpu_operator_values(bad, REG), chart_values(), "ubuntu20.04")
    bad = yaml.safe_load(yaml.safe_dump(OURS))
    bad["node-feature-discovery"]["image"].pop("tag")
    with pytest.raises(g.GpuValuesError, match=r"node-feature-discovery\.image\.repository and \.tag"):
        g.gpu_operator_images(g.gpu_operator_values(bad, REG), chart_values(), "ubuntu20.04")


def test_private_repository_keeps_the_upstream_path() -> None:
    assert g.private_repository("nvcr.io/nvidia/cloud-native", REG) == f"{REG}/nvidia/cloud-native"
    assert g.private_repository("registry.k8s.io/nfd/nfd", REG) == f"{REG}/nfd/nfd"
    assert g.private_repository("projecthami/hami", REG) == f"{REG}/projecthami/hami"


def _node(name: str, gpus: str | None) -> dict[str, Any]:
    alloc = {"cpu": "2"} | ({"nvidia.com/gpu": gpus} if gpus is not None else {})
    return {"metadata": {"name": name}, "status": {"allocatable": alloc}}


def test_gpu_shortfall_names_each_node_and_both_counts() -> None:
    nodes = json.dumps({"items": [_node("worker1", "4"), _node("worker2", "6"), _node("worker3", None)]})
    want = {"worker1": 4, "worker2": 8, "worker3": 2, "worker4": 1}
    assert g.gpu_shortfall(nodes, want, ["worker4"]) == [
        "worker2: nvidia.com/gpu allocatable 6, its hardware class has 8",
        "worker3: nvidia.com/gpu allocatable 0, its hardware class has 2",
    ]
    assert g.gpu_shortfall(nodes, {"worker1": 4}) == []
    assert g.gpu_shortfall(nodes, {"gone": 1}) == ["gone: not a node of the cluster"]


def test_container_nodes_and_their_warnings() -> None:
    hv = {
        "w1": {"ansible_facts": {"virtualization_type": "systemd-nspawn", "virtualization_role": "guest"}},
        "w2": {"ansible_facts": {"virtualization_type": "kvm", "virtualization_role": "host"}},
        "w3": {},
    }
    nodes = g.container_nodes(["w1", "w2", "w3"], hv, ["systemd-nspawn", "lxc"])
    assert nodes == ["w1"]
    assert g.container_warnings(nodes, {"w1": 4}) == [
        "w1: nvidia.com/gpu allocatable not checked: a container node has no GPUs (its hardware class expects 4)"
    ]


def test_missing_headers_names_the_node_and_kernel() -> None:
    results = [
        {"item": "gpu1", "stdout_lines": ["5.4.0-150.167", "5.4.0-150-generic"]},
        {"item": "gpu2", "stdout_lines": ["(none)", "5.4.0-200-generic"]},
        {"item": "gpu3", "stdout_lines": ["5.15.0-1-generic"]},
        {"item": "gpu4", "skipped": True},
    ]
    assert g.missing_headers(results) == [
        "gpu2: linux-headers-5.4.0-200-generic",
        "gpu3: linux-headers-5.15.0-1-generic",
    ]


def test_node_os_name_is_the_operator_suffix() -> None:
    assert g.node_os_name({"distribution": "Ubuntu", "distribution_version": "20.04"}) == "ubuntu20.04"
    assert g.node_os_name({}) == ""


def _prereqs(keyring: str) -> list:
    from pathlib import Path

    import jinja2

    src = (
        Path(__file__).resolve().parents[2]
        / "roles/gpu_operator/templates/etc/kubernetes/addons/gpu-operator-prereqs.yml.j2"
    ).read_text()
    text = jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(src).render(
        gpu_operator_driver="container",
        gpu_operator_namespace="gpu-operator",
        gpu_operator_driver_repo_configmap="repo-config",
        gpu_operator_pull_node="master1",
        hostvars={"master1": {"appliance_apt_repo_url": "http://10.0.0.1:8081/apt/ubuntu-focal/",
                              "appliance_apt_keyring": keyring}},
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(text) if d]


def test_the_driver_containers_apt_reads_the_bundle_with_its_key_only():
    key = "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmDMEZ0\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n"
    cm = _prereqs(key)[1]
    assert cm["data"]["custom-repo.list"] == (
        "deb [signed-by=/etc/apt/sources.list.d/appliance-offline.asc] http://10.0.0.1:8081/apt/ubuntu-focal/ ./\n"
    )
    assert cm["data"]["appliance-offline.asc"] == key
    assert "trusted=yes" not in str(cm)


def test_a_site_with_its_own_nfd_gets_none_from_the_chart() -> None:
    """gpu.nfd: false (the site runs Node Feature Discovery already): the chart's nfd.enabled is
    false, so neither its NFD subchart nor NFD's image is deployed or pulled."""
    off = g.gpu_operator_values(OURS, REG, nfd=False)
    assert off["nfd"]["enabled"] is False
    keys = {i["key"] for i in g.gpu_operator_images(off, chart_values(), "ubuntu20.04")}
    assert "node-feature-discovery.image" not in keys
    on = g.gpu_operator_values(OURS, REG)
    assert on["nfd"]["enabled"] is True
    assert "node-feature-discovery.image" in {
        i["key"] for i in g.gpu_operator_images(on, chart_values(), "ubuntu20.04")
    }
    defaults = yaml.safe_load((ROOT / "roles" / "gpu_operator" / "defaults" / "main.yml").read_text())
    assert defaults["gpu_operator_nfd"] == "{{ appliance_gpu_nfd }}"
