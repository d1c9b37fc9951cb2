"""`appliance preflight` on real lab nodes: fresh nodes list what the install will provide, each
deliberately broken node is named with its cause, and an installed site passes (what a
container node cannot show is a skip with its reason, never a pass)."""

from __future__ import annotations

import os
import shlex
from collections.abc import Iterator

import pytest
import yaml

from appliance_cli.core.siteconfig import SiteConfig, load_site
from tests._support.lab_nodes import run_as_root


@pytest.fixture(scope="module")
def fresh(own_lab_cm) -> Iterator[SiteConfig]:
    """Four fresh lab nodes of this module's own (nothing installed)."""
    if os.environ.get("APPLIANCE_E2E_SITE"):
        pytest.skip("breaks fresh nodes on purpose: lab only")
    with own_lab_cm("pre", 4) as layout:
        yield load_site(layout.site_dir)


def test_fresh_nodes_list_what_the_install_provides(fresh, cli):
    r = cli("preflight", str(fresh.site_dir))
    assert r.rc == 0, r.err[-2000:]
    # the same finding on every node is one line naming them all, not one line per node
    every = f"warning: {len(fresh.nodes)} nodes ({', '.join(sorted(n.name for n in fresh.nodes))}): "
    assert r.err.count(every + "runtime/cri_socket: absent (expected present) — the install provides") == 1
    assert r.err.count(every + "os/tools: missing: conntrack") == 1  # a missing conntrack, nodes named
    assert r.err.count(every + "os/sysctls: net.ipv4.ip_forward=0") == 1
    assert "0 failed" in r.out and "container node: it sees the host's CPUs" in r.out


def test_a_busy_api_server_port_on_the_master_is_named(fresh, cli):
    master = fresh.master.name
    run_as_root(master, "systemd-run --unit busy-6443 python3 -m http.server 6443 --bind 0.0.0.0")
    try:
        run_as_root(
            master, "for i in $(seq 50); do ss -ltnH | grep -q ':6443 ' && exit 0; sleep 0.1; done; exit 1"
        )
        r = cli("preflight", str(fresh.site_dir))
        inst = cli("install", str(fresh.site_dir))
        skipped = cli("install", str(fresh.site_dir), "--skip-preflight")
    finally:
        run_as_root(master, "systemctl stop busy-6443")
    assert r.rc == 3
    assert f"error: {master}: kubernetes/ports: in use: 6443" in r.err
    assert f"error: preflight: {master}: kubernetes/ports: in use: 6443" in r.err
    # install runs the preflight first and refuses before anything else (the bundle gate included)
    assert inst.rc == 3 and f"error: preflight: {master}: kubernetes/ports: in use: 6443" in inst.err
    # --skip-preflight says so and goes on to the next gate (this lab has no bundle: exit 4 there)
    assert "warning: preflight skipped (--skip-preflight)" in skipped.err and skipped.rc == 4, skipped.err[
        -1000:
    ]


def test_a_duplicate_hostname_is_named(fresh, cli):
    first, second = [n.name for n in fresh.nodes][1:3]
    run_as_root(second, f"hostname {first}")
    try:
        r = cli("preflight", str(fresh.site_dir))
    finally:
        run_as_root(second, f"hostname {second}")
    assert r.rc == 3
    assert f"error: site: network/unique_hostname: {first} on {first}, {second}" in r.err


def test_a_resolver_that_does_not_answer_is_named(fresh, cli, tmp_path):
    """The site says it has DNS; a node name missing from /etc/hosts must then come from a
    resolver, and the lab's (10.255.255.53, unrouted) never answers."""
    data = yaml.safe_load((fresh.site_dir / "appliance.yml").read_text())
    data["network"]["dns_servers"] = ["10.255.255.53"]
    site = fresh.site_dir / "with-dns.yml"
    site.write_text(yaml.safe_dump(data))
    worker = fresh.nodes[1].name
    run_as_root(fresh.master.name, f"cp /etc/hosts /etc/hosts.pre && sed -i '/ {worker}$/d' /etc/hosts")
    try:
        r = cli("preflight", str(site))
    finally:
        run_as_root(fresh.master.name, "mv /etc/hosts.pre /etc/hosts")
    assert r.rc == 3
    assert (
        f"error: {fresh.master.name}: network/name_resolution: the resolver did not answer for {worker}"
        in r.err
    )


