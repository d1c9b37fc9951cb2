"""The open scheduler stack on the installed lab (scheduler.stack: open): the HAMi and Volcano
releases with the appliance's values (every image from the private registry, each pulled ahead on
a GPU node through containerd), HAMi's device plugin on the gpu-workers only, Volcano's CRDs, one
queue per project with the site's quotas, no change on the second install; and a project removed
from the site: its queue deleted when unused, kept with a warning while a PodGroup uses it."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator

import pytest
import yaml

from tests._support.modules import load_file
from tests._support.paths import ROOT

pytestmark = pytest.mark.usefixtures("installs")
s = load_file(
    "scheduler_open_e2e", ROOT / "roles" / "scheduler_stack" / "filter_plugins" / "scheduler_open.py"
)
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf "
HELM = "helm --kubeconfig /etc/kubernetes/admin.conf "
RELEASES = {"hami": ("kube-system", "hami-2.4.1"), "volcano": ("volcano-system", "volcano-1.9.0")}


@pytest.fixture(scope="module", autouse=True)
def _open_stack(site):
    if site.scheduler.stack != "open":
        pytest.skip(f"scheduler.stack is {site.scheduler.stack}, not open")


def _master(site, hosts):
    return hosts[site.master.name]


def _values(site, hosts, release: str) -> dict:
    ns = RELEASES[release][0]
    return json.loads(_master(site, hosts).check_output(HELM + f"-n {ns} get values {release} -o json"))


def _queues(site, hosts) -> dict[str, dict]:
    out = _master(site, hosts).check_output(KUBECTL + "get queues.scheduling.volcano.sh -o json")
    return {i["metadata"]["name"]: i for i in json.loads(out)["items"]}


def test_both_releases_are_deployed_with_the_appliance_values(site, hosts):
    master = _master(site, hosts)
    for release, (ns, chart) in RELEASES.items():
        rels = json.loads(master.check_output(HELM + f"-n {ns} list -o json"))
        rel = next(r for r in rels if r["name"] == release)
        assert rel["status"] == "deployed" and rel["chart"] == chart, rel
        kept = master.file(f"/etc/appliance/helm/{release}.values.yaml")
        assert kept.mode == 0o600 and yaml.safe_load(kept.content_string) == _values(site, hosts, release)
    reg = site.registry.address
    hami = _values(site, hosts, "hami")
    assert hami["scheduler"]["kubeScheduler"]["image"] == f"{reg}/kube-scheduler"
    assert hami["scheduler"]["patch"]["imageNew"] == f"{reg}/liangjw/kube-webhook-certgen:v1.1.1"
    assert hami["devicePlugin"]["image"] == f"{reg}/projecthami/hami"
    basic = _values(site, hosts, "volcano")["basic"]
    assert [basic[f"{p}_image_name"] for p in ("controller", "scheduler", "admission")] == [
        f"{reg}/volcanosh/vc-controller-manager",
        f"{reg}/volcanosh/vc-scheduler",
        f"{reg}/volcanosh/vc-webhook-manager",
    ]


def test_every_image_of_both_releases_was_pulled_on_a_gpu_node(site, hosts):
    master = _master(site, hosts)
    version = site.kubernetes.version
    chart = yaml.safe_load(master.check_output("helm show values /var/lib/appliance/charts/hami-2.4.1.tgz"))
    images = s.hami_images(_values(site, hosts, "hami"), chart, version)
    images += s.volcano_images(_values(site, hosts, "volcano"))
    assert f"{site.registry.address}/kube-scheduler:{version}" in images  # tagged as the cluster
    assert len(images) == 6 and not s.outside_registry(images, site.registry.address), images
    gpu_node = next(n.name for n in site.nodes if "gpu-worker" in n.roles)
    stored = set(hosts[gpu_node].check_output("ctr -n k8s.io images ls -q").split())
    assert set(images) <= stored, sorted(set(images) - stored)


def test_the_device_plugin_selects_the_gpu_workers_only(site, hosts):
    selector = _values(site, hosts, "hami")["devicePlugin"]["nvidianodeSelector"]
    nodes = json.loads(_master(site, hosts).check_output(KUBECTL + "get nodes -o json"))["items"]
    selected = {
        n["metadata"]["name"]
        for n in nodes
        if all(n["metadata"].get("labels", {}).get(k) == v for k, v in selector.items())
    }
    assert selected == {n.name for n in site.nodes if "gpu-worker" in n.roles}


def test_volcano_crds_are_installed(site, hosts):
    crds = _master(site, hosts).check_output(KUBECTL + "get crd -o name").split()
    for crd in ("queues.scheduling.volcano.sh", "podgroups.scheduling.volcano.sh"):
        assert f"customresourcedefinition.apiextensions.k8s.io/{crd}" in crds


def test_one_queue_per_project_with_its_quota(site, hosts):
    queues = _queues(site, hosts)
    gpus = sum(
        site.hardware_classes[n.hardware_class].gpu_total for n in site.nodes if "gpu-worker" in n.roles
    )
    assert site.scheduler.projects
    for p in site.scheduler.projects:
        q = queues[p.name]
        assert q["metadata"]["labels"]["appliance.io/project"] == p.name
        spec = q["spec"]
        assert float(spec["deserved"]["nvidia.com/gpu"]) == p.gpus, (p.name, spec)
        assert float(spec["capability"]["nvidia.com/gpu"]) == (gpus if p.over_quota else p.gpus), (
            p.name,
            spec,
        )
        assert spec["reclaimable"] is p.over_quota and spec["weight"] >= 1


def test_the_second_install_changed_nothing(installs):
    assert len(installs) == 2 and installs[1].rc == 0, installs[-1].err[-2000:]
    assert all(r["changed"] == 0 for r in installs[1].recap.values()), installs[1].recap


@contextlib.contextmanager
def _without_project(site, name: str) -> Iterator[None]:
    path = site.site_dir / "appliance.yml"
    original = path.read_text()
    data = yaml.safe_load(original)
    data["scheduler"]["projects"] = [p for p in data["scheduler"]["projects"] if p["name"] != name]
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        yield
    finally:
        path.write_text(original)


def test_a_removed_projects_queue_is_kept_while_used_then_deleted(site, hosts, cli):
    if "labs" not in str(site.source):
        pytest.skip("edits the site config and deletes a queue: the lab only")
    master = _master(site, hosts)
    gone = site.scheduler.projects[-1].name
    pg = {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": "e2e-gang", "namespace": "default"},
        "spec": {"queue": gone, "minMember": 2},
    }
    master.check_output(f"echo {json.dumps(json.dumps(pg))} | " + KUBECTL + "apply -f -")
    try:
        with _without_project(site, gone):
            kept = cli("install", "--site", str(site.site_dir), "--tags", "scheduler_stack")
            assert kept.rc == 0, kept.err[-2000:]
            assert gone in _queues(site, hosts)
            assert (
                f"queue {gone}: its project is no longer in the site config, but it is kept (default/e2e-gang)"
                in (" ".join((kept.out + kept.err).split()))
            )
            master.check_output(KUBECTL + "delete podgroups.scheduling.volcano.sh e2e-gang -n default")
            deleted = cli("install", "--site", str(site.site_dir), "--tags", "scheduler_stack")
            assert deleted.rc == 0, deleted.err[-2000:]
            assert gone not in _queues(site, hosts)
        back = cli("install", "--site", str(site.site_dir), "--tags", "scheduler_stack")
        assert back.rc == 0 and gone in _queues(site, hosts)
        again = cli("install", "--site", str(site.site_dir), "--tags", "scheduler_stack")
        assert all(r["changed"] == 0 for r in again.recap.values()), again.out[-2000:]
    finally:
        master.run(KUBECTL + "delete podgroups.scheduling.volcano.sh e2e-gang -n default --ignore-not-found")
