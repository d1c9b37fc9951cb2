"""The pod network path for `appliance diagnose`: one probe pod per node, pinned with spec.nodeName,
running the site's sandbox (pause) image on the pod network; how long each took from its creation
to Running; then the node path's own test (diagnose.measure_network) run inside the probe pods'
network namespaces, each node's pod to the master's pod, so each row sets the pod path beside the
node path beneath it; then the round trip between every pair of probe pods. The probes go at the
end, whatever happened. The nodes need nothing new: the test enters the pod's namespace with
nsenter and runs the node's python3 there (the pause image has no shell)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance_cli.core import cluster
from appliance_cli.core.checks.model import NOISE_FLOOR, CheckResult, NodeFacts, Status
from appliance_cli.core.checks.probe import parse, run_error
from appliance_cli.core.paths import PATHS
from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError

if TYPE_CHECKING:  # diagnose imports this module
    from appliance_cli.core.checks.diagnose import Transport

NAMESPACE = "default"
LABEL = "appliance.io/probe"  # = pod-network, on every probe pod
SELECTOR = f"{LABEL}=pod-network"
PROBE_TIMEOUT_S = 90.0  # creation to Running: a pull from the private registry, a sandbox, a start
POD_PATH_SHARE = 0.5  # a pod path below this share of its node path's throughput is named
PAIR_SLOW = 2.0  # a pair of pods this many times the median pair's round trip is named
# kubeadm writes the kubelet's flags here (cmd/kubeadm/app/constants: KubeletRunDirectory,
# KubeletEnvFileName); with docker, the sandbox image is its --pod-infra-container-image
KUBEADM_FLAGS = "/var/lib/kubelet/kubeadm-flags.env"
_IMAGE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:/@-]{0,254}")
_IPV4 = re.compile(
    r"(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])(\.(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])){3}"
)

# The sandbox image as the node's runtime has it: containerd's sandbox_image, else the kubelet's flag.
SANDBOX_IMAGE_PY = r"""
import re, sys
for path, rx in ((sys.argv[1], r'^\s*sandbox_image\s*=\s*"([^"]+)"'),
                 (sys.argv[2], r'--pod-infra-container-image[= ]"?([^" \n]+)')):
    try:
        m = re.search(rx, open(path).read(), re.M)
    except OSError:
        continue
    if m:
        print(m.group(1))
        break
