"""flannel's daemon (the kube-flannel container), which cannot be had here. Its CNI plugin is the
real one: the lab's flannel-cni-plugin image carries containernetworking/plugins v0.9.0's flannel
plugin at /flannel (bundles/profiles/lab.yml), and its install-cni-plugin container copies it to
/opt/cni/bin/flannel, as on a site.

flanneld (`--kube-subnet-mgr`): the node's lease is its spec.podCIDR; it writes /run/flannel/
subnet.env as flannel's WriteSubnetFile does (flannel-io/flannel pkg/subnet/subnetfile_unix.go at
b81aa1a7: FLANNEL_NETWORK, FLANNEL_SUBNET = the lease's first address, FLANNEL_MTU, FLANNEL_IPMASQ),
then keeps one route per other node, `<its podCIDR> via <its InternalIP>`, as the host-gw backend
does (vxlan with DirectRouting sets the same route: vxlan_network.go at 067ed7f6). Limits: whatever
Backend.Type net-conf.json names, the routes are host-gw's (the lab's nodes share one L2 segment);
FLANNEL_MTU is the backend's (vxlan: the link's MTU less its 50-byte header) so the pods see the
MTU a site would; no vxlan device, no node annotations, no iptables masquerade (--ip-masq is only
written to subnet.env).
"""

from __future__ import annotations

import ipaddress
import json
from typing import Any

from .util import hp, log_klog, read_text, run, write_file

SUBNET_FILE = "/run/flannel/subnet.env"
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
