"""`appliance node drain|uncordon` on the installed lab: the node goes unschedulable with its
daemonset pods left in place, comes back, and a second uncordon has nothing to undo; the last
control-plane node and an unknown node are refused before anything changes."""

from __future__ import annotations

import ipaddress
import json

import pytest

from tests._support import pinned_pods

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
    # A pod runs on it (the bridge cni0 then holds its range's gateway). A second rejoin: the
    # controller's range cursor has moved past this node's range since it started (a lab booted
    # from its snapshot restarts it, as the first rejoin found), so the node gets a new podCIDR,
    # as on a site whose controller has run since its nodes joined. Its pods must get addresses in
    # the new range: the bridge that held the old gateway must not refuse them.
    old_cidr = node["spec"]["podCIDR"]
    ran = [_pinned_pod_address(site, hosts, worker.name, old_cidr)]
    r = cli("node", "rejoin", "--site", str(site.site_dir), worker.name, "--yes", timeout=1200)
    assert r.rc == 0, r.out[-3000:] + r.err
    cidr = _node(site, hosts, worker.name)["spec"]["podCIDR"]
    assert cidr != old_cidr, f"{worker.name} kept {cidr}: the test needs a new range"
    ran.append(_pinned_pod_address(site, hosts, worker.name, cidr))
    print(f"{worker.name}: podCIDR {old_cidr}, a pod at {ran[0]}; rejoined: {cidr}, a pod at {ran[1]}")
    r = cli("node", "rejoin", "--site", str(site.site_dir), site.master.name, "--yes")
    assert r.rc == 2 and "last control-plane node: resetting it" in r.err


def _pinned_pod_address(site, hosts, name: str, cidr: str) -> str:
    """A pod pinned to node NAME runs with an address in CIDR; it is deleted again."""
    master, names = hosts[site.master.name], {name: f"rejoin-check-{name}"}
    pinned_pods.start(master, names)
    try:
        ips = pinned_pods.addresses(master, names)
        assert name in ips, pinned_pods.events(master, names[name])
        assert ipaddress.ip_address(ips[name]) in ipaddress.ip_network(cidr), (ips, cidr)
        return ips[name]
    finally:
        pinned_pods.delete(master, names)
