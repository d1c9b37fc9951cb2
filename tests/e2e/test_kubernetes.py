"""Issue 4: after `appliance install` every node is joined and Ready with the site's labels, and the
container runtime is configured as specified. kubectl runs on the master with the admin kubeconfig,
so the same tests run unchanged against a real appliance (APPLIANCE_E2E_SITE)."""

from __future__ import annotations

import json
import os
import shlex
import time

import pytest

from tests._support import pinned_pods

pytestmark = pytest.mark.usefixtures("installs")

# The keys Run:ai reads (what `runai-adm set node-role` writes; SEED-COVERAGE K1)
ROLE_LABELS = {
    "runai-system": "node-role.kubernetes.io/runai-system",
    "gpu-worker": "node-role.kubernetes.io/runai-gpu-worker",
    "cpu-worker": "node-role.kubernetes.io/runai-cpu-worker",
}


@pytest.fixture(scope="module")
def nodes(site, hosts) -> dict[str, dict]:
    raw = hosts[site.master.name].check_output(
        "kubectl --kubeconfig /etc/kubernetes/admin.conf get nodes -o json"
    )
    return {n["metadata"]["name"]: n for n in json.loads(raw)["items"]}


def test_every_node_joined_and_ready_at_the_site_version(site, nodes):
    assert set(nodes) == {n.name for n in site.nodes}
    for name, node in nodes.items():
        ready = {c["type"]: c["status"] for c in node["status"]["conditions"]}.get("Ready")
        assert ready == "True", f"{name}: Ready={ready}"
        assert node["status"]["nodeInfo"]["kubeletVersion"] == site.kubernetes.version, name
        assert node["status"]["nodeInfo"]["containerRuntimeVersion"].startswith("containerd://"), name


def test_labels_and_taints_follow_the_site_config(site, nodes):
    for n in site.nodes:
        labels = nodes[n.name]["metadata"]["labels"]
        for role, label in ROLE_LABELS.items():
            assert (labels.get(label) == "true") == (role in n.roles), (
                f"{n.name}: {label}={labels.get(label)}"
            )
        assert labels.get("run.ai/type") == n.hardware_class, n.name
        assert ("node-role.kubernetes.io/control-plane" in labels) == ("master" in n.roles), n.name
        assert not {"node-role.kubernetes.io/gpu-worker", "node-role.kubernetes.io/cpu-worker"} & set(labels)
        taints = {(t["key"], t["effect"]) for t in nodes[n.name]["spec"].get("taints") or []}
        # every master keeps its taint, a Run:ai system node too (K13); no worker has it
        assert (("node-role.kubernetes.io/master", "NoSchedule") in taints) == ("master" in n.roles), n.name


def test_pod_network_is_the_site_pod_cidr(site, nodes):
    import ipaddress

    pods = ipaddress.ip_network(site.kubernetes.pod_cidr)
    cidrs = [ipaddress.ip_network(n["spec"]["podCIDR"]) for n in nodes.values()]
    assert all(c.subnet_of(pods) for c in cidrs) and len(set(cidrs)) == len(cidrs)


def test_containerd_configured_as_specified(site, hosts):
    reg = site.registry.address
    for name, host in hosts.items():
        assert host.service("containerd").is_running and host.service("containerd").is_enabled, name
        conf = host.file("/etc/containerd/config.toml")
        assert conf.mode == 0o600 and conf.user == "root", f"{name}: holds the pull password"
        cfg = json.loads(
            host.check_output(
                "python3 -c \"import json,tomllib; print(json.dumps(tomllib.load(open('/etc/containerd/config.toml','rb'))))\""
            )
        )
        assert cfg["version"] == 2, name
        cri = cfg["plugins"]["io.containerd.grpc.v1.cri"]
        assert cri["sandbox_image"] == f"{reg}/pause:3.6", name
        assert cri["containerd"]["runtimes"]["runc"]["options"]["SystemdCgroup"] is True, name
        assert cri["registry"]["config_path"] == "/etc/containerd/certs.d", name
        assert set(cri["registry"]["configs"][reg]["auth"]) == {"username", "password"}, name
        hosts_toml = host.file(f"/etc/containerd/certs.d/{reg}/hosts.toml")
        assert hosts_toml.contains(f'server = "https://{reg}"'), name
        assert hosts_toml.contains('ca = "/usr/local/share/ca-certificates/appliance-registry-ca.crt"'), name
        # the running daemon took this config (not only the file on disk)
        info = json.loads(host.check_output("crictl info"))
        assert info["config"]["sandboxImage"] == f"{reg}/pause:3.6", name


