"""The pod network path for `appliance diagnose`: one probe pod per node, pinned with spec.nodeName,
running the site's sandbox (pause) image on the pod network; how long each took from its creation
to Running; then the node path's own test (diagnose.measure_network) run inside the probe pods'
network namespaces, each node's pod to the master's pod, so each row sets the pod path beside the
node path beneath it; then the round trip and throughput between every pair of probe pods,
a pair that looks slow measured again before it is named. The probes go at the
end, whatever happened. The nodes need nothing new: the test enters the pod's namespace with
nsenter and runs the node's python3 there (the pause image has no shell)."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
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
# A pair is set against the best pair, not the median: on a 3-node site two of the three pairs
# include any one node, so a slow node would be the median itself.
PAIR_SLOW = 2.0  # a pair of pods this many times the best pair's round trip is named
PAIR_SHARE = 0.5  # a pair of pods below this share of the best pair's throughput is named
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


def thin_path(pod: NodeFacts | None, node_path: NodeFacts) -> bool:
    """The pod path measured, and below POD_PATH_SHARE of its node path's throughput."""
    try:
        return float(pod.values["net_mbps"]) < POD_PATH_SHARE * float(node_path.values["net_mbps"])  # type: ignore[union-attr]
    except (AttributeError, KeyError, ValueError):
        return False


def path_result(
    node: str, pod: NodeFacts, node_path: NodeFacts, first: float | None = None
) -> list[CheckResult]:
    """The pod path's latency and throughput beside the node path's, named when it costs more
    than half the node path's throughput. FIRST: the first look's Mb/s, when this is a second
    look (the pod path measured right after its node path)."""
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
    again = "" if first is None else f" (its second look; first {first:.0f} Mb/s)"
    if base_mbps is None or base_rtt is None:
        expected, status, hint = "", Status.PASS, ""
    else:
        share = mbps / float(base_mbps) if float(base_mbps) > 0 else 1.0
        expected = (f"at least {POD_PATH_SHARE:.0%} of the node path's {float(base_mbps):.0f} Mb/s "
                    f"(node path rtt {float(base_rtt):.3f} ms{', measured right before it' if again else ''})")  # fmt: skip
        status = Status.WARN if thin_path(pod, node_path) else Status.PASS
        hint = "" if status is Status.PASS else (
            f"the pod network costs {1 - share:.0%} of the node path here: flannel's backend and MTU "
            "(FLANNEL_MTU in /run/flannel/subnet.env against the link's MTU), or the CPU of this node"
        )  # fmt: skip
    return [
        CheckResult("pod_network", "network", node, status, f"{mbps:.0f} Mb/s to the master's probe pod{again}",
                    expected, hint, number=mbps, unit="Mb/s", better="higher"),
        CheckResult("pod_latency", "network", node, Status.PASS, f"{rtt:.3f} ms to the master's probe pod",
                    f"node path {float(base_rtt):.3f} ms" if base_rtt else "", number=rtt, unit="ms", better="lower"),
    ]  # fmt: skip


def pair_name(a: str, b: str) -> str:
    return f"{a}<>{b}"


Pair = tuple[str, str]  # (from node, to node)


@dataclass
class PairFacts:
    """What the pair tests printed: each pair's round trip and its streams each way, why one was
    not measured, and which pairs were measured a second time (the second look's figures are kept,
    beside those of the reference pair measured right after them)."""

    rtt_ms: dict[Pair, float] = field(default_factory=dict)
    mbps: dict[Pair, float] = field(default_factory=dict)  # (a, b): a's pod streaming to b's
    rx_mbps: dict[Pair, float] = field(default_factory=dict)  # (a, b): b's pod streaming to a's
    errors: dict[Pair, str] = field(default_factory=dict)
    again: dict[Pair, tuple[float, float]] = field(default_factory=dict)  # first look's (ms, Mb/s)
    # the pair a second look measured right after this one: (it, its ms, its best stream)
    beside: dict[Pair, tuple[Pair, float, float]] = field(default_factory=dict)

    def through(self, key: Pair) -> float:
        """The pair's throughput: the slower way (a link that is slow one way is slow)."""
        return min(self.mbps[key], self.rx_mbps[key])

    def best(self) -> float:
        return max([*self.mbps.values(), *self.rx_mbps.values()], default=0.0)


