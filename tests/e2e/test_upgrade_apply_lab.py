"""`appliance upgrade apply` on a lab of its own (master1, worker1, worker2): installed at v1.23.16
from an old lab bundle (stand-in binaries and control-plane images of that version), then upgraded
to v1.23.17 with the session's lab bundle, which master1 sees on a second "stick".

The first `upgrade apply` is killed (-9, its process group) once the master is done and before
the workers (issue 19's "upgrade interrupted after the master"): the master then runs v1.23.17, the
workers v1.23.16, none drained, and the state on the master says so. `upgrade apply` run again
goes on from the workers. Shown with kubectl: every kubelet and the cluster at v1.23.17, every node
Ready and schedulable; the one etcd snapshot, taken before the master changed, is on the master
(0600); a watcher that read the nodes every two seconds during both runs saw a worker
unschedulable, and never two at once. The old bundle carries nfs-subdir-external-provisioner 4.0.17
(the new one 4.0.18); after the install the operator changes one of its values by hand (`helm
upgrade --reuse-values --set`): the resumed apply upgrades the release to 4.0.18 with the values it
had, that change among them (saved 0600 on the master). Then: `upgrade apply` again has nothing to
do, and once the site config names the new bundle, a second install changes nothing.

containerd moves too: the old bundle pins Debian's older build (OLD_CONTAINERD, +deb12u2), the new
one carries bookworm's (+deb12u3). Before: every node runs the old one (dpkg); the killed apply
upgraded the master's alone (in its own step); after: every node runs the new one, and the
runtime version the kubelet reports is what the running containerd answers (`ctr version`; both
Debian builds are upstream 1.6.20~ds1, so that string does not move, as with a real kubelet)."""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance_cli.core.siteconfig import SITE_FILE
from tests._support.killed_runs import kill_when_printed
from tests._support.paths import e2e_build_cache, e2e_bundle_root
from tests._support.upgrade_bundles import OLD_CONTAINERD
from tests._support.upgrade_lab import ADMIN, NEW_STICK, changed, nodes, put_on_new_stick, ready, ssh

LAB = os.environ.get("APPLIANCE_E2E_UPGRADE_LAB", "upg")
OLD, NEW = "v1.23.16", "v1.23.17"
WORKERS_PLAY = "PLAY Upgrade | The workers, one at a time"
STATE = "/var/lib/appliance/upgrade/state.json"
HELM = "helm --kubeconfig /etc/kubernetes/admin.conf"
CHART, RELEASE, CHART_NS = (
    "nfs-subdir-external-provisioner",
    "nfs-subdir-external-provisioner",
    "nfs-provisioner",
)
OLD_CHART, NEW_CHART = "4.0.17", "4.0.18"
NODES = ("master1", "worker1", "worker2")
CONTAINERD = "dpkg-query -W -f='${Version}' containerd"
STARTED = "systemctl show -p ExecMainStartTimestampMonotonic --value containerd"  # its last (re)start
TWEAK = ("podAnnotations", "upgrade-note", "kept")  # the operator's change after the install


def _release(site_dir: Path) -> tuple[str, dict[str, Any]]:
    """(helm list's chart, helm get values) of the provisioner's release."""
    res = ssh(site_dir, "master1", f"{HELM} list -A -o json")
    chart = next(r["chart"] for r in json.loads(res.stdout) if r["name"] == RELEASE)
    res = ssh(site_dir, "master1", f"{HELM} get values {RELEASE} -n {CHART_NS} -o json")
    return chart, json.loads(res.stdout)


def _containerd(site_dir: Path) -> dict[str, tuple[str, str]]:
    """node -> (containerd's package version, when its daemon last started)."""
    return {
        n: (ssh(site_dir, n, CONTAINERD).stdout.strip(), ssh(site_dir, n, STARTED).stdout.strip())
        for n in NODES
    }


def _versions(ctr: dict[str, tuple[str, str]]) -> dict[str, str]:
    return {n: v for n, (v, _) in ctr.items()}


def _runtime_answers(site_dir: Path) -> dict[str, str]:
    """node -> the version the running containerd gives (ctr version's Server Version)."""
    out = {}
    for n in NODES:
        text = ssh(site_dir, n, "ctr version").stdout
        out[n] = re.search(r"Server:\s*\n\s*Version:\s*(\S+)", text).group(1)  # type: ignore[union-attr]
    return out