def test_kubelet_uses_the_systemd_cgroup_driver_and_containerd(hosts):
    for name, host in hosts.items():
        assert host.service("kubelet").is_running and host.service("kubelet").is_enabled, name
        kcfg = host.file("/var/lib/kubelet/config.yaml")
        assert kcfg.contains("cgroupDriver: systemd"), name
        assert host.file("/etc/kubernetes/kubelet.conf").exists, name


def test_versions_recorded_for_upgrade_planning(site, hosts):
    for name, host in hosts.items():
        fact = json.loads(host.file("/etc/ansible/facts.d/appliance_kube.fact").content_string)
        assert site.kubernetes.version in json.dumps(fact), f"{name}: {fact}"
        assert fact.get("cni_plugins"), f"{name}: no CNI plugins release in {fact}"


def test_cni_reference_plugins_unpacked_from_the_bundle(hosts):
    """From the bundle's cni-plugins release tarball (the lab's is Debian's build packed the same way):
    plain executables in containerd's bin_dir, not links into a package's directory."""
    for name, host in hosts.items():
        for plugin in ("bridge", "host-local", "loopback", "portmap"):
            f = host.file(f"/opt/cni/bin/{plugin}")
            assert f.is_file and not f.is_symlink and f.mode == 0o755 and f.user == "root", (
                f"{name}: {plugin}"
            )


def test_a_configuration_the_running_containerd_never_loaded_is_reported(site, hosts, cli):
    """The runtime is judged by the running daemon, not by its file: a config.toml written after
    containerd started (a missed restart) fails the run naming the node; after a restart it passes."""
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip(
            "touches a node's containerd configuration: set APPLIANCE_E2E_DESTRUCTIVE=1 on a real site"
        )
    name = next(n.name for n in site.nodes if "master" not in n.roles)
    node = hosts[name]
    assert node.run("touch /etc/containerd/config.toml").rc == 0
    stale = cli(
        "install", str(site.site_dir), "--limit", name, "--tags", "container_runtime", "--skip-preflight"
    )
    assert node.run("systemctl restart containerd").rc == 0
    assert stale.rc == 5
    assert (
        f"error: {name}: task 'Containerd | The daemon runs the written configuration with its CRI plugin' failed: "
        f"containerd on {name}: it started before /etc/containerd/config.toml was last written"
    ) in stale.err
    again = cli(
        "install", str(site.site_dir), "--limit", name, "--tags", "container_runtime", "--skip-preflight"
    )
    assert again.rc == 0, again.err[-2000:]
    cri = node.check_output("ctr plugins ls | awk '$2 == \"cri\" {print $4}'")
    assert cri == "ok"


def _kubectl(site, hosts, *args: str) -> str:
    return hosts[site.master.name].check_output(
        shlex.join(["kubectl", "--kubeconfig", "/etc/kubernetes/admin.conf", *args])
    )


def test_every_daemonset_pod_pulled_its_images_from_the_registry_and_runs(site, hosts):
    """flannel and kube-proxy on every node: Running only when every image pulled through the
    node's containerd (its registry CA and credentials), present in containerd's k8s.io store."""
    pods = json.loads(_kubectl(site, hosts, "get", "pods", "-A", "-o", "json"))["items"]
    by_ds: dict[str, set[str]] = {}
    for p in pods:
        owner = (p["metadata"].get("ownerReferences") or [{}])[0]
        if owner.get("kind") == "DaemonSet":
            assert p["status"]["phase"] == "Running", (p["metadata"]["name"], p["status"])
            by_ds.setdefault(owner["name"], set()).add(p["spec"]["nodeName"])
            images = [c["image"] for c in p["spec"].get("initContainers", []) + p["spec"]["containers"]]
            stored = hosts[p["spec"]["nodeName"]].check_output("ctr -n k8s.io images ls -q").split()
            assert set(images) <= set(stored), (p["spec"]["nodeName"], images)
    every = {n.name for n in site.nodes}
    assert by_ds == {"kube-flannel-ds": every, "kube-proxy": every}