def _test_pairs(
    pairs: list[tuple[tuple[Node, Probe], tuple[Node, Probe]]], t: Transport, script: str, port: int,
    seconds: float,
) -> PairFacts:  # fmt: skip
    """Each pair (a, b), one at a time: a's pod times a ping-pong, a stream of SECONDS to b's pod
    and one from it (a limit on what leaves a node shows only one way). A server in each b's pod
    takes the three connections of each of its pairs; each a runs all of its pairs in one go, in
    order, so no two tests share a link at the same moment."""
    got = PairFacts()
    targets: dict[str, tuple[Node, Probe, int]] = {}
    sources: dict[str, tuple[Node, Probe, list[tuple[Node, Probe]]]] = {}
    for (a, ap), (b, bp) in pairs:
        targets[b.name] = (b, bp, targets.get(b.name, (b, bp, 0))[2] + 3)
        sources.setdefault(a.name, (a, ap, []))[2].append((b, bp))
    servers = []
    try:
        for node, probe, connections in targets.values():
            command = in_pod(probe.ip, ["python3", "-", "serve", str(port), str(connections)])
            servers.append(t.serve(node, command, script, "the pair test server in the probe pod"))
        for node, probe, peers in sources.values():
            command = in_pod(
                probe.ip, ["python3", "-", "pairs", str(port), f"{seconds:g}", *(p.ip for _, p in peers)]
            )
            rc, text, err = t.run(node, command, script, timeout=int(60 + len(peers) * (2 * seconds + 10)))
            lists = parse(node.name, text + "probe_end=1\n").lists
            rtt, mbps, rx = (dict(v.split(" ", 1) for v in lists.get(k, []) if " " in v)
                             for k in ("pair_rtt_ms", "pair_mbps", "pair_rx_mbps"))  # fmt: skip
            for peer, p in peers:
                key = (node.name, peer.name)
                try:
                    figures = float(rtt[p.ip]), float(mbps[p.ip]), float(rx[p.ip])
                    got.rtt_ms[key], got.mbps[key], got.rx_mbps[key] = figures
                except (KeyError, ValueError):
                    got.errors[key] = run_error(node, rc, text, err) or "no result printed"
    finally:
        for server in servers:
            t.stop(server)
    return got


def against(facts: PairFacts, key: Pair) -> tuple[float, float, Pair | None]:
    """What KEY is set against: (round trip, stream, the reference pair). After a second look, the
    reference pair measured right after it, so a host busy for those seconds slows both; else
    (no reference) the best pair's round trip and the best stream."""
    if key in facts.beside:
        return facts.beside[key][1], facts.beside[key][2], facts.beside[key][0]
    return min(facts.rtt_ms.values(), default=0.0), facts.best(), None


def verdict(facts: PairFacts, key: Pair) -> tuple[bool, bool]:
    """(late, thin): its round trip PAIR_SLOW times what it is set against (and beyond the noise
    floor); its slower stream below PAIR_SHARE of that stream."""
    ms, mbps, _ = against(facts, key)
    late = facts.rtt_ms[key] > PAIR_SLOW * ms and facts.rtt_ms[key] - ms > NOISE_FLOOR["pod_pair_latency"]
    return late, facts.through(key) < PAIR_SHARE * mbps


def slow_pairs(facts: PairFacts) -> set[Pair]:
    return {k for k in facts.rtt_ms if any(verdict(facts, k))}