class _Watcher:
    """Reads the nodes every two seconds; keeps the largest set of unschedulable workers seen."""

    def __init__(self, site_dir: Path) -> None:
        self.site_dir, self.stop, self.seen = site_dir, threading.Event(), []  # type: ignore[var-annotated]
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self.stop.wait(2):
            res = ssh(self.site_dir, "master1", f"{ADMIN} get nodes -o json", timeout=30)
            if res.returncode != 0:
                continue  # the API server restarting under kubeadm upgrade apply
            out = {
                n["metadata"]["name"]
                for n in json.loads(res.stdout)["items"]
                if n["spec"].get("unschedulable") and n["metadata"]["name"] != "master1"
            }
            self.seen.append(out)

    def __enter__(self) -> _Watcher:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join(timeout=60)


@pytest.fixture(scope="module")
def upgraded(own_lab_cm, request, cli, tmp_path_factory) -> Iterator[dict[str, Any]]:
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("installs an old version first: lab only")
    from appliance_cli.bundle import keygen, sign_bundle
    from appliance_cli.core import siteedit
    from tests._support.upgrade_bundles import build_old_lab_bundle

    new = request.getfixturevalue("lab_bundle")
    root = e2e_bundle_root()
    old = build_old_lab_bundle(root / "old-bundle", e2e_build_cache(), OLD)
    keys = tmp_path_factory.mktemp("old-key")
    priv, pub, _ = keygen(keys / "old")
    sign_bundle(old, priv)
    from tests.e2e.conftest import SignedBundle

    with own_lab_cm(LAB, 3, SignedBundle(old, pub)) as layout:
        site_dir = layout.site_dir
        siteedit.set_kubernetes_version_in_file(site_dir / SITE_FILE, OLD)
        first = cli("install", "--site", str(site_dir), "--skip-diagnose", timeout=1800)
        assert first.rc == 0, first.out[-2000:] + first.err[-3000:]
        before = nodes(site_dir)
        ctr_before = _containerd(site_dir)
        key, sub, value = TWEAK
        tweak = ssh(
            site_dir, "master1",
            f"{HELM} upgrade {RELEASE} /var/lib/appliance/charts/{CHART}-{OLD_CHART}.tgz -n {CHART_NS} "
            f"--reuse-values --set {key}.{sub}={value}",
        )  # fmt: skip
        assert tweak.returncode == 0, tweak.stdout + tweak.stderr
        chart_before = _release(site_dir)
        # The new "stick" on master1: the new bundle's files, linked into its root filesystem.
        put_on_new_stick(layout, new.path)
        bundle_args = ["--bundle", str(new.path), "--key", str(new.public_key)]
        plan = cli("upgrade", "plan", "--site", str(site_dir), *bundle_args)
        with _Watcher(site_dir) as watch:
            killed = kill_when_printed(
                [
                    "upgrade",
                    "apply",
                    "--site",
                    str(site_dir),
                    *bundle_args,
                    "--master-bundle",
                    NEW_STICK,
                    "--yes",
                ],
                WORKERS_PLAY,
            )  # SIGKILLed with its process group as the workers' play starts
            interrupted = nodes(site_dir)
            ctr_mid = _containerd(site_dir)
            state = json.loads(ssh(site_dir, "master1", f"cat {STATE}").stdout or "{}")
            apply = cli(
                "upgrade", "apply", "--site", str(site_dir), *bundle_args, "--master-bundle", NEW_STICK,
                "--yes", timeout=1800,
            )  # fmt: skip
        after = nodes(site_dir)
        ctr_after, ctr_answers = _containerd(site_dir), _runtime_answers(site_dir)
        chart_after = _release(site_dir)
        saved = ssh(
            site_dir, "master1", f"stat -c %a /var/lib/appliance/upgrade/values/{CHART_NS}_{RELEASE}.yaml"
        )
        snapshots = ssh(site_dir, "master1", "ls /var/lib/appliance/etcd-snapshots").stdout.split()
        again = cli("upgrade", "apply", "--site", str(site_dir), *bundle_args, "--yes")
        yield {
            "site_dir": site_dir, "new": new, "before": before, "plan": plan, "killed": killed,
            "interrupted": interrupted, "state": state, "apply": apply, "after": after, "again": again,
            "seen": watch.seen, "snapshots": snapshots, "chart_before": chart_before,
            "chart_after": chart_after, "saved_mode": saved.stdout.strip(), "ctr_before": ctr_before,
            "ctr_mid": ctr_mid, "ctr_after": ctr_after, "ctr_answers": ctr_answers,
            "new_containerd": _bundle_containerd(new.path),
        }  # fmt: skip