"""
# Run "$@" in the network namespace that holds address $1 (containerd's /var/run/netns/cni-*,
# docker's /run/docker/netns/*): the address is data, a positional argument, never shell text.
IN_POD_NETNS = r"""ip=$1; shift
for ns in /var/run/netns/* /run/docker/netns/*; do
  [ -e "$ns" ] || continue
  if nsenter --net="$ns" ip -o -4 addr show | grep -qF " inet $ip/"; then exec nsenter --net="$ns" "$@"; fi
done
echo "no network namespace on this node holds the probe pod's address $ip" >&2
exit 3"""


@dataclass
class Probe:
    node: str
    ip: str = ""
    seconds: float | None = None  # creation to Running, as this client saw it
    waiting: str = ""  # why it is not running: the container's waiting reason and message


def pod_name(node: str) -> str:
    return f"appliance-probe-{node}"


def manifest(nodes: list[Node], image: str) -> dict[str, Any]:
    """A List of one probe pod per node: pinned, on the pod network, tolerating every taint."""
    items = [
        {"apiVersion": "v1", "kind": "Pod",
         "metadata": {"name": pod_name(n.name), "namespace": NAMESPACE, "labels": {LABEL: "pod-network"}},
         "spec": {"nodeName": n.name, "restartPolicy": "Never", "automountServiceAccountToken": False,
                  "terminationGracePeriodSeconds": 0, "tolerations": [{"operator": "Exists"}],
                  "containers": [{"name": "probe", "image": image}]}}
        for n in nodes
    ]  # fmt: skip
    return {"apiVersion": "v1", "kind": "List", "items": items}


def sandbox_image(cfg: SiteConfig, t: Transport) -> str:
    """The sandbox image the master's runtime names (read there: the install may have set it)."""
    rc, out, err = t.run(
        cfg.master,
        ["python3", "-c", SANDBOX_IMAGE_PY, PATHS.containerd_config, KUBEADM_FLAGS],
        "",
        timeout=30,
    )
    image = out.strip()
    if rc != 0 or not _IMAGE.fullmatch(image):
        raise ApplianceError(
            f"{cfg.master.name}: no sandbox image in {PATHS.containerd_config} or {KUBEADM_FLAGS}"
            + (f": {err.strip().splitlines()[-1]}" if err.strip() else ""),
            hint="`appliance install` configures the container runtime",
        )
    return image


def observe(doc: dict[str, Any], probes: dict[str, Probe], started: float, now: float) -> None:
    """Record, from `kubectl get pods -o json`, which probes run (their address and time) and why the
    others wait."""
    for pod in doc.get("items") or []:
        node = (pod.get("spec") or {}).get("nodeName", "")
        p, status = probes.get(node), pod.get("status") or {}
        if p is None or p.seconds is not None:
            continue
        ip = status.get("podIP") or ""
        if status.get("phase") == "Running" and ip:
            if not _IPV4.fullmatch(ip):  # it goes to the node as an argument: an address, nothing else
                p.waiting = f"its pod IP {ip!r} is not an IPv4 address"
                continue
            p.ip, p.seconds, p.waiting = ip, now - started, ""
            continue
        for c in status.get("containerStatuses") or []:
            w = (c.get("state") or {}).get("waiting") or {}
            if w.get("reason"):
                p.waiting = f"{w['reason']}: {w.get('message', '')}".rstrip(": ")
        if status.get("phase") in ("Failed", "Succeeded"):
            p.waiting = f"the probe pod ended ({status['phase']})"


def start(cfg: SiteConfig, nodes: list[Node], image: str) -> dict[str, Probe]:
    """Create the probes and wait until each runs or PROBE_TIMEOUT_S passed."""
    remove(cfg, wait=True)  # what an interrupted diagnose left
    probes = {n.name: Probe(n.name) for n in nodes}
    started = time.monotonic()
    cluster.kubectl(cfg, ["apply", "-f", "-"], stdin=json.dumps(manifest(nodes, image)))
    while any(p.seconds is None for p in probes.values()) and time.monotonic() - started < PROBE_TIMEOUT_S:
        out = cluster.kubectl(cfg, ["get", "pods", "-n", NAMESPACE, "-l", SELECTOR, "-o", "json"])
        try:
            doc = json.loads(out)
        except ValueError:
            raise ApplianceError(f"{cfg.master.name}: kubectl get pods returned no JSON") from None
        observe(doc, probes, started, time.monotonic())
        time.sleep(0.5)
    return probes


def remove(cfg: SiteConfig, wait: bool = False) -> None:
    args = ["delete", "pods", "-n", NAMESPACE, "-l", SELECTOR, "--ignore-not-found"]
    cluster.kubectl(
        cfg, [*args, "--wait=true", "--timeout=60s"] if wait else [*args, "--wait=false"], timeout=90
    )


def remove_quietly(cfg: SiteConfig) -> str:
    """remove(), or why it failed (a diagnose reports the probes it left, and goes on)."""
    try:
        remove(cfg)
    except ApplianceError as exc:
        return f"the probe pods were not deleted: {exc.message}"
    return ""


def in_pod(ip: str, command: list[str]) -> list[str]:
    return ["sh", "-c", IN_POD_NETNS, "sh", ip, *command]


def start_results(cfg: SiteConfig, probes: dict[str, Probe]) -> list[CheckResult]:
    out = []
    for p in probes.values():
        if p.seconds is not None:
            out.append(CheckResult("probe_pod_start", "kubernetes", p.node, Status.PASS, f"Running after {p.seconds:.1f} s",
                                   f"Running within {PROBE_TIMEOUT_S:.0f} s", number=round(p.seconds, 2), unit="s",
                                   better="lower"))  # fmt: skip
        else:
            out.append(CheckResult("probe_pod_start", "kubernetes", p.node, Status.FAIL,
                                   p.waiting or f"not Running after {PROBE_TIMEOUT_S:.0f} s",
                                   f"Running within {PROBE_TIMEOUT_S:.0f} s",
                                   f"`kubectl -n {NAMESPACE} describe pod {pod_name(p.node)}` on {cfg.master.name} "
                                   "shows the kubelet's events"))  # fmt: skip
    return out


def path_result(node: str, pod: NodeFacts, node_path: NodeFacts) -> list[CheckResult]:
    """The pod path's latency and throughput beside the node path's, named when it costs more
    than half the node path's throughput."""
    if pod.error:
        return [CheckResult("pod_network", "network", node, Status.FAIL, pod.error,
                            hint="the test ran in the probe pod's network namespace (nsenter) on this node")]  # fmt: skip
    try:
        rtt, mbps = float(pod.values["net_rtt_ms"]), float(pod.values["net_mbps"])
    except (KeyError, ValueError):
        return [
            CheckResult("pod_network", "network", node, Status.FAIL, "the pod path test printed no result")
        ]
    base_mbps, base_rtt = node_path.values.get("net_mbps"), node_path.values.get("net_rtt_ms")
    if base_mbps is None or base_rtt is None:
        expected, status, hint = "", Status.PASS, ""
    else:
        share = mbps / float(base_mbps) if float(base_mbps) > 0 else 1.0
        expected = (f"at least {POD_PATH_SHARE:.0%} of the node path's {float(base_mbps):.0f} Mb/s "
                    f"(node path rtt {float(base_rtt):.3f} ms)")  # fmt: skip
        status = Status.PASS if share >= POD_PATH_SHARE else Status.WARN
        hint = "" if status is Status.PASS else (
            f"the pod network costs {1 - share:.0%} of the node path here: flannel's backend and MTU "
            "(FLANNEL_MTU in /run/flannel/subnet.env against the link's MTU), or the CPU of this node"
        )  # fmt: skip
    return [
        CheckResult("pod_network", "network", node, status, f"{mbps:.0f} Mb/s to the master's probe pod",
                    expected, hint, number=mbps, unit="Mb/s", better="higher"),
        CheckResult("pod_latency", "network", node, Status.PASS, f"{rtt:.3f} ms to the master's probe pod",
                    f"node path {float(base_rtt):.3f} ms" if base_rtt else "", number=rtt, unit="ms", better="lower"),
    ]  # fmt: skip


def pair_name(a: str, b: str) -> str:
    return f"{a}<>{b}"


def measure_pairs(
    order: list[tuple[Node, Probe]], t: Transport, script: str, port: int
) -> tuple[dict[tuple[str, str], float], dict[tuple[str, str], str]]:
    """The round trip between every pair of running probes, once: a server in each pod but the
    first, taking one connection from each pod before it; then each pod pings every pod after it,
    in one run. ({(a, b): ms}, {(a, b): why not measured})."""
    rtts: dict[tuple[str, str], float] = {}
    errors: dict[tuple[str, str], str] = {}
    servers = []
    try:
        for i, (node, probe) in enumerate(order[1:], start=1):
            command = in_pod(probe.ip, ["python3", "-", "serve", str(port), str(i)])
            servers.append(t.serve(node, command, script, "the pair test server in the probe pod"))
        for i, (node, probe) in enumerate(order[:-1]):
            peers = order[i + 1 :]
            rc, text, err = t.run(node, in_pod(probe.ip, ["python3", "-", "pings", str(port), *(p.ip for _, p in peers)]),
                                  script, timeout=120)  # fmt: skip
            got = dict(
                v.split(" ", 1) for v in parse(node.name, text + "probe_end=1\n").lists.get("pair_rtt_ms", [])
            )
            for peer, p in peers:
                try:
                    rtts[(node.name, peer.name)] = float(got[p.ip])
                except (KeyError, ValueError):
                    errors[(node.name, peer.name)] = run_error(node, rc, text, err) or "no round trip printed"
    finally:
        for server in servers:
            t.stop(server)
    return rtts, errors


def pair_results(
    rtts: dict[tuple[str, str], float], errors: dict[tuple[str, str], str], port: int
) -> list[CheckResult]:
    """One row per pair of probe pods: its round trip, named when it is PAIR_SLOW times the median
    pair's (and beyond the noise floor); a pair that could not talk fails."""
    median = sorted(rtts.values())[len(rtts) // 2] if rtts else 0.0
    floor = NOISE_FLOOR["pod_pair_latency"]
    out = []
    for (a, b), ms in rtts.items():
        slow = ms > PAIR_SLOW * median and ms - median > floor
        hint = (f"the pod path between {a} and {b} is slower than the others: their pod_latency and "
                "latency_to_master rows say which side") if slow else ""  # fmt: skip
        out.append(CheckResult("pod_pair_latency", "network", pair_name(a, b), Status.WARN if slow else Status.PASS,
                               f"{ms:.3f} ms between their probe pods", f"within {PAIR_SLOW:g}x the median pair's "
                               f"{median:.3f} ms", hint, number=ms, unit="ms", better="lower"))  # fmt: skip
    for (a, b), why in errors.items():
        out.append(CheckResult("pod_pair_latency", "network", pair_name(a, b), Status.FAIL, why,
                               "the probe pods reach each other",
                               f"TCP {port} between the pods of {a} and {b}: flannel's traffic between the nodes "
                               "(VXLAN, UDP 8472) blocked, or a NetworkPolicy"))  # fmt: skip
    return out
