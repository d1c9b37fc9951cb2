"""The stand-in's flanneld (tests/standin/k8s_standin/flannel.py): subnet.env as flannel writes it
and the host-gw routes; then the real flannel CNI plugin (the one the lab's flannel-cni-plugin image
carries: tests/_support/real_flannel.py) reading that subnet.env, run against a recording delegate
in CNI_PATH (the lab runs Debian's real bridge and host-local under it)."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from tests._support.real_flannel import plugin
from tests.standin.k8s_standin.flannel import host_gw_routes, subnet_env

CONF = {"name": "cbr0", "cniVersion": "0.3.1", "type": "flannel",
        "delegate": {"hairpinMode": True, "isDefaultGateway": True}}  # fmt: skip


def test_subnet_env_names_the_leases_first_address_as_flannel_writes_it() -> None:
    assert subnet_env("10.244.0.0/16", "10.244.1.0/24", 1450, True) == (
        "FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\nFLANNEL_MTU=1450\nFLANNEL_IPMASQ=true\n"
    )


def test_host_gw_routes_go_to_every_other_node_with_a_pod_cidr() -> None:
    def node(name: str, cidr: str | None, ip: str) -> dict:
        return {"metadata": {"name": name}, "spec": {"podCIDR": cidr} if cidr else {},
                "status": {"addresses": [{"type": "Hostname", "address": name}, {"type": "InternalIP", "address": ip}]}}  # fmt: skip

    nodes = [node("m1", "10.244.0.0/24", "10.77.0.11"), node("w1", "10.244.1.0/24", "10.77.0.12"),
             node("w2", None, "10.77.0.13")]  # fmt: skip
    assert host_gw_routes(nodes, "w1") == {"10.244.0.0/24": "10.77.0.11"}


def _plugin(tmp_path: Path, command: str, conf: dict, cid: str = "sb1") -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    bridge = bindir / "bridge"  # records what it was given, answers a result with one address
    bridge.write_text('#!/bin/sh\ncat > "$(dirname "$0")/got-$CNI_COMMAND.json"\n'
                      'echo \'{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.244.1.2/24"}]}\'\n')  # fmt: skip
    bridge.chmod(0o755)
    env = {**os.environ, "CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": "/var/run/netns/x",
           "CNI_IFNAME": "eth0", "CNI_PATH": str(bindir)}  # fmt: skip
    conf = {**conf, "subnetFile": str(tmp_path / "run/subnet.env"), "dataDir": str(tmp_path / "data")}
    return subprocess.run([str(plugin())], input=json.dumps(conf).encode(), capture_output=True, env=env,
                          check=False, timeout=30)  # fmt: skip


def test_the_real_plugin_reads_the_standins_subnet_env_and_delegates_a_gateway_bridge(tmp_path: Path) -> None:
    no_env = _plugin(tmp_path, "ADD", CONF)
    assert no_env.returncode == 1
    assert json.loads(no_env.stdout)["msg"] == f"open {tmp_path}/run/subnet.env: no such file or directory"
    env = tmp_path / "run/subnet.env"
    env.parent.mkdir(parents=True)
    env.write_text(subnet_env("10.244.0.0/16", "10.244.1.0/24", 1450, True))
    add = _plugin(tmp_path, "ADD", CONF)
    assert add.returncode == 0, add
    # the delegate's result is the plugin's
    assert json.loads(add.stdout)["ips"][0]["address"] == "10.244.1.2/24"
    given = json.loads((tmp_path / "bin/got-ADD.json").read_text())
    assert given == {  # FLANNEL_IPMASQ=true: flanneld masquerades, so the bridge does not
        "cniVersion": "0.3.1", "name": "cbr0", "type": "bridge", "hairpinMode": True, "isDefaultGateway": True,
        "ipMasq": False, "isGateway": True, "mtu": 1450,
        "ipam": {"type": "host-local", "subnet": "10.244.1.0/24", "routes": [{"dst": "10.244.0.0/16"}]},
    }  # fmt: skip
    saved = tmp_path / "data/sb1"
    assert json.loads(saved.read_text()) == given and saved.stat().st_mode & 0o777 == 0o600
    delete = _plugin(tmp_path, "DEL", {"name": "cbr0", "cniVersion": "0.3.1", "type": "flannel"})
    assert delete.returncode == 0 and json.loads((tmp_path / "bin/got-DEL.json").read_text()) == given
    assert not saved.exists()


def test_a_subnet_file_missing_a_key_is_named_by_the_real_plugin(tmp_path: Path) -> None:
    env = tmp_path / "run/subnet.env"
    env.parent.mkdir(parents=True)
    env.write_text("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n")
    out = _plugin(tmp_path, "ADD", CONF)
    assert out.returncode == 1
    assert json.loads(out.stdout)["msg"] == f"{env} is missing FLANNEL_MTU, FLANNEL_IPMASQ"