def test_flannels_install_cni_ran_in_a_container_and_copied_its_configmap_volume_to_the_host(site, hosts):
    """install-cni-plugin and install-cni are init containers: on every node each ran to exit 0 in
    containerd (its container is in the k8s.io namespace, labelled with its name and its pod's
    uid). The first copied the real flannel CNI plugin out of its image to /opt/cni/bin/flannel;
    the CNI config the second copied out of the kube-flannel-cfg ConfigMap's volume is that
    ConfigMap's cni-conf.json."""
    import hashlib

    from tests._support.real_flannel import plugin

    real = hashlib.sha256(plugin().read_bytes()).hexdigest()
    cm = json.loads(
        _kubectl(site, hosts, "-n", "kube-flannel", "get", "configmap", "kube-flannel-cfg", "-o", "json")
    )
    want = json.loads(cm["data"]["cni-conf.json"])
    pods = json.loads(_kubectl(site, hosts, "-n", "kube-flannel", "get", "pods", "-o", "json"))["items"]
    assert {p["spec"]["nodeName"] for p in pods} == {n.name for n in site.nodes}
    for p in pods:
        node, uid = hosts[p["spec"]["nodeName"]], p["metadata"]["uid"]
        for init in ("install-cni-plugin", "install-cni"):
            (status,) = [s for s in p["status"]["initContainerStatuses"] if s["name"] == init]
            assert status["state"]["terminated"]["exitCode"] == 0, (p["spec"]["nodeName"], status)
            match = f'labels."io.kubernetes.container.name"=={init},labels."io.kubernetes.pod.uid"=={uid}'
            ran = node.check_output(
                shlex.join(["ctr", "-n", "k8s.io", "containers", "ls", "-q", match])
            ).split()
            assert ran, f"{p['spec']['nodeName']}: no {init} container of pod {uid} in containerd"
        copied = node.check_output("sha256sum /opt/cni/bin/flannel").split()[0]
        assert copied == real, f"{p['spec']['nodeName']}: /opt/cni/bin/flannel is not the real plugin"
        conflist = json.loads(node.check_output("cat /etc/cni/net.d/10-flannel.conflist"))
        assert conflist == want, p["spec"]["nodeName"]
        volume = f"/var/lib/kubelet/pods/{uid}/volumes/kubernetes.io~configmap/flannel-cfg"
        listing = node.check_output(shlex.join(["ls", "-la", volume]))
        assert "..data ->" in listing and "cni-conf.json -> ..data/cni-conf.json" in listing, listing
        print(
            f"{p['spec']['nodeName']}: install-cni-plugin and install-cni exit 0, /opt/cni/bin/flannel sha256 "
            f"{copied[:16]}... (the real plugin's); {volume}:\n{listing}"
        )


def test_a_failing_init_container_holds_its_pod_and_a_missing_configmap_is_failed_mount(site, hosts):
    """Two pods on a worker, with flannel's image (in the private registry on every site): one whose
    init container exits 3 never starts its app container, and kubectl reads Init:Error (or, after
    restarts, Init:CrashLoopBackOff) from its status; one mounting a ConfigMap that does not exist
    waits in ContainerCreating, with the kubelet's FailedMount event naming it."""
    master = hosts[site.master.name]
    jsonpath = "jsonpath={.spec.template.spec.containers[0].image}"
    image = _kubectl(site, hosts, "-n", "kube-flannel", "get", "ds", "kube-flannel-ds", "-o", jsonpath)
    worker = next(n.name for n in site.nodes if "master" not in n.roles)
    app = {"name": "app", "image": image, "command": ["sleep", "3600"]}
    specs = {
        "init-fails": {"initContainers": [{"name": "fails", "image": image, "command": ["sh", "-c", "exit 3"]}],
                       "containers": [app]},
        "no-configmap": {"containers": [dict(app, volumeMounts=[{"name": "cfg", "mountPath": "/cfg"}])],
                         "volumes": [{"name": "cfg", "configMap": {"name": "appliance-e2e-missing"}}]},
    }  # fmt: skip
    names = {k: f"appliance-e2e-{k}" for k in specs}
    for k, spec in specs.items():
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": names[k], "namespace": "default"},
               "spec": {"nodeName": worker, "tolerations": [{"operator": "Exists"}], **spec}}  # fmt: skip
        master.check_output(
            f"echo {shlex.quote(json.dumps(pod))} | {shlex.join([*pinned_pods.KUBECTL, 'apply', '-f', '-'])}"
        )
    try:
        deadline, table, events = time.monotonic() + 90, "", ""
        while time.monotonic() < deadline:
            table = _kubectl(site, hosts, "get", "pods", "-n", "default", *names.values())
            events = pinned_pods.events(master, names["no-configmap"])
            status = {
                f[0]: f[2] for f in (line.split() for line in table.splitlines()[1:])
            }  # NAME READY STATUS
            if status.get(names["init-fails"], "").startswith("Init:") and "FailedMount" in events:
                break
            time.sleep(3)
        print(table + "\n" + events)
        assert status[names["init-fails"]] in ("Init:Error", "Init:CrashLoopBackOff"), table
        failed = json.loads(
            _kubectl(site, hosts, "get", "pod", "-n", "default", names["init-fails"], "-o", "json")
        )
        init = failed["status"]["initContainerStatuses"][0]
        ended = init["state"].get("terminated") or init.get("lastState", {}).get("terminated") or {}
        assert ended.get("exitCode") == 3, init
        assert failed["status"]["containerStatuses"][0]["state"] == {"waiting": {"reason": "PodInitializing"}}
        assert status[names["no-configmap"]] == "ContainerCreating", table
        assert (
            'MountVolume.SetUp failed for volume "cfg" : configmap "appliance-e2e-missing" not found'
            in " ".join(events.split())
        ), events
        assert "Pulled" not in events and "Started" not in events, events  # volumes come before any pull
    finally:
        pinned_pods.delete(master, names)


