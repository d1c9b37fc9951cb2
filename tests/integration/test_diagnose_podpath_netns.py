"""diagnose's netns runner (podpath.IN_POD_NETNS) on this host, run by a real sh, nsenter and ip
inside a network and mount namespace of its own (`unshare`): it finds the namespace that holds the
probe pod's address, as containerd names them (/var/run/netns/cni-*), runs the command there, and
says so in one line when no namespace holds the address."""

from __future__ import annotations

import json
import subprocess
import sys

from appliance_cli.core.checks import podpath

SCRIPT = r"""
import json, subprocess, sys
run = lambda *a: subprocess.run(list(a), capture_output=True, text=True)
for ns, ip in (("cni-one", "10.244.7.2"), ("cni-two", "10.244.7.3")):
    run("ip", "netns", "add", ns)
    run("ip", "-n", ns, "addr", "add", ip + "/24", "dev", "lo")
    run("ip", "-n", ns, "link", "set", "lo", "up")
found = run(*json.loads(sys.argv[1]))
missing = run(*json.loads(sys.argv[2]))
for ns in ("cni-one", "cni-two"):
    run("ip", "netns", "delete", ns)
print(json.dumps({"found": [found.returncode, found.stdout], "missing": [missing.returncode, missing.stderr]}))
"""


def test_the_runner_enters_the_namespace_holding_the_address_and_names_a_missing_one() -> None:
    show = ["ip", "-o", "-4", "addr", "show", "dev", "lo"]
    found, missing = podpath.in_pod("10.244.7.3", show), podpath.in_pod("10.244.9.9", show)
    out = subprocess.run(
        ["unshare", "--net", "--mount", "--propagation", "private", sys.executable, "-c", SCRIPT,
         json.dumps(found), json.dumps(missing)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["found"][0] == 0 and "inet 10.244.7.3/24" in r["found"][1], r
    assert "10.244.7.2" not in r["found"][1], r  # the other pod's namespace, not this one
    assert r["missing"] == [
        3,
        "no network namespace on this node holds the probe pod's address 10.244.9.9\n",
    ], r
