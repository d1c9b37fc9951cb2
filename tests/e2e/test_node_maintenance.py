"""`appliance node drain|uncordon` on the installed lab: the node goes unschedulable with its
daemonset pods left in place, comes back, and a second uncordon has nothing to undo; the last
control-plane node and an unknown node are refused before anything changes."""

from __future__ import annotations

import json

import pytest

pytestmark = pytest.mark.usefixtures("installs")
KUBECTL = "kubectl --kubeconfig /etc/kubernetes/admin.conf"


def _node(site, hosts, name: str) -> dict:
    return json.loads(hosts[site.master.name].check_output(f"{KUBECTL} get node {name} -o json"))


def _pods_on(site, hosts, name: str) -> set[str]:
    pods = json.loads(hosts[site.master.name].check_output(f"{KUBECTL} get pods -A -o json"))["items"]
    return {p["metadata"]["name"] for p in pods if p["spec"].get("nodeName") == name}


def test_drain_and_uncordon_a_worker(site, hosts, cli):
    worker = site.nodes[-1].name
    before = _pods_on(site, hosts, worker)
    try:
        r = cli("node", "drain", "--site", str(site.site_dir), worker, "--yes")
        assert r.rc == 0, r.err
        assert f"{worker}: drained" in r.out
        node = _node(site, hosts, worker)
        assert node["spec"]["unschedulable"] is True
        if site.scheduler.stack == "runai":
            assert {"key": "runai", "value": "drain", "effect": "NoExecute"} in node["spec"]["taints"]
        assert _pods_on(site, hosts, worker) == before  # daemonset pods (flannel, kube-proxy) stay
    finally:
        r = cli("node", "uncordon", "--site", str(site.site_dir), worker)
    assert r.rc == 0 and f"{worker}: back in service" in r.out, r.out + r.err
    assert not _node(site, hosts, worker)["spec"].get("unschedulable")
    again = cli("node", "uncordon", "--site", str(site.site_dir), worker)
    assert again.rc == 0 and "nothing to undo" in again.out


def test_the_last_master_and_unknown_nodes_are_refused(site, hosts, cli):
    r = cli("node", "drain", "--site", str(site.site_dir), site.master.name, "--yes")
    assert r.rc == 2 and f"{site.master.name} is the last control-plane node" in r.err
    assert not _node(site, hosts, site.master.name)["spec"].get("unschedulable")
    r = cli("node", "drain", "--site", str(site.site_dir), "nosuchnode", "--yes")
    assert r.rc == 2 and "node 'nosuchnode' is not in the site config" in r.err


def test_rejoin_resets_and_joins_a_worker_again(site, hosts, cli):
    worker = next(n for n in reversed(site.nodes) if "master" not in n.roles)
    cert = "/var/lib/kubelet/pki/kubelet-client-current.pem"
    before = hosts[worker.name].check_output(f"openssl x509 -noout -fingerprint -sha256 -in {cert}")
    r = cli("node", "rejoin", "--site", str(site.site_dir), worker.name, "--yes", timeout=1200)
    assert r.rc == 0, r.out[-3000:] + r.err
    assert f"{worker.name}: kubeadm reset -f stops the kubelet" in r.out
    assert f"{worker.name}: rejoined with a fresh token, labelled from the site config, Ready" in r.out
    after = hosts[worker.name].check_output(f"openssl x509 -noout -fingerprint -sha256 -in {cert}")
    assert after != before  # a new kubelet identity: it really joined again
    node = _node(site, hosts, worker.name)
    labels = node["metadata"]["labels"]
    assert labels.get("run.ai/type") == worker.hardware_class
    for role in set(worker.roles) & {"gpu-worker", "cpu-worker"}:
        assert labels.get(f"node-role.kubernetes.io/runai-{role}") == "true"
    assert not hosts[worker.name].file("/etc/kubernetes/appliance-join.yaml").exists  # the token file is gone
    r = cli("node", "rejoin", "--site", str(site.site_dir), site.master.name, "--yes")
    assert r.rc == 2 and "last control-plane node: resetting it" in r.err