# A GPU node's driver where the lab has no GPU: an nvidia-smi that answers as the 550 driver does
# (tests/fixtures/gpu/README.md), enough for the probe's two calls.
FAKE_NVIDIA_SMI = """#!/bin/sh
case "$*" in
  *-q*-x*) printf '%s\\n' '<?xml version="1.0" ?><nvidia_smi_log><driver_version>550.90.07</driver_version><gpu id="00000000:07:00.0"><product_name>NVIDIA A100-SXM4-80GB</product_name></gpu></nvidia_smi_log>' ;;
  *--query-gpu=name,driver_version*) echo 'NVIDIA A100-SXM4-80GB, 550.90.07' ;;
  *) exit 6 ;;
esac
"""


# The GPU Operator's driver container root where the lab has none: the node's own shell and its
# libraries, and an nvidia-smi that answers as another driver (535) does, under /run/nvidia/driver.
FAKE_DRIVER_ROOT = """R=/run/nvidia/driver
for f in /bin/sh $(ldd /bin/sh | grep -o '/[^ ]*'); do mkdir -p "$R${f%/*}" && cp -L "$f" "$R$f"; done
mkdir -p "$R/usr/bin" && printf '%s\\n' '#!/bin/sh' 'echo 535.104.05' > "$R/usr/bin/nvidia-smi"
chmod 755 "$R/usr/bin/nvidia-smi"
"""


def test_an_earlier_clusters_leftovers_and_a_host_driver_are_named(fresh, cli):
    """Another pod network's CNI configuration (kubeadm reset keeps it), etcd data on the master,
    an NVIDIA driver on the host of a `gpu.driver: container` site, and a driver container left
    running another driver than the bundle pins: each a failure naming it."""
    master = fresh.master.name
    worker = next(n.name for n in fresh.nodes if "gpu-worker" in n.roles)
    data = yaml.safe_load((fresh.site_dir / "appliance.yml").read_text())
    data.setdefault("gpu", {})["driver"] = "container"  # the lab's own site says host: it has no GPUs
    site = fresh.site_dir / "driver-container.yml"
    site.write_text(yaml.safe_dump(data))
    calico = shlex.quote(
        '{"cniVersion": "0.3.1", "name": "k8s-pod-network", "plugins": [{"type": "calico"}]}'
    )
    run_as_root(
        worker, f"mkdir -p /etc/cni/net.d && printf '%s' {calico} > /etc/cni/net.d/10-calico.conflist"
    )
    run_as_root(master, "mkdir -p /var/lib/etcd/member && touch /var/lib/etcd/member/wal")
    smi = shlex.quote(FAKE_NVIDIA_SMI)
    run_as_root(
        worker, f"printf '%s' {smi} > /usr/local/bin/nvidia-smi && chmod 755 /usr/local/bin/nvidia-smi"
    )
    run_as_root(worker, FAKE_DRIVER_ROOT)
    try:
        r = cli("preflight", str(site))
    finally:
        run_as_root(worker, "rm -rf /etc/cni/net.d/10-calico.conflist /usr/local/bin/nvidia-smi /run/nvidia")
        run_as_root(master, "rm -rf /var/lib/etcd/member")
    assert r.rc == 3, r.err[-2000:]
    assert f"error: {worker}: kubernetes/leftovers: /etc/cni/net.d/10-calico.conflist" in r.err
    assert f"error: {master}: kubernetes/leftovers: /var/lib/etcd (not empty)" in r.err
    assert f"error: {worker}: gpu/gpu_driver: host driver 550.90.07 (nvidia-smi on the host)" in r.err
    assert f"error: {worker}: gpu/gpu_container_driver: driver container 535.104.05" in r.err
    print("\n".join(x for x in r.err.splitlines() if "gpu/" in x))  # shown by -rP
    again = cli("preflight", str(site))
    assert "leftovers" not in again.err and "gpu_driver" not in again.err, again.err[-2000:]


