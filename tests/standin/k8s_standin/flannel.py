"""flannel, which cannot be had here: its daemon (the kube-flannel container) and its CNI plugin (the
file /flannel of flannel-cni-plugin, which install-cni-plugin copies to /opt/cni/bin/flannel).

flanneld (`--kube-subnet-mgr`): the node's lease is its spec.podCIDR; it writes /run/flannel/
subnet.env as flannel's WriteSubnetFile does (flannel-io/flannel pkg/subnet/subnetfile_unix.go at
b81aa1a7: FLANNEL_NETWORK, FLANNEL_SUBNET = the lease's first address, FLANNEL_MTU, FLANNEL_IPMASQ),
then keeps one route per other node, `<its podCIDR> via <its InternalIP>`, as the host-gw backend
does (vxlan with DirectRouting sets the same route: vxlan_network.go at 067ed7f6). Limits: whatever
Backend.Type net-conf.json names, the routes are host-gw's (the lab's nodes share one L2 segment);
FLANNEL_MTU is the backend's (vxlan: the link's MTU less its 50-byte header) so the pods see the
MTU a site would; no vxlan device, no node annotations, no iptables masquerade (--ip-masq is only
written to subnet.env).

The CNI plugin: flannel-io/cni-plugin flannel.go at 084d30bd and flannel_linux.go at 6f13a99d. ADD
reads subnet.env, builds the delegate (type bridge, ipMasq = not FLANNEL_IPMASQ, mtu, isGateway,
host-local ranges [[{subnet}]] with a route to FLANNEL_NETWORK), saves it under /var/lib/cni/flannel/
<container id> and runs the delegate; DEL runs the saved delegate's DEL and removes it. The delegate
is Debian's real bridge and host-local plugins.
"""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from typing import Any

from .util import hp, log_klog, read_text, run, write_file

SUBNET_FILE = "/run/flannel/subnet.env"
DATA_DIR = "/var/lib/cni/flannel"
# flannel pkg/backend/vxlan/vxlan_network.go at 067ed7f6: encapOverhead; MTU() is the link's less it
VXLAN_OVERHEAD = 50


# ------------------------------------------------------------------------------------------ flanneld


def subnet_env(network: str, lease: str, mtu: int, ipmasq: bool) -> str:
    sn = ipaddress.ip_network(lease)
    return (
        f"FLANNEL_NETWORK={network}\nFLANNEL_SUBNET={sn.network_address + 1}/{sn.prefixlen}\n"
        f"FLANNEL_MTU={mtu}\nFLANNEL_IPMASQ={'true' if ipmasq else 'false'}\n"
    )


def host_gw_routes(nodes: list[dict], me: str) -> dict[str, str]:
    """{podCIDR: InternalIP} of every other node that has both: the host-gw backend's routes."""
    out = {}
    for n in nodes:
        cidr = (n.get("spec") or {}).get("podCIDR")
        ips = [
            a["address"]
            for a in (n.get("status") or {}).get("addresses") or []
            if a.get("type") == "InternalIP"
        ]
        if n["metadata"]["name"] != me and cidr and ips:
            out[cidr] = ips[0]
    return out


class Flanneld:
    """The kube-flannel container's work, run by the kubelet while that pod runs on this node."""

    def __init__(self, client: Any, node: str, net_conf: str, args: list[str]) -> None:
        self.client, self.node, self.args = client, node, args
        conf = json.loads(net_conf)
        self.network = conf["Network"]
        self.backend = str((conf.get("Backend") or {}).get("Type") or "udp")
        self.routes: dict[str, str] = {}  # what this daemon added: cidr -> gateway
        self.link: tuple[str, int] | None = None

    def _link(self) -> tuple[str, int]:
        """The link of the node's default route and its MTU (flanneld's --iface default), found once."""
        if self.link is None:
            rc, out = run(["ip", "-j", "route", "show", "default"], timeout=10)
            dev = (
                json.loads(out)[0].get("dev") if rc == 0 and out.strip() not in ("", "[]") else None
            ) or "eth0"
            self.link = (dev, int(read_text(hp(f"/sys/class/net/{dev}/mtu")) or 1500))
        return self.link

    def sync(self) -> None:
        nodes = self.client.get("/api/v1/nodes")["items"]
        mine = next((n for n in nodes if n["metadata"]["name"] == self.node), None)
        lease = ((mine or {}).get("spec") or {}).get("podCIDR")
        if not lease:  # kube subnet manager: flanneld waits for the node's podCIDR
            log_klog("E", "standin-flannel", f'"node {self.node} has no podCIDR yet"')  # the stand-in's words
            return
        dev, mtu = self._link()
        mtu = mtu - VXLAN_OVERHEAD if self.backend == "vxlan" else mtu
        text = subnet_env(self.network, lease, mtu, "--ip-masq" in self.args)
        if read_text(hp(SUBNET_FILE)) != text:
            write_file(hp(SUBNET_FILE), text, 0o644)
        want = host_gw_routes(nodes, self.node)
        for cidr, gw in want.items():
            if self.routes.get(cidr) != gw:
                rc, out = run(["ip", "route", "replace", cidr, "via", gw, "dev", dev], timeout=10)
                if rc != 0:
                    log_klog("E", "standin-flannel", f'"route {cidr} via {gw}: {out.strip()}"')
                    continue
                self.routes[cidr] = gw
        for cidr in [c for c in self.routes if c not in want]:  # a node left: its route goes
            run(["ip", "route", "del", cidr], timeout=10)
            del self.routes[cidr]


