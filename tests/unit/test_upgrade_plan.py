"""`appliance upgrade plan` (appliance_cli/core/upgradeplan.py): the steps in order, one worker
drained at a time, and each impossible plan refused in one line before anything changes."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from appliance_cli.core import upgradeplan as u
from appliance_cli.core.siteconfig import parse_site

EXAMPLE = Path(__file__).resolve().parents[2] / "inventories" / "example" / "appliance.yml"


def _site(**changes):
    data = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    for dotted, value in changes.items():
        section, key = dotted.split("__")
        data[section][key] = value
    data["scheduler"].pop("projects", None)
    return parse_site(data)


def _manifest(*versions: str, charts: dict[str, str] | None = None) -> dict:
    arts = [
        {
            "kind": "file",
            "name": f"{tool}{'' if i == 0 else '-' + v}",
            "version": v,
            "install_path": f"/usr/bin/{tool}",
        }
        for i, v in enumerate(versions)
        for tool in u.KUBE_TOOLS
    ]
    arts += [{"kind": "helm-chart", "name": n, "version": v} for n, v in (charts or {}).items()]
    return {"artifacts": arts}


INSTALLED = u.Installed(
    kubernetes="v1.23.5",
    kubelets={"master1": "v1.23.5", "gpu1": "v1.23.5", "gpu2": "v1.23.5"},
    releases={"gpu-operator": ("gpu-operator", "gpu-operator", "v23.9.0")},
)


def test_a_patch_upgrade_in_order_one_worker_at_a_time():
    target = u.target_of(_manifest("v1.23.17", charts={"gpu-operator": "v24.6.2"}), {})
    plan = u.plan_upgrade(_site(), INSTALLED, target)
    assert plan.changes == [
        ("kubernetes", "v1.23.5", "v1.23.17"),
        ("chart gpu-operator (gpu-operator)", "gpu-operator v23.9.0", "gpu-operator v24.6.2"),
    ]
    assert plan.steps[0].startswith("etcd snapshot on master1")
    assert plan.steps[1] == "master1: kubeadm upgrade apply v1.23.17, then its kubelet and kubectl"
    assert plan.steps[2].startswith("gpu1: drain, kubeadm upgrade node") and plan.steps[3].startswith(
        "gpu2: drain"
    )
    assert plan.steps[-1] == (
        "master1: helm get values gpu-operator (saved there, 0600), "
        "helm upgrade gpu-operator to gpu-operator v24.6.2 -f those values"
    )
    assert plan.drained == ["gpu1", "gpu2"]
    text = "\n".join(u.render(plan, _site()))
    assert re.search(r"^  kubernetes +v1\.23\.5 -> v1\.23\.17$", text, re.M)
    assert "never two workers unschedulable at once" in text


def test_several_minors_go_one_at_a_time():
    target = u.target_of(_manifest("v1.23.17", "v1.24.17", "v1.25.16"), {})
    plan = u.plan_upgrade(_site(), INSTALLED, target)
    applies = [s for s in plan.steps if "kubeadm upgrade apply" in s]
    assert applies == [
        f"master1: kubeadm upgrade apply {v}, then its kubelet and kubectl" for v in ("v1.24.17", "v1.25.16")
    ]


@pytest.mark.parametrize(
    ("site", "versions", "charts", "expected"),
    [
        ({}, ("v1.23.17", "v1.25.16"), {}, "kubernetes: v1.23.5 -> v1.25.16 skips 1.24: the bundle has no v1.24"),
        ({"kubernetes__container_runtime": "docker"}, ("v1.24.17",), {},
         "kubernetes.container_runtime: docker past 1.23 (target v1.24.17): Kubernetes 1.24 removed dockershim"),
        ({}, ("v1.22.17",), {}, "kubernetes: the bundle's v1.22.17 is older than the cluster's v1.23.5"),
        ({}, (), {}, "bundle: no Kubernetes version with all of kubeadm, kubelet and kubectl"),
        ({}, ("v1.24.17",), {"old-chart": "<1.24.0-0"},
         "chart old-chart 1.0 requires kubeVersion: <1.24.0-0 which is incompatible with Kubernetes v1.24.17"),
    ],
)  # fmt: skip
def test_impossible_plans_are_refused_in_one_line(site, versions, charts, expected):
    if site.get("kubernetes__container_runtime") == "docker":
        data = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
        data["kubernetes"]["container_runtime"] = "docker"
        data["nodes"] = [n for n in data["nodes"] if "gpu-worker" not in n["roles"]]  # docker: no GPU workers
        data["scheduler"].pop("projects", None)
        cfg = parse_site(data)
    else:
        cfg = _site(**site)
    manifest = _manifest(*versions, charts={n: "1.0" for n in charts})
    target = u.target_of(manifest, {n: {"kubeVersion": c} for n, c in charts.items()})
    with pytest.raises(u.UpgradeRefused) as exc:
        u.plan_upgrade(cfg, INSTALLED, target)
    assert exc.value.message.startswith(expected) and "\n" not in exc.value.message
    assert exc.value.exit_code == 2


def test_a_node_reporting_docker_is_refused_past_123_whatever_the_site_config_says():
    cfg = _site()  # the site config says containerd
    assert cfg.kubernetes.container_runtime == "containerd"
    runtimes = {"master1": "containerd://1.6.20", "gpu1": "docker://20.10.5", "gpu2": "containerd://1.6.20"}
    installed = u.Installed("v1.23.17", {n: "v1.23.17" for n in runtimes}, {}, reported=runtimes)
    with pytest.raises(u.UpgradeRefused) as exc:
        u.plan_upgrade(cfg, installed, u.target_of(_manifest("v1.24.17"), {}))
    assert exc.value.message == (
        "node gpu1: container runtime docker://20.10.5 past 1.23 (target v1.24.17): Kubernetes 1.24 removed "
        "dockershim (1 node(s) on docker: gpu1)"
    )
    assert "containerd" in (exc.value.hint or "")
    # a patch within 1.23 is still fine on docker, and 1.24 on containerd everywhere
    assert u.plan_upgrade(cfg, installed, u.target_of(_manifest("v1.23.17"), {})).empty
    installed.reported["gpu1"] = "containerd://1.6.20"
    plan = u.plan_upgrade(cfg, installed, u.target_of(_manifest("v1.24.17"), {}))
    assert plan.changes == [("kubernetes", "v1.23.17", "v1.24.17")]


def test_kai_below_128_is_refused():
    data = copy.deepcopy(yaml.safe_load(EXAMPLE.read_text()))
    data["kubernetes"]["version"] = "v1.28.15"
    data["scheduler"] = {"stack": "kai"}
    cfg = parse_site(data)
    installed = u.Installed("v1.26.15", {"master1": "v1.26.15"}, {})  # the site config already says 1.28
    with pytest.raises(u.UpgradeRefused, match=r"kai needs Kubernetes >= 1\.28, the bundle goes to v1\.27"):
        u.plan_upgrade(cfg, installed, u.target_of(_manifest("v1.27.16"), {}))


def test_nothing_to_do_and_the_lab_suffix():
    installed = u.Installed(
        "v1.23.17", {"master1": "v1.23.17"}, {"gpu-operator": ("gpu-operator", "gpu-operator", "v24.6.2")}
    )
    target = u.target_of(_manifest("v1.23.17-standin", charts={"gpu-operator": "v24.6.2"}), {})
    plan = u.plan_upgrade(_site(), installed, target)
    assert plan.empty and u.render(plan, _site()) == [
        "acme-ai-lab: nothing to upgrade: every component is at the bundle's version",
        "containerd: the bundle carries no containerd package: not upgraded",  # this test manifest has no apt
    ]


def test_a_worker_left_behind_is_caught_up():
    installed = u.Installed("v1.23.17", {"master1": "v1.23.17", "gpu1": "v1.23.5", "gpu2": "v1.23.17"}, {})
    plan = u.plan_upgrade(_site(), installed, u.target_of(_manifest("v1.23.17"), {}))
    assert plan.changes == [("kubelet", "gpu1 v1.23.5", "v1.23.17")] and plan.drained == ["gpu1"]


def test_installed_is_read_from_the_cluster_answers():
    cm = {
        "data": {"ClusterConfiguration": "apiVersion: kubeadm.k8s.io/v1beta3\nkubernetesVersion: v1.23.17\n"}
    }
    nodes = {
        "items": [{"metadata": {"name": "master1"}, "status": {"nodeInfo": {
            "kubeletVersion": "v1.23.17", "containerRuntimeVersion": "containerd://1.6.20"}}}]
    }  # fmt: skip
    helm = [{"name": "gpu-operator", "namespace": "gpu-operator", "chart": "gpu-operator-v24.6.2"},
            {"name": "nfs", "namespace": "nfs", "chart": "nfs-subdir-external-provisioner-4.0.18"}]  # fmt: skip
    got = u.installed_from(lambda a: cm if "configmap" in a else nodes, lambda a: helm)
    assert got.kubernetes == "v1.23.17" and got.kubelets == {"master1": "v1.23.17"}
    assert got.reported == {"master1": "containerd://1.6.20"}
    assert got.releases == {
        "gpu-operator": ("gpu-operator", "gpu-operator", "v24.6.2"),
        "nfs": ("nfs", "nfs-subdir-external-provisioner", "4.0.18"),
    }
    assert json.dumps(got.releases)  # plain data


def test_apply_runs_one_pass_per_minor_and_one_for_kubelets_left_behind():
    # v1.23.5 -> v1.25.16: kubeadm goes one minor at a time (no stop at v1.23.17 on the way)
    three = u.target_of(_manifest("v1.23.17", "v1.24.17", "v1.25.16"), {})
    assert u.plan_upgrade(_site(), INSTALLED, three).passes == ["v1.24.17", "v1.25.16"]
    behind = u.Installed("v1.23.17", {"master1": "v1.23.17", "gpu1": "v1.23.5"}, {})
    assert u.plan_upgrade(_site(), behind, u.target_of(_manifest("v1.23.17"), {})).passes == ["v1.23.17"]
    done = u.Installed("v1.23.17", {"master1": "v1.23.17"}, {})
    assert u.plan_upgrade(_site(), done, u.target_of(_manifest("v1.23.17"), {})).passes == []


def test_charts_alone_take_one_pass_and_the_runai_backend_gets_the_guides_step():
    done = u.Installed(
        "v1.23.17",
        {"master1": "v1.23.17", "gpu1": "v1.23.17"},
        {"runai-backend": ("runai-backend", "runai-backend", "2.13.0"),
         "runai-cluster": ("runai", "runai-cluster", "2.13.0"),
         "gpu-operator": ("gpu-operator", "gpu-operator", "v24.6.2")},
    )  # fmt: skip
    charts = {"runai-backend": "2.13.5", "runai-cluster": "2.13.5", "gpu-operator": "v24.6.2"}
    plan = u.plan_upgrade(_site(), done, u.target_of(_manifest("v1.23.17", charts=charts), {}))
    assert plan.passes == ["v1.23.17"] and plan.drained == []  # no node is drained for charts
    assert [c for c, _, _ in plan.changes] == [
        "chart runai-backend (runai-backend)",
        "chart runai-cluster (runai)",
    ]
    assert plan.steps == [
        "master1: helm get values runai-backend (saved there, 0600), helm upgrade runai-backend to "
        "runai-backend 2.13.5 -f those values (the guide's step first: delete deployment "
        "runai-backend-nginx-ingress-controller)",
        "master1: helm get values runai-cluster (saved there, 0600), helm upgrade runai-cluster to "
        "runai-cluster 2.13.5 -f those values",
    ]


def test_a_release_whose_upgrade_failed_is_upgraded_again():
    cm = {"data": {"ClusterConfiguration": "kubernetesVersion: v1.23.17\n"}}
    nodes = {"items": []}
    helm = [
        {
            "name": "nfs",
            "namespace": "nfs",
            "chart": "nfs-subdir-external-provisioner-4.0.18",
            "status": "failed",
        }
    ]
    got = u.installed_from(lambda a: cm if "configmap" in a else nodes, lambda a: helm)
    assert got.releases == {"nfs": ("nfs", "nfs-subdir-external-provisioner", "4.0.18 (failed)")}
    target = u.target_of(_manifest("v1.23.17", charts={"nfs-subdir-external-provisioner": "4.0.18"}), {})
    plan = u.plan_upgrade(_site(), got, target)
    assert plan.changes == [
        (
            "chart nfs (nfs)",
            "nfs-subdir-external-provisioner 4.0.18 (failed)",
            "nfs-subdir-external-provisioner 4.0.18",
        )
    ]


def test_a_kubectl_of_another_version_counts_for_the_release_it_is_bundled_for():
    """The lab's kubectl is Debian's v1.20.2 client, `kubernetes: v1.23.17` in the manifest: the
    bundle carries Kubernetes v1.23.17. Without that field the set is incomplete."""
    manifest = _manifest("v1.23.17-standin")
    kubectl = next(a for a in manifest["artifacts"] if a["name"] == "kubectl")
    kubectl["version"] = "v1.20.2"
    assert u.target_of(manifest, {}).kubernetes == []
    kubectl["kubernetes"] = "v1.23.17"
    assert u.target_of(manifest, {}).kubernetes == ["v1.23.17"]
