"""The GPU platform layer on the installed lab: helm from the bundle, the GPU Operator release with
the appliance's values (every image from the private registry, each pulled ahead on a GPU node
through containerd), its CRDs, the values kept on the master; uninstall and reinstall; and the
refusals that must come before anything changes (an image the values need missing from the
registry, the driver container without its kernel's headers in the bundle)."""

from __future__ import annotations

import contextlib
import json
import shlex
from collections.abc import Iterator

import pytest
import yaml

from tests._support.modules import load_file
from tests._support.paths import ROOT

pytestmark = pytest.mark.usefixtures("installs")
g = load_file(
    "gpu_operator_values_e2e", ROOT / "roles" / "gpu_operator" / "filter_plugins" / "gpu_operator_values.py"
)
NS = "gpu-operator"


def _helm(site, hosts, *args: str) -> str:
    return hosts[site.master.name].check_output(
        shlex.join(["helm", "--kubeconfig", "/etc/kubernetes/admin.conf", *args])
    )


def _kubectl(site, hosts, *args: str) -> str:
    return hosts[site.master.name].check_output(
        shlex.join(["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", *args])
    )


def _release(site, hosts) -> dict:
    releases = json.loads(_helm(site, hosts, "-n", NS, "list", "-o", "json"))
    return next(r for r in releases if r["name"] == "gpu-operator")


def _revisions(site, hosts) -> int:
    return len(json.loads(_helm(site, hosts, "-n", NS, "history", "gpu-operator", "-o", "json")))


def test_helm_installed_from_the_bundle(site, hosts):
    out = hosts[site.master.name].check_output("helm version --short")
    assert out.startswith("v3.14.4")


def test_the_release_has_the_appliance_values(site, hosts):
    rel = _release(site, hosts)
    assert rel["status"] == "deployed" and rel["chart"] == "gpu-operator-v24.6.2"
    values = json.loads(_helm(site, hosts, "-n", NS, "get", "values", "gpu-operator", "-o", "json"))
    repos = [comp["repository"] for _, comp in g._components(values)]
    repos.append(values["node-feature-discovery"]["image"]["repository"])
    assert len(repos) >= 10 and all(r.startswith(f"{site.registry.address}/") for r in repos), repos
    assert values["operator"]["defaultRuntime"] == site.kubernetes.container_runtime
    assert values["driver"]["enabled"] is (site.gpu.driver == "container")
    assert values["mig"] == {"strategy": site.gpu.mig.strategy}
    # kept on the master, readable by root only: what an upgrade starts from
    kept = hosts[site.master.name].file("/etc/appliance/helm/gpu-operator.values.yaml")
    assert kept.mode == 0o600 and kept.user == "root"
    assert yaml.safe_load(kept.content_string) == values


def test_the_chart_crds_are_installed(site, hosts):
    crds = _kubectl(site, hosts, "get", "crd", "-o", "name").split()
    for crd in ("clusterpolicies.nvidia.com", "nvidiadrivers.nvidia.com", "nodefeaturerules.nfd.k8s-sigs.io"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{crd}" in crds


def test_every_image_of_the_release_was_pulled_on_a_gpu_node(site, hosts):
    master = hosts[site.master.name]
    values = yaml.safe_load(master.file("/etc/appliance/helm/gpu-operator.values.yaml").content_string)
    chart = yaml.safe_load(
        master.check_output("helm show values /var/lib/appliance/charts/gpu-operator-v24.6.2.tgz")
    )
    images = [i["reference"] for i in g.gpu_operator_images(values, chart, "")]
    assert len(images) >= 7
    gpu_node = next(n.name for n in site.nodes if "gpu-worker" in n.roles)
    stored = set(hosts[gpu_node].check_output("ctr -n k8s.io images ls -q").split())
    assert set(images) <= stored, sorted(set(images) - stored)


def test_container_gpu_nodes_are_reported_not_passed(site, installs):
    """The lab's GPU workers are containers: the allocatable check is a warning naming each."""
    if site.source and "labs" not in str(site.source):
        pytest.skip("a real site checks nvidia.com/gpu allocatable instead")
    out = installs[0].out + installs[0].err
    for n in (n for n in site.nodes if "gpu-worker" in n.roles):
        assert f"{n.name}: nvidia.com/gpu allocatable not checked: a container node has no GPUs" in out, (
            n.name
        )


def test_uninstall_and_reinstall(site, hosts, cli):
    _helm(site, hosts, "-n", NS, "uninstall", "gpu-operator")
    assert "gpu-operator" not in _helm(site, hosts, "-n", NS, "list", "-q")
    again = cli("install", "--site", str(site.site_dir), "--tags", "gpu_operator")
    assert again.rc == 0, again.err[-2000:]
    assert _release(site, hosts)["status"] == "deployed"
    noop = cli("install", "--site", str(site.site_dir), "--tags", "gpu_operator")
    assert noop.rc == 0 and all(r["changed"] == 0 for r in noop.recap.values()), noop.out[-2000:]


@contextlib.contextmanager
def _site_gpu(site, gpu: dict) -> Iterator[None]:
    """The lab's site config with another gpu: section while the block runs."""
    path = site.site_dir / "appliance.yml"
    original = path.read_text()
    data = yaml.safe_load(original)
    data["gpu"] = gpu
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        yield
    finally:
        path.write_text(original)


def test_an_image_missing_from_the_registry_is_named_before_helm_runs(site, hosts, cli):
    """Fixed MIG profiles need mig-manager, whose image the lab bundle lacks: one line naming it,
    and the release untouched."""
    if "labs" not in str(site.source):
        pytest.skip("needs the lab bundle, which lacks the mig-manager image on purpose")
    before = _revisions(site, hosts)
    gz2 = next(n for n in site.nodes if site.hardware_classes[n.hardware_class].gpu_total)
    with _site_gpu(
        site,
        {"driver": "host", "mig": {"strategy": "single", "profiles": {gz2.hardware_class: "all-1g.10gb"}}},
    ):
        run = cli("install", "--site", str(site.site_dir), "--tags", "gpu_operator")
    assert run.rc == 5, run.out[-2000:]
    assert "could not pull 1 image(s) of the GPU Operator release" in run.err
    assert f"{site.registry.address}/nvidia/cloud-native/k8s-mig-manager:v0.8.0-ubuntu20.04" in run.err
    assert _revisions(site, hosts) == before


def test_the_driver_container_without_its_kernel_headers_is_refused(site, hosts, cli):
    """The driver container compiles against linux-headers-$(uname -r): the lab's bundle has no
    headers for the host's kernel, so each GPU node is named with its kernel, nothing installed."""
    if "labs" not in str(site.source):
        pytest.skip("needs the lab bundle, which carries no kernel headers")
    before = _revisions(site, hosts)
    kernel = hosts[site.master.name].check_output("uname -r")
    with _site_gpu(site, {"driver": "container"}):
        run = cli("install", "--site", str(site.site_dir), "--tags", "gpu_operator")
    assert run.rc == 5, run.out[-2000:]
    gpu_nodes = [n.name for n in site.nodes if "gpu-worker" in n.roles]
    assert "which the bundle's apt repository lacks for: " + "; ".join(
        f"{n}: linux-headers-{kernel}" for n in gpu_nodes
    ) in " ".join(run.err.split())
    assert _revisions(site, hosts) == before