def test_pods_on_every_node_reach_each_other_over_the_pod_network(site, hosts, nodes):
    """A pod pinned to each node gets an address in its node's podCIDR from the CNI config flannel
    installed, behind the node's cni0 bridge (flannel's subnet.env names the same lease), its
    container runs in containerd in that network namespace, and it reaches every other node's pod
    from inside the namespace. Deleting the pods releases their addresses and namespaces, and
    removes their containers. (The lab: Debian's bridge and host-local under the real flannel
    plugin, with the stand-in flanneld's subnet.env and host-gw routes; a site: flanneld's own.)"""
    import ipaddress

    master = hosts[site.master.name]
    names = {n.name: f"podnet-check-{n.name}" for n in site.nodes}
    pinned_pods.start(master, names)
    try:
        ips = pinned_pods.addresses(master, names)
        assert set(ips) == set(names), f"pods running with an address: {ips}; " + "; ".join(
            pinned_pods.events(master, p) for n, p in names.items() if n not in ips
        )
        for node, ip in ips.items():
            cidr = ipaddress.ip_network(nodes[node]["spec"]["podCIDR"])
            assert ipaddress.ip_address(ip) in cidr, (node, ip, cidr)
            gateway = f"{cidr.network_address + 1}/{cidr.prefixlen}"
            assert f"FLANNEL_SUBNET={gateway}" in hosts[node].file("/run/flannel/subnet.env").content_string
            assert f" {gateway} " in hosts[node].check_output("ip -4 -o addr show dev cni0"), node
        rows, shown = [], ""
        for node, ip in ips.items():
            find = ("for ns in $(ip netns list | cut -d' ' -f1); do ip -n \"$ns\" -4 -o addr | grep -q "
                    f"{shlex.quote(' ' + ip + '/')} && echo \"$ns\"; done")  # fmt: skip
            netns = hosts[node].check_output(find).split()
            assert len(netns) == 1, (node, ip, netns)
            # the pod's container runs in that namespace (containerd's task, found through crictl)
            sandbox = hosts[node].check_output(
                shlex.join(["crictl", "pods", "--name", f"^{names[node]}$", "-q"])
            )
            assert len(sandbox.split()) == 1, (node, sandbox)
            cid = (
                hosts[node]
                .check_output(shlex.join(["crictl", "ps", "--pod", sandbox.split()[0], "-q"]))
                .split()
            )
            assert len(cid) == 1, (node, cid)
            tasks = hosts[node].check_output("ctr -n k8s.io tasks ls").splitlines()[1:]
            pid = next(t.split()[1] for t in tasks if t.split()[0] == cid[0] and t.split()[2] == "RUNNING")
            assert hosts[node].check_output(f"ip netns identify {pid}").split() == netns, (node, pid)
            if node != site.master.name:
                shown = f"crictl ps on {node}:\n" + hosts[node].check_output("crictl ps")
            for other, other_ip in ips.items():
                if other != node:
                    ping = hosts[node].run(shlex.join(["ip", "netns", "exec", netns[0], "ping", "-c", "1",
                                                       "-W", "2", other_ip]))  # fmt: skip
                    rows.append(f"{node} {ip} -> {other} {other_ip}: rc {ping.rc}")
                    assert ping.rc == 0, (node, other, ping.stdout, ping.stderr)
        print("\n".join(rows))
        print(shown)
    finally:
        pinned_pods.delete(master, names)
    for node, ip in ips.items():
        deadline = time.monotonic() + 30
        while hosts[node].file(f"/var/lib/cni/networks/cbr0/{ip}").exists and time.monotonic() < deadline:
            time.sleep(1)
        assert not hosts[node].file(f"/var/lib/cni/networks/cbr0/{ip}").exists, (
            f"{node}: {ip} still allocated"
        )
        left = hosts[node].check_output(shlex.join(["crictl", "pods", "--name", f"^{names[node]}$", "-q"]))
        assert left.split() == [], f"{node}: the pod's sandbox is still there: {left}"