def _bundle_containerd(bundle: Path) -> str:
    from appliance_cli.core.upgradeplan import containerd_of

    (version,) = containerd_of(bundle, json.loads((bundle / "manifest.json").read_text())).values()
    return version


def test_the_lab_ran_the_old_version_and_the_plan_says_what_changes(upgraded):
    assert {n["status"]["nodeInfo"]["kubeletVersion"] for n in upgraded["before"].values()} == {OLD}
    plan = upgraded["plan"]
    assert plan.rc == 0, plan.err[-2000:]
    assert re.search(rf"^  kubernetes +{OLD} -> {NEW}$", plan.out, re.M), plan.out
    assert f"{CHART} {OLD_CHART} -> {CHART} {NEW_CHART}" in plan.out
    steps = [ln.strip() for ln in plan.out.splitlines() if ln.startswith("  ") and ". " in ln]
    assert steps[0].startswith("1. etcd snapshot on master1") and steps[-1] == (
        f"{len(steps)}. master1: helm get values {RELEASE} (saved there, 0600), "
        f"helm upgrade {RELEASE} to {CHART} {NEW_CHART} -f those values"
    ), steps
    new_ctr = upgraded["new_containerd"]
    assert new_ctr != OLD_CONTAINERD and _versions(upgraded["ctr_before"]) == dict.fromkeys(
        NODES, OLD_CONTAINERD
    )
    for node in NODES:
        assert re.search(
            rf"^  containerd \({node}\) +{re.escape(OLD_CONTAINERD)} -> {re.escape(new_ctr)}$", plan.out, re.M
        )
    assert steps[1].startswith(f"2. master1: containerd {new_ctr} from the new bundle's apt repository"), (
        steps
    )


def test_the_killed_apply_upgraded_the_masters_containerd_alone(upgraded):
    before, mid = upgraded["ctr_before"], upgraded["ctr_mid"]
    assert _versions(mid) == {
        "master1": upgraded["new_containerd"], "worker1": OLD_CONTAINERD, "worker2": OLD_CONTAINERD,
    }  # fmt: skip
    # restarted with its package, on the master alone: the workers' daemons were left running
    assert [n for n in NODES if mid[n][1] != before[n][1]] == ["master1"], (before, mid)


def test_every_node_runs_the_new_bundles_containerd(upgraded):
    mid, after_ctr = upgraded["ctr_mid"], upgraded["ctr_after"]
    assert _versions(after_ctr) == dict.fromkeys(NODES, upgraded["new_containerd"])
    # the resumed apply restarted each worker's containerd with its package, not the master's again
    assert [n for n in NODES if after_ctr[n][1] != mid[n][1]] == ["worker1", "worker2"], (mid, after_ctr)
    after = upgraded["after"]
    assert {n: d["status"]["nodeInfo"]["containerRuntimeVersion"] for n, d in after.items()} == {
        n: f"containerd://{v}" for n, v in upgraded["ctr_answers"].items()
    }


def test_an_apply_killed_after_the_master_left_the_workers_untouched(upgraded):
    assert upgraded["killed"], f"the first apply ended before '{WORKERS_PLAY}'"
    mid = upgraded["interrupted"]
    assert {n: d["status"]["nodeInfo"]["kubeletVersion"] for n, d in mid.items()} == {
        "master1": NEW, "worker1": OLD, "worker2": OLD,
    }  # fmt: skip
    assert not any(d["spec"].get("unschedulable") for d in mid.values())
    doc = upgraded["state"]  # module resumable_state's layout: {"schema": 1, "kube_upgrade": {...}}
    assert doc.get("schema") == 1, doc
    state = doc["kube_upgrade"]
    assert state["target"] == NEW and state["done"] == ["master1"] and state["snapshot"], state