# -------------------------------------------------------------------------------------- CNI plugin


class CniError(Exception):
    pass


def load_subnet_env(path: str) -> dict[str, Any]:
    text = read_text(hp(path))
    if text is None:
        raise CniError(f"open {path}: no such file or directory")
    env: dict[str, Any] = {}
    for line in text.splitlines():
        k, _, v = line.partition("=")
        if k in ("FLANNEL_NETWORK", "FLANNEL_SUBNET"):
            try:
                env[k] = str(ipaddress.ip_interface(v).network)
            except ValueError:
                raise CniError(f"invalid CIDR address: {v}") from None
        elif k == "FLANNEL_MTU":
            env[k] = int(v)
        elif k == "FLANNEL_IPMASQ":
            env[k] = v == "true"
    missing = [
        m for m in ("FLANNEL_NETWORK", "FLANNEL_SUBNET", "FLANNEL_MTU", "FLANNEL_IPMASQ") if m not in env
    ]
    if missing:  # flannel.go's missing(): both address families are named for an absent one
        names = {"FLANNEL_NETWORK": "FLANNEL_NETWORK, FLANNEL_IPV6_NETWORK",
                 "FLANNEL_SUBNET": "FLANNEL_SUBNET, FLANNEL_IPV6_SUBNET"}  # fmt: skip
        raise CniError(f"{path} is missing {', '.join(names.get(m, m) for m in missing)}")
    return env


def delegate_conf(conf: dict[str, Any], env: dict[str, Any]) -> dict[str, Any]:
    """flannel_linux.go doCmdAdd and getDelegateIPAM: the delegate network config."""
    d = dict(conf.get("delegate") or {})
    if "type" in d and not isinstance(d["type"], str):
        raise CniError("'delegate' dictionary, if present, must have (string) 'type' field")
    for key in ("name", "ipam"):
        if key in d:
            raise CniError(f"'delegate' dictionary must not have '{key}' field, it'll be set by flannel")
    if conf.get("runtimeConfig") is not None:
        d["runtimeConfig"] = conf["runtimeConfig"]
    d["name"] = conf.get("name", "")
    d.setdefault("type", "bridge")
    d.setdefault("ipMasq", not env["FLANNEL_IPMASQ"])
    d.setdefault("mtu", env["FLANNEL_MTU"])
    if d["type"] == "bridge":
        d.setdefault("isGateway", True)
    if conf.get("cniVersion"):
        d["cniVersion"] = conf["cniVersion"]
    ipam = dict(conf.get("ipam") or {})
    ipam.setdefault("type", "host-local")
    ipam["ranges"] = [[{"subnet": env["FLANNEL_SUBNET"]}]]
    ipam["routes"] = [*(ipam.get("routes") or []), {"dst": env["FLANNEL_NETWORK"]}]
    d["ipam"] = ipam
    return d


def _invoke(plugin_type: str, conf: bytes) -> int:
    """Run the delegate from CNI_PATH with this call's environment; its output is ours."""
    for d in os.environ.get("CNI_PATH", "").split(os.pathsep):
        path = os.path.join(d, plugin_type)
        if d and os.access(path, os.X_OK):
            p = subprocess.run([path], input=conf, stdout=subprocess.PIPE, check=False)
            sys.stdout.buffer.write(p.stdout)
            return p.returncode
    raise CniError(f'failed to find plugin "{plugin_type}" in path [{os.environ.get("CNI_PATH", "")}]')


def flannel_cni_main(argv: list[str]) -> int:
    cmd, cid = os.environ.get("CNI_COMMAND", ""), os.environ.get("CNI_CONTAINERID", "")
    try:
        if cmd == "VERSION":
            print(
                json.dumps(
                    {
                        "cniVersion": "1.0.0",
                        "supportedVersions": ["0.1.0", "0.2.0", "0.3.0", "0.3.1", "0.4.0", "1.0.0"],
                    }
                )
            )
            return 0
        try:
            conf = json.loads(sys.stdin.buffer.read() or b"{}")
        except ValueError as e:
            raise CniError(f"failed to load netconf: {e}") from None
        data_dir = hp(conf.get("dataDir") or DATA_DIR)
        scratch = os.path.join(data_dir, cid)
        if cmd == "ADD":
            d = delegate_conf(conf, load_subnet_env(conf.get("subnetFile") or SUBNET_FILE))
            body = json.dumps(d).encode()
            sys.stderr.write(body.decode() + "\n")
            os.makedirs(data_dir, mode=0o700, exist_ok=True)
            write_file(scratch, body, 0o600)
            return _invoke(d["type"], body)
        if cmd == "DEL":
            body_text = read_text(scratch)
            if body_text is None:  # per the spec, DEL of what is gone succeeds
                return 0
            rc = _invoke(json.loads(body_text)["type"], body_text.encode())
            if rc == 0:
                os.remove(scratch)
            return rc
        if cmd == "CHECK":
            return 0
        raise CniError(f"unknown CNI_COMMAND: {cmd}")
    except CniError as e:
        print(json.dumps({"cniVersion": "0.3.1", "code": 999, "msg": str(e)}))
        return 1