def test_a_node_feature_discovery_already_running_is_named_with_the_value_to_set(fresh, cli):
    """A daemon named as NFD's worker, outside Kubernetes: with gpu.nfd (the default) the GPU
    Operator would deploy a second NFD over it: a failure naming the node, the daemon and the
    value; with gpu.nfd: false the site's own is what the operator uses."""
    worker = next(n.name for n in fresh.nodes if "gpu-worker" in n.roles)
    run_as_root(
        worker,
        "cp /bin/sleep /usr/local/bin/nfd-worker && systemd-run --unit fake-nfd /usr/local/bin/nfd-worker 600",
    )
    data = yaml.safe_load((fresh.site_dir / "appliance.yml").read_text())
    data.setdefault("gpu", {})["nfd"] = False
    own = fresh.site_dir / "own-nfd.yml"
    own.write_text(yaml.safe_dump(data))
    try:
        r = cli("preflight", str(fresh.site_dir))
        theirs = cli("preflight", str(own))
    finally:
        run_as_root(worker, "systemctl stop fake-nfd; rm -f /usr/local/bin/nfd-worker")
    assert r.rc == 3, r.err[-2000:]
    line = f"error: {worker}: gpu/nfd: runs: nfd-worker (outside Kubernetes)"
    assert line in r.err, r.err[-2000:]
    print("\n".join(x for x in r.err.splitlines() if "gpu/nfd" in x or "gpu.nfd" in x))  # shown by -rP
    flat = " ".join(r.err.split())  # the hint as printed, whatever the terminal's width
    assert "hint: this node has a Node Feature Discovery already: set gpu.nfd: false in appliance.yml" in flat
    assert theirs.rc == 0 and "gpu/nfd" not in theirs.err, theirs.err[-2000:]


def test_an_installed_site_passes(site, installs, cli, tmp_path):
    r = cli("preflight", str(site.site_dir), "--json", str(tmp_path / "p.json"))
    assert r.rc == 0, r.err[-2000:]
    doc = yaml.safe_load((tmp_path / "p.json").read_text())
    by = {(x["node"], x["check"]): x for x in doc["results"]}
    assert doc["counts"]["fail"] == 0
    for n in site.nodes:
        assert by[(n.name, "cri_socket")]["status"] == "pass"
        assert by[(n.name, "tools")]["status"] == "pass"
        assert by[(n.name, "ports")]["status"] == "pass"
        assert by[(n.name, "nfd")]["value"] == "none of another"  # the lab's helm is a stand-in: no pods
        if site.nfs is not None:  # libnfs-utils installed (storage_nfs): the export checked from each node
            assert by[(n.name, "nfs_export")]["status"] == "pass", by[(n.name, "nfs_export")]
    if site.nfs is not None:  # on the master only, and not a skip once the client is there
        assert by[(site.master.name, "nfs_space")]["value"].endswith("GB free")
        assert not [n for n, c in by if c == "nfs_space" and n != site.master.name]
    for n in site.nodes:  # as the install set them
        assert by[(n.name, "cgroup_driver")]["value"] == "kubelet systemd, containerd systemd"


def test_a_kubelet_on_another_cgroup_driver_than_containerd_is_named(site, installs, hosts, cli):
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip(
            "edits a kubelet's configuration: set APPLIANCE_E2E_DESTRUCTIVE=1 to run it on a real site"
        )
    worker = next(n.name for n in site.nodes if "master" not in n.roles)
    conf = "/var/lib/kubelet/config.yaml"
    assert hosts[worker].run(f"sed -i.pre 's/^cgroupDriver: systemd$/cgroupDriver: cgroupfs/' {conf}").rc == 0
    try:
        r = cli("preflight", str(site.site_dir))
    finally:
        assert hosts[worker].run(f"mv {conf}.pre {conf}").rc == 0
    assert r.rc == 3
    assert f"error: {worker}: runtime/cgroup_driver: kubelet cgroupfs, containerd systemd" in r.err
    assert f"appliance install --limit {worker}" in r.err


def test_installed_nodes_reach_the_registry_and_a_stopped_registry_is_named(
    site, installs, hosts, cli, tmp_path
):
    r = cli("preflight", str(site.site_dir), "--json", str(tmp_path / "p.json"))
    assert r.rc == 0, r.err[-2000:]
    by = {(x["node"], x["check"]): x for x in yaml.safe_load((tmp_path / "p.json").read_text())["results"]}
    assert by[(site.master.name, "registry")]["value"] == "answers, TLS trusted, pull credentials accepted"
    for n in site.nodes:
        assert by[(n.name, "registry")]["status"] == "pass", n.name
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip("stops the registry: set APPLIANCE_E2E_DESTRUCTIVE=1 to run it on a real site")
    master = hosts[site.master.name]
    assert master.run("systemctl stop docker-registry").rc == 0
    try:
        stopped = cli("preflight", str(site.site_dir))
    finally:
        assert master.run("systemctl start docker-registry").rc == 0
    assert stopped.rc == 3
    assert f"registry/registry: https://{site.registry.address}/v2/ does not answer" in stopped.err