def test_apply_upgrades_every_node_and_records_the_version(upgraded):
    apply = upgraded["apply"]
    assert apply.rc == 0, apply.out[-3000:] + apply.err[-3000:]
    after = upgraded["after"]
    assert {n: d["status"]["nodeInfo"]["kubeletVersion"] for n, d in after.items()} == dict.fromkeys(
        after, NEW
    )
    assert all(ready(d) and not d["spec"].get("unschedulable") for d in after.values()), after
    site_dir = upgraded["site_dir"]
    cm = ssh(site_dir, "master1", f"{ADMIN} -n kube-system get cm kubeadm-config -o json")
    assert yaml.safe_load(json.loads(cm.stdout)["data"]["ClusterConfiguration"])["kubernetesVersion"] == NEW
    for node in after:
        assert ssh(site_dir, node, "kubelet --version").stdout.strip() == f"Kubernetes {NEW}"
    assert yaml.safe_load((site_dir / SITE_FILE).read_text())["kubernetes"]["version"] == NEW
    assert f"upgraded to Kubernetes {NEW}" in apply.out


def test_an_etcd_snapshot_was_taken_first_and_kept_on_the_master(upgraded):
    apply, site_dir = upgraded["apply"], upgraded["site_dir"]
    line = next(
        ln for ln in apply.out.splitlines() if ln.startswith("etcd snapshot taken before the upgrade: ")
    )
    path = line.split("master1:", 1)[1].strip()
    assert path.startswith(f"/var/lib/appliance/etcd-snapshots/etcd-before-{NEW}-"), line
    # the one the killed run took: not taken again
    assert path == upgraded["state"]["kube_upgrade"]["snapshot"]
    assert upgraded["snapshots"] == [Path(path).name]
    stat = ssh(site_dir, "master1", f"stat -c '%a %s' {path}").stdout.split()
    assert stat[0] == "600" and int(stat[1]) > 1000, stat


def test_never_two_workers_unschedulable_and_each_was_drained(upgraded):
    seen = upgraded["seen"]
    assert len(seen) > 10, "the watcher read the nodes too rarely"
    assert max(len(s) for s in seen) == 1, [s for s in seen if s]
    assert set().union(*seen) == {"worker1", "worker2"}


def test_the_chart_was_upgraded_keeping_the_operators_change(upgraded):
    key, sub, value = TWEAK
    chart, values = upgraded["chart_before"]
    assert chart == f"{CHART}-{OLD_CHART}" and values[key] == {sub: value}, values
    chart, after = upgraded["chart_after"]
    assert chart == f"{CHART}-{NEW_CHART}"
    assert after == values  # the site's values and the operator's change, as they were
    assert "nfs" in after  # the site's own (server, path) among them
    assert upgraded["saved_mode"] == "600"
    assert f"chart {CHART_NS}/{RELEASE}: {CHART} {OLD_CHART} -> {NEW_CHART}, with its saved values" in (
        upgraded["apply"].out
    )
    assert "not upgraded by upgrade apply" not in upgraded["apply"].out + upgraded["apply"].err


def test_apply_again_has_nothing_to_do_and_an_install_then_changes_nothing(upgraded, cli):
    again = upgraded["again"]
    assert again.rc == 0, again.err[-2000:]
    assert "nothing to upgrade" in again.out
    assert all(f"containerd ({n})" in again.out for n in NODES) and "(unchanged)" in again.out
    site_dir, new = upgraded["site_dir"], upgraded["new"]
    path = site_dir / SITE_FILE
    data = yaml.safe_load(path.read_text())  # the operator points the site at the new stick
    data["bundle"].update(source=str(new.path), master_source=NEW_STICK, public_key=str(new.public_key))
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    runs = [cli("install", "--site", str(site_dir), "--skip-diagnose", *again, timeout=1800)
            for again in ((), ("--full",))]  # the second runs every role: they change nothing  # fmt: skip
    assert all(r.rc == 0 for r in runs), runs[-1].err[-3000:]
    assert changed(runs[1]) == 0, runs[1].recap