def measure_pairs(
    order: list[tuple[Node, Probe]], t: Transport, script: str, port: int, seconds: float
) -> PairFacts:
    """Every pair of running probes, each pod to every pod after it; then each pair that looks
    slow measured again, with the fastest pair that did not (the reference) right after it: the
    pair is judged against that reference alone, so a moment's load on a shared host, which
    slows both, is not named, and a slow link, which slows only the one, is."""
    facts = _test_pairs(
        [(a, b) for i, a in enumerate(order) for b in order[i + 1 :]], t, script, port, seconds
    )
    slow = slow_pairs(facts)
    fine = [k for k in facts.rtt_ms if k not in slow]
    ref = max(fine, key=facts.through) if fine else None
    where = {n.name: (n, p) for n, p in order}
    for key in sorted(slow):
        batch = [key] if ref is None else [key, ref]
        second = _test_pairs([(where[a], where[b]) for a, b in batch], t, script, port, seconds)
        if key not in second.rtt_ms:
            continue
        facts.again[key] = (facts.rtt_ms[key], facts.through(key))
        facts.rtt_ms[key], facts.mbps[key], facts.rx_mbps[key] = (
            second.rtt_ms[key], second.mbps[key], second.rx_mbps[key]
        )  # fmt: skip
        if ref is not None and ref in second.rtt_ms:
            facts.beside[key] = (ref, second.rtt_ms[ref], max(second.mbps[ref], second.rx_mbps[ref]))
    return facts


def _shared_node(pairs: set[Pair]) -> str:
    """The one node every pair in PAIRS (two or more) includes, else ""."""
    common = set.intersection(*(set(p) for p in pairs)) if len(pairs) > 1 else set()
    return next(iter(common)) if len(common) == 1 else ""


def pair_results(facts: PairFacts, port: int) -> list[CheckResult]:
    """Two rows per pair of probe pods, its round trip and its throughput (the slower way); a pair
    PAIR_SLOW times the round trip it is set against (beyond the noise floor), or below PAIR_SHARE
    of that stream, is named (after its second look, against the reference pair measured beside
    it); when every such pair includes one node, the hint names that node as the bottleneck. A
    pair that could not talk fails."""
    slow = slow_pairs(facts)
    culprit = _shared_node(slow)
    out = []
    for (a, b), ms in facts.rtt_ms.items():
        key = (a, b)
        mbps = facts.through(key)
        if culprit:
            hint = (
                f"every slow pair includes {culprit}: its link, its pod network (FLANNEL_MTU in "
                f"/run/flannel/subnet.env) or its CPU; its pod_network row sets it beside its node path"
            )
        else:
            hint = (f"the pod path between {a} and {b} is slower than the others: their pod_network and "
                    "pod_latency rows say which side")  # fmt: skip
        first = ""
        if key in facts.again:
            first = f" (its second look; first {facts.again[key][0]:.3f} ms, {facts.again[key][1]:.0f} Mb/s)"
        ref_ms, ref_mbps, ref = against(facts, key)
        if ref is None:
            ms_of, mbps_of = f"the best pair's {ref_ms:.3f} ms", f"the best stream's {ref_mbps:.0f} Mb/s"
        else:
            ms_of = f"the {ref_ms:.3f} ms of {pair_name(*ref)}, measured right after it"
            mbps_of = f"the {ref_mbps:.0f} Mb/s of {pair_name(*ref)}, measured right after it"
        late, thin = verdict(facts, key)
        out.append(CheckResult("pod_pair_latency", "network", pair_name(a, b), Status.WARN if late else Status.PASS,
                               f"{ms:.3f} ms between their probe pods{first}", f"within {PAIR_SLOW:g}x {ms_of}",
                               hint if late else "", number=ms, unit="ms", better="lower"))  # fmt: skip
        out.append(CheckResult("pod_pair_throughput", "network", pair_name(a, b), Status.WARN if thin else Status.PASS,
                               f"{mbps:.0f} Mb/s the slower way between their probe pods ({a} to {b} "
                               f"{facts.mbps[key]:.0f}, {b} to {a} {facts.rx_mbps[key]:.0f}){first}",
                               f"at least {PAIR_SHARE:.0%} of {mbps_of}",
                               hint if thin else "", number=mbps, unit="Mb/s", better="higher"))  # fmt: skip
    for (a, b), why in facts.errors.items():
        for check in ("pod_pair_latency", "pod_pair_throughput"):
            out.append(CheckResult(check, "network", pair_name(a, b), Status.FAIL, why,
                                   "the probe pods reach each other",
                                   f"TCP {port} between the pods of {a} and {b}: flannel's traffic between the "
                                   "nodes (VXLAN, UDP 8472) blocked, or a NetworkPolicy"))  # fmt: skip
    return out
