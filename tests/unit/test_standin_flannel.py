"""The stand-in's flannel (tests/standin/k8s_standin/flannel.py): subnet.env as flannel writes it,
the host-gw routes, and the CNI meta-plugin's delegate as flannel-io/cni-plugin builds it, run
against a recording delegate in CNI_PATH (the lab runs Debian's real bridge and host-local)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.standin.k8s_standin.flannel import CniError, delegate_conf, host_gw_routes, subnet_env

REPO = Path(__file__).resolve().parents[2]
CONF = {"name": "cbr0", "cniVersion": "0.3.1", "type": "flannel",
        "delegate": {"hairpinMode": True, "isDefaultGateway": True}}  # fmt: skip
ENV = {"FLANNEL_NETWORK": "10.244.0.0/16", "FLANNEL_SUBNET": "10.244.1.0/24", "FLANNEL_MTU": 1450,
       "FLANNEL_IPMASQ": True}  # fmt: skip


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


def test_the_delegate_is_a_gateway_bridge_on_the_lease_with_a_route_to_the_network() -> None:
    assert delegate_conf(CONF, ENV) == {
        "hairpinMode": True, "isDefaultGateway": True, "name": "cbr0", "type": "bridge", "ipMasq": False,
        "mtu": 1450, "isGateway": True, "cniVersion": "0.3.1",
        "ipam": {"type": "host-local", "ranges": [[{"subnet": "10.244.1.0/24"}]], "routes": [{"dst": "10.244.0.0/16"}]},
    }  # fmt: skip


@pytest.mark.parametrize("key", ["name", "ipam"])
def test_a_delegate_that_sets_what_flannel_sets_is_refused_in_flannels_words(key: str) -> None:
    with pytest.raises(
        CniError, match=f"'delegate' dictionary must not have '{key}' field, it'll be set by flannel"
    ):
        delegate_conf({**CONF, "delegate": {key: "x"}}, ENV)


def _plugin(tmp_path: Path, command: str, stdin: dict, cid: str = "sb1") -> subprocess.CompletedProcess:
    bindir = tmp_path / "bin"
    bindir.mkdir(exist_ok=True)
    bridge = bindir / "bridge"  # records what it was given, answers a result with one address
    bridge.write_text('#!/bin/sh\ncat > "$(dirname "$0")/got-$CNI_COMMAND.json"\n'
                      'echo \'{"cniVersion":"0.3.1","ips":[{"version":"4","address":"10.244.1.2/24"}]}\'\n')  # fmt: skip
    bridge.chmod(0o755)
    env = {**os.environ, "CNI_COMMAND": command, "CNI_CONTAINERID": cid, "CNI_NETNS": "/var/run/netns/x",
           "CNI_IFNAME": "eth0", "CNI_PATH": str(bindir), "STANDIN_ROOT": str(tmp_path / "root")}  # fmt: skip
    code = "import sys; from tests.standin.k8s_standin.flannel import flannel_cni_main; sys.exit(flannel_cni_main([]))"
    return subprocess.run([sys.executable, "-c", code], input=json.dumps(stdin).encode(), capture_output=True,
                          env=env, cwd=REPO, check=False)  # fmt: skip


def test_the_plugin_delegates_add_saves_it_and_deletes_with_what_it_saved(tmp_path: Path) -> None:
    no_env = _plugin(tmp_path, "ADD", CONF)
    assert no_env.returncode == 1
    assert json.loads(no_env.stdout)["msg"] == "open /run/flannel/subnet.env: no such file or directory"
    env = tmp_path / "root/run/flannel/subnet.env"
    env.parent.mkdir(parents=True)
    env.write_text(subnet_env("10.244.0.0/16", "10.244.1.0/24", 1450, True))
    add = _plugin(tmp_path, "ADD", CONF)
    assert add.returncode == 0, add
    assert (
        json.loads(add.stdout)["ips"][0]["address"] == "10.244.1.2/24"
    )  # the delegate's result is the plugin's
    given = json.loads((tmp_path / "bin/got-ADD.json").read_text())
    assert given == delegate_conf(CONF, {**ENV, "FLANNEL_MTU": 1450})
    saved = tmp_path / "root/var/lib/cni/flannel/sb1"
    assert json.loads(saved.read_text()) == given and saved.stat().st_mode & 0o777 == 0o600
    delete = _plugin(tmp_path, "DEL", {"name": "cbr0", "type": "flannel"})
    assert delete.returncode == 0 and json.loads((tmp_path / "bin/got-DEL.json").read_text()) == given
    assert not saved.exists()
    assert _plugin(tmp_path, "DEL", {"name": "cbr0", "type": "flannel"}).returncode == 0  # gone: DEL succeeds


def test_a_subnet_file_missing_a_key_is_named(tmp_path: Path) -> None:
    env = tmp_path / "root/run/flannel/subnet.env"
    env.parent.mkdir(parents=True)
    env.write_text("FLANNEL_NETWORK=10.244.0.0/16\nFLANNEL_SUBNET=10.244.1.1/24\n")
    out = _plugin(tmp_path, "ADD", CONF)
    assert out.returncode == 1
    assert json.loads(out.stdout)["msg"] == "/run/flannel/subnet.env is missing FLANNEL_MTU, FLANNEL_IPMASQ"
