"""`appliance upgrade plan|apply` across a minor, 1.23 -> 1.24, on a lab of its own (master1,
worker1; APPLIANCE_E2E_MINOR_LAB, default "minor"): installed with the session's lab bundle
(v1.23.17, containerd), then upgraded with the lab profile built at v1.24.17
(tests/_support/upgrade_bundles.py `build_lab_bundle_at`: the stand-in packed at v1.24.17, which
behaves as kubeadm/kubelet 1.24 do, tests/standin/README.md), which master1 sees on a second "stick".

* The plan shows `kubernetes v1.23.17 -> v1.24.17` and is allowed on containerd.
* The same plan with the site config saying `kubernetes.container_runtime: docker` is refused in one
  line, exit 2, nothing changed. The lab runs no docker node (the lab nodes run containerd only), so
  the other refusal, a node that reports `docker://` in `status.nodeInfo.containerRuntimeVersion`
  whatever the config says, is unit-tested (tests/unit/test_upgrade_plan.py); here every node
  reports containerd://, which the plan reads.
* `upgrade apply`: kubectl shows every kubelet and the cluster (kubeadm-config, the API server's
  /version) at v1.24.17, every node Ready and schedulable, and what kubeadm 1.24 changes: the
  `kubelet-config` ConfigMap, master1 without the `node-role.kubernetes.io/master` label and with
  the `node-role.kubernetes.io/control-plane:NoSchedule` taint beside the master one.
* `upgrade apply` again: nothing to do; with the site config pointed at the new bundle, an install
  then changes nothing on its second run (changed=0).

The kubectl on the nodes stays Debian's v1.20 client (bundled `kubernetes: v1.24.17`): four minors
from the server, as the lab's 1.23 is three; what it reads here (nodes, ConfigMaps as JSON,
`version`) is the same for both."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SITE_FILE
from appliance_cli.lab.sitegen import EXTRA_WORKER_CLASS
from tests._support.paths import e2e_build_cache, e2e_bundle_root
from tests._support.upgrade_lab import ADMIN, changed, nodes, put_on_new_stick, ready, ssh

OLD, NEW = "v1.23.17", "v1.24.17"
MASTER, CP = "node-role.kubernetes.io/master", "node-role.kubernetes.io/control-plane"
DOCKER_REFUSED = (
    f"kubernetes.container_runtime: docker past 1.23 (target {NEW}): Kubernetes 1.24 removed dockershim"
)


def _plan_on_docker(cli, site_dir: Path, bundle_args: list[str]) -> Any:
    """`upgrade plan` with the site config saying `container_runtime: docker`, then put back. A
    docker site has no GPU workers (the site config refuses them: the docker path would drop the
    nvidia runtime), so the lab's GPU worker is a CPU worker (class CPU) in that config too, and no project
    asks for GPUs."""
    path = site_dir / SITE_FILE
    text = path.read_text()
    data = yaml.safe_load(text)
    data["kubernetes"]["container_runtime"] = "docker"
    for n in data["nodes"]:
        if "gpu-worker" in (n.get("roles") or []):
            n["roles"] = ["cpu-worker" if r == "gpu-worker" else r for r in n["roles"]]
            n["hardware_class"] = EXTRA_WORKER_CLASS  # the lab's class without GPUs
    for key in ("projects", "departments"):
        (data.get("scheduler") or {}).pop(key, None)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        return cli("upgrade", "plan", "--site", str(site_dir), *bundle_args)
    finally:
        path.write_text(text)


@pytest.fixture(scope="module")
def minor(installed_lab_cm, request, cli, tmp_path_factory) -> Iterator[dict[str, Any]]:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("installs 1.23 and upgrades it to 1.24: lab only")
    from appliance_cli.bundle import keygen, sign_bundle
    from tests._support.upgrade_bundles import build_lab_bundle_at
    from tests.e2e.conftest import TWO_NODE_LAB, SignedBundle

    old = request.getfixturevalue("lab_bundle")
    root = e2e_bundle_root()
    built = build_lab_bundle_at(root / f"bundle-{NEW}", e2e_build_cache(), NEW)
    priv, pub, _ = keygen(tmp_path_factory.mktemp("minor-key") / "new")
    sign_bundle(built, priv)
    new = SignedBundle(built, pub)
    # a lab of its own, from the 2-node lab site as installed (one snapshot, shared with
    # test_restore_lab and test_node_remove_unreachable: whichever comes first installs it)
    lab = os.environ.get("APPLIANCE_E2E_MINOR_LAB", "minor")
    with installed_lab_cm(lab, 2, old, share=TWO_NODE_LAB) as inst:
        layout, site_dir = inst.layout, inst.site_dir
        first = inst.installs[0]
        assert first.rc == 0, first.out[-2000:] + first.err[-3000:]
        before = nodes(site_dir)
        stick = put_on_new_stick(layout, new.path)
        bundle_args = ["--bundle", str(new.path), "--key", str(new.public_key)]
        plan = cli("upgrade", "plan", "--site", str(site_dir), *bundle_args)
        refused = _plan_on_docker(cli, site_dir, bundle_args)
        untouched = nodes(site_dir)
        apply = cli(
            "upgrade", "apply", "--site", str(site_dir), *bundle_args, "--master-bundle", stick, "--yes",
            timeout=2400,
        )  # fmt: skip
        after = nodes(site_dir)
        seen = {
            "cluster": ssh(
                site_dir, "master1", f"{ADMIN} -n kube-system get cm kubeadm-config -o json"
            ).stdout,
            "kubelet_cm": ssh(site_dir, "master1", f"{ADMIN} -n kube-system get cm kubelet-config -o json"),
            "version": ssh(site_dir, "master1", f"{ADMIN} version -o json").stdout,
            "kubelets": {n: ssh(site_dir, n, "kubelet --version").stdout.strip() for n in after},
        }
        again = cli("upgrade", "apply", "--site", str(site_dir), *bundle_args, "--yes")
        path = site_dir / SITE_FILE
        data = yaml.safe_load(path.read_text())  # the operator points the site at the new stick
        data["bundle"].update(source=str(new.path), master_source=stick, public_key=str(new.public_key))
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        installs = [  # the second runs every role (--full): they change nothing
            cli("install", "--site", str(site_dir), "--skip-diagnose", *again, timeout=1800)
            for again in ((), ("--full",))
        ]
        yield {
            "site_dir": site_dir, "before": before, "plan": plan, "refused": refused, "untouched": untouched,
            "apply": apply, "after": after, "seen": seen, "again": again, "installs": installs,
        }  # fmt: skip


def test_the_plan_goes_to_124_on_containerd(minor):
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in minor["before"].values()} == {OLD}
    assert all(
        n["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://")
        for n in minor["before"].values()
    )
    plan = minor["plan"]
    print(plan.out)  # shown with -rP: the plan as the operator reads it
    assert plan.rc == 0, plan.err[-2000:]
    assert re.search(rf"^  kubernetes +{OLD} -> {NEW}$", plan.out, re.M), plan.out
    assert f"master1: kubeadm upgrade apply {NEW}, then its kubelet and kubectl" in plan.out
    assert f"worker1: drain, kubeadm upgrade node, kubelet and kubectl {NEW}" in plan.out


def test_the_same_plan_on_docker_is_refused_in_one_line(minor):
    refused = minor["refused"]
    print(f"rc={refused.rc}\n{refused.err}")
    assert refused.rc == 2, refused.out[-1000:] + refused.err[-1000:]
    lines = [ln for ln in refused.err.splitlines() if DOCKER_REFUSED in ln]
    assert len(lines) == 1, refused.err
    assert "Traceback" not in refused.err
    assert "containerd" in refused.err.split(DOCKER_REFUSED, 1)[1]  # the hint
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in minor["untouched"].values()} == {OLD}
    assert yaml.safe_load((minor["site_dir"] / SITE_FILE).read_text())["kubernetes"]["container_runtime"] == (
        "containerd"
    )


def test_apply_takes_every_node_and_the_cluster_to_124(minor):
    apply = minor["apply"]
    print(
        apply.out[-1500:], {n: d["status"]["nodeInfo"]["kubeletVersion"] for n, d in minor["after"].items()}
    )
    assert apply.rc == 0, apply.out[-3000:] + apply.err[-3000:]
    assert f"upgraded to Kubernetes {NEW}" in apply.out
    after, seen = minor["after"], minor["seen"]
    assert {n: d["status"]["nodeInfo"]["kubeletVersion"] for n, d in after.items()} == {
        "master1": NEW, "worker1": NEW,
    }  # fmt: skip
    assert all(ready(d) and not d["spec"].get("unschedulable") for d in after.values()), after
    assert seen["kubelets"] == dict.fromkeys(after, f"Kubernetes {NEW}")
    cluster = yaml.safe_load(json.loads(seen["cluster"])["data"]["ClusterConfiguration"])
    assert cluster["kubernetesVersion"] == NEW
    assert json.loads(seen["version"])["serverVersion"]["gitVersion"] == NEW
    assert yaml.safe_load((minor["site_dir"] / SITE_FILE).read_text())["kubernetes"]["version"] == NEW


def test_kubeadm_124s_own_changes_show(minor):
    seen, master = minor["seen"], minor["after"]["master1"]
    assert seen["kubelet_cm"].returncode == 0, seen["kubelet_cm"].stderr  # the unversioned ConfigMap
    assert "kind: KubeletConfiguration" in json.loads(seen["kubelet_cm"].stdout)["data"]["kubelet"]
    assert MASTER not in master["metadata"]["labels"] and CP in master["metadata"]["labels"]
    taints = {(t["key"], t["effect"]) for t in master["spec"].get("taints") or []}
    assert {(MASTER, "NoSchedule"), (CP, "NoSchedule")} <= taints


def test_apply_again_has_nothing_to_do_and_an_install_then_changes_nothing(minor):
    again = minor["again"]
    assert again.rc == 0, again.err[-2000:]
    assert "nothing to upgrade" in again.out
    runs = minor["installs"]
    print(again.out, [changed(r) for r in runs], runs[1].recap)
    assert all(r.rc == 0 for r in runs), runs[-1].out[-2000:] + runs[-1].err[-3000:]
    assert changed(runs[1]) == 0, runs[1].recap