def test_a_node_whose_flannel_image_cannot_be_pulled_is_not_ready(site, hosts):
    """The lab fails where a site would: with flannel's image missing from the registry, the pod
    is ErrImagePull naming the image, the kubelet's events say so, nothing writes the node's CNI
    config, and a node without one (a new node, here a removed file) stays NotReady; the right
    image brings it back."""
    if os.environ.get("APPLIANCE_E2E_SITE") and os.environ.get("APPLIANCE_E2E_DESTRUCTIVE") != "1":
        pytest.skip("breaks a node's network: set APPLIANCE_E2E_DESTRUCTIVE=1 on a real site")
    name = next(n.name for n in site.nodes if "master" not in n.roles)
    good = _kubectl(site, hosts, "-n", "kube-flannel", "get", "ds", "kube-flannel-ds", "-o",
                    "jsonpath={.spec.template.spec.initContainers[1].image}")  # fmt: skip
    missing = good.rsplit(":", 1)[0] + ":v0.0.0-missing"
    hosts[name].check_output("rm -f /etc/cni/net.d/10-flannel.conflist")
    try:
        _set_flannel_image(site, hosts, missing)
        # the heartbeat after the file went reports NotReady, and nothing brings it back
        _kubectl(site, hosts, "wait", "--for=condition=Ready=false", f"node/{name}", "--timeout=60s")
        time.sleep(15)
        node = json.loads(_kubectl(site, hosts, "get", "node", name, "-o", "json"))
        ready = next(c for c in node["status"]["conditions"] if c["type"] == "Ready")
        assert ready["status"] == "False", f"{name} became Ready again without flannel's image"
        pods = json.loads(_kubectl(site, hosts, "-n", "kube-flannel", "get", "pods", "-o", "json"))["items"]
        pod = next(p for p in pods if p["spec"]["nodeName"] == name)
        waiting = pod["status"]["initContainerStatuses"][1]["state"]["waiting"]
        assert waiting["reason"] in ("ErrImagePull", "ImagePullBackOff")
        assert f'image "{missing}"' in waiting["message"]  # the pull's error, or the back-off line
        # the kubelet's events, as an operator reads them (Debian's kubectl selects them by the pod)
        described = _kubectl(site, hosts, "-n", "kube-flannel", "describe", "pod", pod["metadata"]["name"])
        events = described[described.index("Events:") :]
        assert f'Failed to pull image "{missing}": ' in events, events
        assert "Error: ErrImagePull" in events, events
        assert f'Back-off pulling image "{missing}"' in events, events
        assert not hosts[name].file("/etc/cni/net.d/10-flannel.conflist").exists
    finally:
        _set_flannel_image(site, hosts, good)
    hosts[site.master.name].check_output(
        f"kubectl --kubeconfig /etc/kubernetes/admin.conf wait --for=condition=Ready node/{name} --timeout=120s"
    )
    assert hosts[name].file("/etc/cni/net.d/10-flannel.conflist").exists


def _set_flannel_image(site, hosts, image: str) -> None:
    """Rewrite install-cni's image in the applied manifest and re-apply it, as an operator would."""
    manifest = "/etc/kubernetes/addons/kube-flannel.yml"
    master = hosts[site.master.name]
    doc = master.check_output(f"cat {manifest}")
    lines = doc.splitlines()
    # install-cni is the second init container: its image line follows "- name: install-cni"
    i = next(k for k, ln in enumerate(lines) if ln.strip() == "- name: install-cni")
    j = next(k for k in range(i, len(lines)) if lines[k].strip().startswith("image:"))
    indent = lines[j][: len(lines[j]) - len(lines[j].lstrip())]
    lines[j] = f'{indent}image: "{image}"'
    master.check_output(
        "cat > /tmp/kube-flannel-test.yml <<'EOF'\n" + "\n".join(lines) + "\nEOF\n"
        "kubectl --kubeconfig /etc/kubernetes/admin.conf apply -f /tmp/kube-flannel-test.yml"
    )
