"""The stand-in's pod network on this host (tests/standin/k8s_standin/podnet.py), with the real flannel
CNI plugin (tests/_support/real_flannel.py) delegating to Debian's real bridge and host-local, on the
subnet.env the stand-in's flanneld writes (flannel.py), inside a network
and mount namespace of its own (`unshare`), so the host's links and /var/run/netns are untouched:
a sandbox gets an address in the lease behind cni0 and its loopback up (the loopback plugin, as
containerd's CRI runs it first), a second call finds it again, and teardown
releases the address and removes the namespace. The lab e2e runs the same across nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests._support.real_flannel import plugin as real_flannel
from tests.standin.k8s_standin.flannel import subnet_env

REPO = Path(__file__).resolve().parents[2]
CNI = Path("/usr/lib/cni")  # Debian's containernetworking-plugins (scripts/bootstrap.sh)

SCRIPT = r"""
import json, os, subprocess, sys
from tests.standin.k8s_standin import podnet
pod = {"metadata": {"uid": "0f8e3c1a-1111-4222-8333-444455556666", "namespace": "default", "name": "p"}, "spec": {}}
first = podnet.setup(pod)
again = podnet.setup(pod)  # a restarted kubelet: the namespace and its address are found again
sid = podnet.sandbox_id(pod["metadata"]["uid"])
bridge = subprocess.run(["ip", "-4", "-o", "addr", "show", "dev", "cni0"], capture_output=True, text=True).stdout
inside = subprocess.run(["ip", "netns", "exec", "cni-" + pod["metadata"]["uid"], "ip", "-4", "-o", "route"],
                        capture_output=True, text=True).stdout
ping = subprocess.run(["ip", "netns", "exec", "cni-" + pod["metadata"]["uid"], "busybox", "ping", "-c", "1", "-W", "5",
                       "10.244.1.1"], capture_output=True, text=True)
ping = [ping.returncode, ping.stdout + ping.stderr]
lo = subprocess.run(["ip", "netns", "exec", "cni-" + pod["metadata"]["uid"], "ip", "-o", "link", "show", "lo"],
                    capture_output=True, text=True).stdout
allocated = sorted(os.listdir(sys.argv[1]))
err = podnet.teardown(pod)
print(json.dumps({"first": first, "again": again, "sid": sid, "bridge": bridge, "inside": inside, "ping": ping, "lo": lo,
                  "allocated": allocated, "err": err, "after": sorted(os.listdir(sys.argv[1])),
                  "netns": os.path.exists("/var/run/netns/cni-" + pod["metadata"]["uid"]),
                  "leftover": sorted(podnet.leftover_uids())}))
"""


def test_a_sandbox_gets_a_lease_address_keeps_it_and_gives_it_back(tmp_path: Path) -> None:
    root, ipam = tmp_path / "root", tmp_path / "ipam"
    bindir = root / "opt/cni/bin"
    bindir.mkdir(parents=True)
    for plugin in ("bridge", "host-local", "portmap", "loopback"):
        (bindir / plugin).symlink_to(CNI / plugin)
    (bindir / "flannel").symlink_to(real_flannel())  # the real one, as install-cni-plugin leaves it
    (root / "run/flannel").mkdir(parents=True)
    (root / "run/flannel/subnet.env").write_text(subnet_env("10.244.0.0/16", "10.244.1.0/24", 1450, True))
    conf = {"name": "cbr0", "cniVersion": "0.3.1", "plugins": [
        {"type": "flannel", "delegate": {"hairpinMode": True, "isDefaultGateway": True},
         # the real plugin reads the host's paths: its STANDIN_ROOT ones, named here
         "subnetFile": str(root / "run/flannel/subnet.env"), "dataDir": str(root / "var/lib/cni/flannel"),
         "ipam": {"dataDir": str(ipam)}},  # host-local's store under tmp, not the host's /var/lib/cni
        {"type": "portmap", "capabilities": {"portMappings": True}}]}  # fmt: skip
    (root / "etc/cni/net.d").mkdir(parents=True)
    (root / "etc/cni/net.d/10-flannel.conflist").write_text(json.dumps(conf))
    (root / "var/run").mkdir(parents=True)
    (root / "var/run/netns").symlink_to("/var/run/netns")  # `ip netns` works on the real path
    env = {**os.environ, "STANDIN_ROOT": str(root)}
    out = subprocess.run(
        ["unshare", "--net", "--mount", "--propagation", "private", sys.executable, "-c", SCRIPT,
         str(ipam / "cbr0")],
        capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["first"] == r["again"] == "10.244.1.2", r
    assert len(r["sid"]) == 64, r
    assert " 10.244.1.1/24 " in r["bridge"], r  # the bridge is the lease's gateway
    assert "default via 10.244.1.1" in r["inside"] and "10.244.0.0/16 via 10.244.1.1" in r["inside"], r
    assert r["ping"][0] == 0, r["ping"]  # the pod reaches its gateway over the veth
    assert "<LOOPBACK,UP,LOWER_UP>" in r["lo"], r
    assert "10.244.1.2" in r["allocated"], r
    assert r["err"] is None and "10.244.1.2" not in r["after"], r  # DEL released the address
    assert r["netns"] is False and r["leftover"] == [], r
