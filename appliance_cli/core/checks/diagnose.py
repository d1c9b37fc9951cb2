"""`appliance diagnose`, the Appliance Optimizer Utility: measures every layer on every node
(CPU, memory, disk, the network path to the master, a pull from the private registry, writes to
and reads from the site's NFS export, the GPUs, the cluster's view of each node),
ranks each measurement against the node's hardware class and against the other nodes, and names
the bottleneck: the measurement furthest below what it should be (a node's link, when what crossed it
is lower still)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from importlib.resources import files
from pathlib import Path

from appliance_cli.core import cluster
from appliance_cli.core.checks import nvsmi, podpath
from appliance_cli.core.checks.model import NOISE_FLOOR, CheckResult, NodeFacts, Report, Status
from appliance_cli.core.checks.preflight import REGISTRY_CA_TRUST, REGISTRY_PASSWORD_FILE
from appliance_cli.core.checks.probe import parse, run_error
from appliance_cli.core.paths import PATHS
from appliance_cli.core.remote import ssh_argv
from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError

NET_PORT, NET_SECONDS = 5201, 1.0
PEER_FAIL, PEER_WARN = 0.5, 0.8  # a node below this share of its peers' median is a bottleneck
NIC_GOODPUT = 0.7  # a single TCP stream reaching 70 % of the line rate is healthy
# metric key -> (layer, check, unit, better, group); group: which measurement re-runs it for a
# second look (the per-node probe, the network test, the pull, the NFS test)
METRICS = {
    "cpu_sha256_mbps": ("hardware", "cpu_throughput", "MB/s", "higher", "node"),
    "mem_copy_mbps": ("hardware", "memory_throughput", "MB/s", "higher", "node"),
    "disk_write_mbps": ("storage", "disk_write", "MB/s", "higher", "node"),
    "net_mbps": ("network", "throughput_to_master", "Mb/s", "higher", "network"),
    "net_rtt_ms": ("network", "latency_to_master", "ms", "lower", "network"),
    "registry_pull_mbps": ("registry", "pull_throughput", "MB/s", "higher", "registry"),
    "nfs_write_mbps": ("storage", "nfs_write", "MB/s", "higher", "nfs"),
    "nfs_read_mbps": ("storage", "nfs_read", "MB/s", "higher", "nfs"),
}
# Where the install leaves a worker's pull credentials: containerd's config.toml (its registry
# auth table) or, with docker, kubelet's config.json (container_runtime's defaults
# container_runtime_containerd_config_file and container_runtime_docker_auth_file take them from
# roles/appliance_paths). The master also has the password file.
CONTAINERD_CONFIG = PATHS.containerd_config
KUBELET_AUTH = PATHS.kubelet_auth
PULL_MIN_SECONDS = 1.0  # a pull runs for at least this long (twice the network test's time)
# The NFS test moves a fixed size (the diagnose's MB) each way; a transfer slower than this rate
# is stopped and is a failure, so a filer that stalls costs a bounded time per node.
NFS_MIN_MBPS, NFS_SETUP_SECONDS = 4.0, 10.0
NFS_OP_SECONDS = 15  # nfsperf.py's limit on each of its libnfs calls (mkdir, unlink, rmdir)
NFS_ROUNDS = 2  # nfsperf.py's rounds: each a write and a read, the best of each reported


def _script(name: str) -> str:
    return Path(str(files("appliance_cli.core.checks") / name)).read_text()


@dataclass
class Transport:
    """How a command reaches a node: `argv(node, command)` is what to execute here (ssh to it, or
    the command itself for a local test); the script travels on standard input."""

    argv: Callable[[Node, list[str]], list[str]]

    def run(self, node: Node, command: list[str], stdin: str, timeout: int = 300) -> tuple[int, str, str]:
        r = subprocess.run(
            self.argv(node, command), input=stdin, capture_output=True, text=True, timeout=timeout
        )
        return r.returncode, r.stdout, r.stderr

    def spawn(self, node: Node, command: list[str], stdin: str) -> subprocess.Popen[str]:
        p = subprocess.Popen(self.argv(node, command), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert p.stdin is not None
        p.stdin.write(stdin)
        p.stdin.close()
        return p

    def serve(self, node: Node, command: list[str], stdin: str, what: str) -> subprocess.Popen[str]:
        """spawn() a netperf.py server and wait for its `listening=1`; ApplianceError naming WHAT
        and what it wrote when it exits first (it is stopped then)."""
        p = self.spawn(node, command, stdin)
        assert p.stdout is not None
        if p.stdout.readline().strip() != "listening=1":
            why = p.stderr.read()[-300:].strip() if p.stderr else ""
            self.stop(p)
            raise ApplianceError(f"{node.name}: {what} did not start: {why}")
        return p

    @staticmethod
    def stop(server: subprocess.Popen[str]) -> None:
        """A server from serve(), stopped whatever it was doing."""
        server.kill()
        server.wait(timeout=10)


def ssh_transport(cfg: SiteConfig) -> Transport:
    return Transport(lambda node, command: ssh_argv(cfg, node, command))


def measure_nodes(nodes: list[Node], t: Transport, mb: int) -> dict[str, NodeFacts]:
    """One node at a time: measurements on nodes that share hardware (the lab) must not disturb
    each other, and on a rack the sum is a few seconds per node."""
    script = _script("diag.sh")
    out = {}
    for node in nodes:
        rc, text, err = t.run(node, ["env", f"DIAG_MB={mb}", "sh", "-s"], script)
        facts = parse(node.name, text.replace("diag_end=1", "probe_end=1"))
        facts.error = run_error(node, rc, text, err) or facts.error
        out[node.name] = facts
    return out


def measure_network(
    master: Node,
    others: list[Node],
    t: Transport,
    seconds: float,
    *,
    to: str | None = None,
    inside: Callable[[Node, list[str]], list[str]] = lambda node, command: command,
    port: int = NET_PORT,
    what: str = "the network test server",
) -> dict[str, NodeFacts]:
    """A server on the master, then each node's ping-pong and stream to it, one node at a time
    (so each result is that node's path alone). The pod path runs the same between probe pods:
    TO, the master pod's address, and INSIDE, how a command enters a node's pod (podpath.in_pod)."""
    script = _script("netperf.py")
    out: dict[str, NodeFacts] = {}
    if not others:
        return out
    server = t.serve(
        master, inside(master, ["python3", "-", "serve", str(port), str(2 * len(others))]), script, what
    )
    try:
        for node in others:
            rc, text, err = t.run(
                node,
                inside(node, ["python3", "-", "test", to or master.address, str(port), str(seconds)]),
                script,
                timeout=120,
            )
            facts = parse(node.name, text + "probe_end=1\n")
            facts.error = run_error(node, rc, text, err)
            out[node.name] = facts
    finally:
        t.stop(server)
    return out


def measure_registry(
    cfg: SiteConfig, nodes: list[Node], t: Transport, mb: int, seconds: float
) -> dict[str, NodeFacts]:
    """Each node in turn pulls the registry's largest image (regpull.py) with its own credentials,
    which never leave it: the script reads them there."""
    script = _script("regpull.py")
    pull_s = max(PULL_MIN_SECONDS, 2 * seconds)
    args = [cfg.registry.address, REGISTRY_CA_TRUST, REGISTRY_PASSWORD_FILE, CONTAINERD_CONFIG, KUBELET_AUTH]
    out = {}
    for node in nodes:
        rc, text, err = t.run(node, ["python3", "-", *args, str(mb), f"{pull_s:g}"], script, timeout=120)
        facts = parse(node.name, text + "probe_end=1\n")
        if not any(k.startswith("registry_pull_") for k in facts.values):
            facts.values["registry_pull_error"] = (
                run_error(node, rc, text, err) or "the pull test printed nothing"
            )
        out[node.name] = facts
    return out


def registry_result(node: Node, facts: NodeFacts) -> CheckResult | None:
    """A pull that could not be measured: a skip (nothing to pull yet) or a failure with its cause."""
    if why := facts.get("registry_pull_skip"):
        return CheckResult("pull_throughput", "registry", node.name, Status.SKIP, hint=why)
    if why := facts.get("registry_pull_error"):
        return CheckResult("pull_throughput", "registry", node.name, Status.FAIL, why, "a pull with the site's CA and "
                           "this node's pull credentials", "`appliance preflight` checks the registry; "
                           "`appliance install --tags registry` repairs its CA and credentials")  # fmt: skip
    return None


def nfs_transfer_seconds(mb: int) -> float:
    """How long one transfer (the write, or the read) of `mb` megabytes may take."""
    return NFS_SETUP_SECONDS + mb / NFS_MIN_MBPS


def measure_nfs(cfg: SiteConfig, nodes: list[Node], t: Transport, mb: int) -> dict[str, NodeFacts]:
    """Each node in turn writes `mb` megabytes to the site's export, reads them back and removes
    them (nfsperf.py, with the userspace client: the lab's kernel has no NFS); nothing without
    an `nfs:` section."""
    if cfg.nfs is None:
        return {}
    script, seconds = _script("nfsperf.py"), nfs_transfer_seconds(mb)
    # every round's write and read, the libnfs calls (mkdir, an unlink a round, rmdir), ssh
    timeout = int(2 * NFS_ROUNDS * seconds + (NFS_ROUNDS + 2) * NFS_OP_SECONDS + 30)
    out = {}
    for node in nodes:
        argv = ["python3", "-", cfg.nfs.server, cfg.nfs.path, node.name, str(mb), f"{seconds:g}"]
        try:
            rc, text, err = t.run(node, argv, script, timeout=timeout)
        except subprocess.TimeoutExpired:
            rc, text, err = 0, "", ""
            why = f"the NFS test gave no answer within {timeout}s (stopped)"
        else:
            why = run_error(node, rc, text, err) or "the NFS test printed nothing"
        facts = parse(node.name, text + "probe_end=1\n")
        if not any(k.startswith("nfs_") for k in facts.values):
            facts.values["nfs_write_error"] = why
        out[node.name] = facts
    return out


def nfs_results(cfg: SiteConfig, node: Node, facts: NodeFacts) -> list[CheckResult]:
    """The NFS measurements that are not numbers to rank: skips, failures, a file left behind."""
    if cfg.nfs is None:
        why = "the site config has no nfs: section (no NFS export to measure)"
        return [
            CheckResult(c, "storage", node.name, Status.SKIP, hint=why) for c in ("nfs_write", "nfs_read")
        ]
    export, out = f"{cfg.nfs.server}:{cfg.nfs.path}", []
    expected = f"{export} written and read back as root"
    hint = (f"`appliance preflight` checks the export from every node; the filer must export {cfg.nfs.path} "
            f"read-write to {node.name} ({node.address}), root not squashed, NFS (TCP 111, 2049, mountd) open")  # fmt: skip
    if why := facts.get("nfs_skip"):
        out += [
            CheckResult(c, "storage", node.name, Status.SKIP, hint=why) for c in ("nfs_write", "nfs_read")
        ]
    elif why := facts.get("nfs_write_error"):
        out += [CheckResult("nfs_write", "storage", node.name, Status.FAIL, why, expected, hint),
                CheckResult("nfs_read", "storage", node.name, Status.SKIP, hint="not measured: the write failed")]  # fmt: skip
    elif why := facts.get("nfs_read_error"):
        out.append(CheckResult("nfs_read", "storage", node.name, Status.FAIL, why, expected, hint))
    if why := facts.get("nfs_cleanup_error"):
        out.append(CheckResult("nfs_cleanup", "storage", node.name, Status.WARN, why, "no file left on the export",
                               "remove it on the filer"))  # fmt: skip
    return out


def pod_network_result(node: Node, facts: NodeFacts, why: str) -> CheckResult:
    """The pod path, not measured on this node: WHY, or that the node has no kubelet yet."""
    if facts.get("kubelet_kind") == "absent":
        why = "no kubelet on this node yet (appliance install)"
    return CheckResult("pod_network", "network", node.name, Status.SKIP, hint=why)


def measure_pods(
    master: Node, nodes: list[Node], t: Transport, seconds: float, probes: dict[str, podpath.Probe]
) -> dict[str, NodeFacts]:
    """The node path's test between probe pods: a server in the master's pod, each node's pod to it."""
    return measure_network(master, nodes, t, seconds, to=probes[master.name].ip,
                           inside=lambda n, command: podpath.in_pod(probes[n.name].ip, command),
                           what="the test server in the probe pod")  # fmt: skip


def pod_path_again(
    master: Node,
    thin: list[Node],
    t: Transport,
    seconds: float,
    measured: dict[str, NodeFacts],
    probes: dict[str, podpath.Probe],
) -> dict[str, tuple[NodeFacts, float]]:
    """A second look at each node whose pod path looked thin: its node path, then its pod path,
    one right after the other, so a moment's load on a shared host, which slows both, is not
    named. The second pod path replaces the first in MEASURED; returned: {node: (the node path
    measured right before it, the first look's Mb/s)}. A second look that fails keeps the first."""
    out: dict[str, tuple[NodeFacts, float]] = {}
    for n in thin:
        try:
            node_path = measure_network(master, [n], t, seconds)[n.name]
            pod = measure_pods(master, [n], t, seconds, probes)[n.name]
            mbps = float(pod.values["net_mbps"]), float(node_path.values["net_mbps"])
        except (ApplianceError, KeyError, ValueError):
            continue
        if pod.error or node_path.error or "net_rtt_ms" not in node_path.values or mbps[1] <= 0:
            continue
        out[n.name] = (node_path, float(measured[n.name].values["net_mbps"]))
        measured[n.name] = pod
    return out


def measure_pod_path(
    cfg: SiteConfig, nodes: list[Node], facts: dict[str, NodeFacts], t: Transport, seconds: float
) -> list[CheckResult]:
    """A probe pod on each node (podpath.py), then each node's pod to the master's, then every
    pair of them; the probes are removed whatever happened. A node whose probe did not run, or
    that has no kubelet, is a skip saying why."""
    ready = [n for n in nodes if facts[n.name].get("kubelet_kind") != "absent"]
    if cfg.master not in ready:
        return [pod_network_result(n, facts[n.name], "no kubelet on the master yet") for n in nodes]
    image = podpath.sandbox_image(cfg, t)
    measured: dict[str, NodeFacts] = {}
    beside: dict[str, tuple[NodeFacts, float]] = {}
    try:
        probes = podpath.start(cfg, ready, image)
        out = podpath.start_results(cfg, probes)
        running = [(n, probes[n.name]) for n in ready if probes[n.name].seconds is not None]
        master = probes[cfg.master.name]
        if master.seconds is not None:
            others = [(n, p) for n, p in running if n.name != cfg.master.name]
            try:
                measured = measure_pods(cfg.master, [n for n, _ in others], t, seconds, probes)
            except ApplianceError as exc:  # the server in the master's pod: every node's test needs it
                measured = {n.name: NodeFacts(n.name, error=exc.message) for n, _ in others}
            thin = [n for n, _ in others if podpath.thin_path(measured.get(n.name), facts[n.name])]
            beside = pod_path_again(cfg.master, thin, t, seconds, measured, probes)
        if len(running) > 1:
            try:
                pairs = podpath.measure_pairs(running, t, _script("netperf.py"), NET_PORT + 1, seconds)
                out += podpath.pair_results(pairs, NET_PORT + 1)
            except ApplianceError as exc:  # a pod's server did not start: no pair is measured
                out += [CheckResult(check, "network", "site", Status.FAIL, exc.message, "a server in every probe pod",
                                    "the node's `nsenter` and python3")
                        for check in ("pod_pair_latency", "pod_pair_throughput")]  # fmt: skip
    finally:
        left = podpath.remove_quietly(cfg)
    if left:
        out.append(CheckResult("probe_pod_cleanup", "kubernetes", "site", Status.WARN, left, "no probe pod left",
                               f"kubectl delete pods -n {podpath.NAMESPACE} -l {podpath.SELECTOR}"))  # fmt: skip
    if master.seconds is None:
        why = f"the master's probe pod did not run ({cfg.master.name}'s probe_pod_start says why)"
        return out + [pod_network_result(n, facts[n.name], why) for n in nodes]
    for n in nodes:
        if n.name in beside:
            out += podpath.path_result(n.name, measured[n.name], *beside[n.name])
        elif n.name in measured:
            out += podpath.path_result(n.name, measured[n.name], facts[n.name])
        elif n.name == cfg.master.name:
            out.append(
                pod_network_result(
                    n, facts[n.name], "the master's probe pod is the far end of every other node's test"
                )
            )
        else:
            out.append(
                pod_network_result(n, facts[n.name], "its probe pod did not run (see probe_pod_start)")
            )
    return out


def kubernetes_view(cfg: SiteConfig, nodes: list[Node]) -> list[CheckResult]:
    try:
        rows = {r.name: r for r in cluster.nodes(cfg)}
    except ApplianceError as exc:
        return [
            CheckResult(
                "node_ready", "kubernetes", "site", Status.SKIP, hint=f"no cluster to ask: {exc.message}"
            )
        ]
    out = []
    for n in nodes:
        row = rows.get(n.name)
        ready = row.ready if row else "not in the cluster"
        ok = ready == "Ready"
        out.append(CheckResult("node_ready", "kubernetes", n.name, Status.PASS if ok else Status.FAIL, ready, "Ready",
                               "" if ok else "`appliance install --limit NODE` (re)joins it; its kubelet journal says why"))  # fmt: skip
    return out


def expected_for(cfg: SiteConfig, node: Node, key: str, facts: NodeFacts) -> float | None:
    """What the hardware class promises for this metric, where it says anything (NIC line rate)."""
    if key == "net_mbps" and facts.get("virt_type") != "container":
        return cfg.hardware_classes[node.hardware_class].nic_speed_gbps * 1000 * NIC_GOODPUT
    return None


def rank(cfg: SiteConfig, nodes: list[Node], facts: dict[str, NodeFacts]) -> list[tuple[float, CheckResult]]:
    """Each node's value of each metric against the median of the other nodes (and the class's
    expectation where there is one): the share of that it reaches decides the status."""
    out = []
    for key, (layer, check, unit, better, _) in METRICS.items():
        values = {n.name: float(v) for n in nodes if (v := facts.get(n.name, NodeFacts(n.name)).get(key))}
        for n in nodes:
            if n.name not in values:
                continue
            peers = [v for name, v in values.items() if name != n.name]
            spreads = [spread_of(facts[name], key)[0] for name in values if name != n.name]
            out.append(_ranked(cfg, n, key, values[n.name], peers, facts[n.name], (layer, check, unit, better),
                               statistics.median(spreads) if spreads else 0.0))  # fmt: skip
    return out


def spread_of(facts: NodeFacts, key: str) -> tuple[float, int]:
    """(how far apart the runs of this measurement were, in percent of the best; how many runs),
    as diag.sh prints them (KEY_spread=PCT N); (0, 0) where the probe prints none."""
    try:
        pct, runs = facts.get(key.removesuffix("_mbps") + "_spread").split()
        return max(0.0, min(float(pct), 100.0)), int(runs)
    except ValueError:
        return 0.0, 0


def _ranked(cfg: SiteConfig, node: Node, key: str, value: float, peers: list[float], facts: NodeFacts,
            meta: tuple[str, str, str, str], peer_spread: float = 0.0) -> tuple[float, CheckResult]:  # fmt: skip
    spread, runs = spread_of(facts, key)
    paired = facts.get(f"{key}_paired").split()
    layer, check, unit, better = meta
    share, expected = 1.0, ""
    if peers:
        median = statistics.median(peers)
        if abs(value - median) > NOISE_FLOOR.get(check, 0.0) and value and median:
            share = value / median if better == "higher" else median / value
        expected = f"peers' median {median:.{3 if unit == 'ms' else 1}f} {unit}"
        if len(paired) == 3:  # the second look's verdict replaces the first's
            share = float(paired[0])
            expected += f"; side by side with {paired[2]}, {paired[1]} times: {share:.2f}x"
            if first := facts.get(f"{key}_first"):
                expected += f" (first look {float(first):.{3 if unit == 'ms' else 1}f} {unit})"
    promised = expected_for(cfg, node, key, facts)
    if promised:
        share = min(share, value / promised)
        expected += f"; class >= {promised:.0f} {unit}"
    # a gap no larger than the runs' own spread is not evidence: the thresholds move down by it
    noise = max(spread, peer_spread) / 100
    warn_at, fail_at = min(PEER_WARN, 1 - noise), min(PEER_FAIL, 1 - noise)
    status = Status.FAIL if share < fail_at else Status.WARN if share < warn_at else Status.PASS
    how = []
    if runs:
        how.append(f"best of {runs} runs, {spread:.0f} % apart")
    if len(paired) == 3:
        how.append(f"measured again side by side with {paired[2]}, {paired[1]} times")
    hint = "" if status is Status.PASS else (
        f"{share:.2f}x of what it should be{' (' + '; '.join(how) + ')' if how else ''}: look at this node's {layer}"
    )  # fmt: skip
    return share, CheckResult(check, layer, node.name, status, f"{value:.{3 if unit == 'ms' else 1}f} {unit}", expected.lstrip("; "), hint,
                              number=value, unit=unit, better=better)  # fmt: skip


# Measured across the node's own link: its pull from the registry and its NFS traffic. On a node
# whose link to the master is itself below its peers, they are low because of it.
OVER_THE_LINK = {"pull_throughput", "nfs_write", "nfs_read"}


def bottleneck(ranked: list[tuple[float, CheckResult]]) -> CheckResult | None:
    """The measurement furthest below what it should be, of those not passed; but the node's link
    when that measurement crossed it and the link is below too: the cause, not its effect (a link
    limited to 50 Mb/s made the node's NFS write 0.01x as well, and the write came out lower)."""
    below = [(share, r) for share, r in ranked if r.status is not Status.PASS]
    if not below:
        return None
    worst = min(below, key=lambda pair: pair[0])[1]
    if worst.check in OVER_THE_LINK:
        link = [r for _, r in below if r.node == worst.node and r.check == "throughput_to_master"]
        if link:
            return link[0]
    return worst


def _not_passed(ranked: list[tuple[float, CheckResult]]) -> set[tuple[str, str]]:
    return {(r.node, r.check) for _, r in ranked if r.status is not Status.PASS}


def _pairs(pairs: set[tuple[str, str]]) -> str:
    return ", ".join(f"{node} {check}" for node, check in sorted(pairs))


PAIRS = 3  # a second look: the node and a peer measured side by side, this many times


def _reference(nodes: list[Node], facts: dict[str, NodeFacts], key: str, name: str) -> Node | None:
    """The peer to compare with: the one whose value lies nearest the peers' median."""
    peers = [(float(v), n) for n in nodes if n.name != name and (v := facts[n.name].get(key))]
    if not peers:
        return None
    median = statistics.median(v for v, _ in peers)
    return min(peers, key=lambda p: (abs(p[0] - median), p[1].name))[1]


def _side_by_side(cfg: SiteConfig, group: str, pair: tuple[Node, Node], t: Transport, mb: int,
                  seconds: float) -> dict[str, NodeFacts]:  # fmt: skip
    if group == "node":  # each node's own CPU, memory and disk: both at once, so both meet the same moment
        with ThreadPoolExecutor(max_workers=2) as pool:
            a, b = pool.map(lambda n: measure_nodes([n], t, mb), pair)
        return a | b
    # the rest cross the master's link or the filer's, which one node at a time must have alone
    if group == "network":
        return measure_network(cfg.master, list(pair), t, seconds)
    if group == "registry":
        return measure_registry(cfg, list(pair), t, mb, seconds)
    return measure_nfs(cfg, list(pair), t, mb)


def second_look(cfg: SiteConfig, nodes: list[Node], facts: dict[str, NodeFacts], low: set[tuple[str, str]],
                t: Transport, mb: int, seconds: float) -> None:  # fmt: skip
    """A value below its threshold is not reported on one measurement: the node is measured again
    side by side with a peer (the one nearest the median), PAIRS times, and its share is the
    median of those ratios (KEY_paired=RATIO N PEER). On a shared or busy machine the first value
    may have met a busy moment that its peers did not; side by side, both meet the same.
    The node's own value becomes the best of all its looks, as diag.sh reports the best of its runs
    (the first stays as KEY_first): `report compare` reads that value, and a busy moment that the
    second look cleared is then no regression there either."""
    by_check = {check: key for key, (_, check, _, _, _) in METRICS.items()}
    todo: dict[tuple[str, str], list[str]] = {}
    for name, check in sorted(low):
        key = by_check[check]
        todo.setdefault((name, METRICS[key][4]), []).append(key)
    named = {n.name: n for n in nodes}
    for (name, group), keys in todo.items():
        ref = _reference(nodes, facts, keys[0], name)
        if ref is None or (group == "network" and cfg.master.name in (name, ref.name)):
            continue
        ratios: dict[str, list[float]] = {key: [] for key in keys}
        own: dict[str, list[float]] = {key: [] for key in keys}
        for _ in range(PAIRS):
            got = _side_by_side(cfg, group, (named[name], ref), t, mb, seconds)
            mine, theirs = got.get(name), got.get(ref.name)
            if mine is None or theirs is None or mine.error or theirs.error:
                continue
            for key in keys:
                try:
                    a, b = float(mine.get(key)), float(theirs.get(key))
                except ValueError:
                    continue
                if a > 0 and b > 0:
                    ratios[key].append(a / b if METRICS[key][3] == "higher" else b / a)
                    own[key].append(a)
        for key, found in ratios.items():
            if found:
                values = facts[name].values
                values[f"{key}_paired"] = f"{statistics.median(found):.3f} {len(found)} {ref.name}"
                first = float(values[key])
                pick = max if METRICS[key][3] == "higher" else min
                values[f"{key}_first"], values[key] = values[key], f"{pick([first, *own[key]])}"


def gpu_results(cfg: SiteConfig, node: Node, facts: NodeFacts) -> list[CheckResult]:
    """A result per GPU from diag.sh's `nvidia-smi --query-gpu` CSV, judged as preflight judges
    the XML (core/checks/nvsmi.py): the class's PCIe generation, ECC, MIG as gpu.mig says."""
    lines = facts.lists.get("gpu_csv", [])
    if not lines:
        return []
    try:
        gpus = nvsmi.parse_csv("\n".join(lines))
    except nvsmi.NvsmiError as exc:
        return [CheckResult("gpus", "gpu", node.name, Status.WARN, str(exc), "nvidia-smi's CSV",
                            "run the query on the node by hand: the driver may be broken")]  # fmt: skip
    hw = cfg.hardware_classes.get(node.hardware_class)
    wanted = cfg.gpu.mig.partitions(node.hardware_class)
    out = []
    for i, gpu in enumerate(gpus):
        found = nvsmi.findings(gpu, hw.pcie_gen if hw else None, wanted)
        status = nvsmi.worst(found)
        value = "; ".join([nvsmi.summary(gpu), *(f.what for f in found)])
        hint = next((f.hint for f in found if f.status is status), "")
        out.append(CheckResult(f"gpu{i}", "gpu", node.name, status, value,
                               "ECC clean, the class's PCIe link, MIG as gpu.mig says", hint))  # fmt: skip
    return out


def run_diagnose(cfg: SiteConfig, transport: Transport | None = None, mb: int = 256, seconds: float = NET_SECONDS,
                 ask_cluster: bool = True, on_layer: Callable[[str], None] = lambda s: None,
                 pod_path: bool = True) -> Report:  # fmt: skip
    start = time.monotonic()
    t = transport or ssh_transport(cfg)
    report = Report(kind="diagnose", site=cfg.site.name)
    nodes = list(cfg.nodes)
    on_layer("cpu, memory and disk on each node")
    facts = measure_nodes(nodes, t, mb)
    on_layer(f"network: each node to {cfg.master.name}")
    others = [n for n in nodes if n.name != cfg.master.name and not facts[n.name].error]
    for name, f in measure_network(cfg.master, others, t, seconds).items():
        facts[name].values.update(f.values)
        facts[name].error = facts[name].error or f.error
    on_layer(f"registry: each node pulls from {cfg.registry.address}")
    for name, f in measure_registry(
        cfg, [n for n in nodes if not facts[n.name].error], t, mb, seconds
    ).items():
        facts[name].values.update(f.values)
    if cfg.nfs is not None:
        on_layer(f"storage: each node writes to and reads from {cfg.nfs.server}:{cfg.nfs.path}")
    for name, f in measure_nfs(cfg, [n for n in nodes if not facts[n.name].error], t, mb).items():
        facts[name].values.update(f.values)
    for n in nodes:
        if facts[n.name].error:
            report.results.append(
                CheckResult("reachable", "network", n.name, Status.FAIL, facts[n.name].error)
            )
            continue
        report.results += gpu_results(cfg, n, facts[n.name]) + nfs_results(cfg, n, facts[n.name])
        report.results += [r for r in (registry_result(n, facts[n.name]),) if r]
        if not (ask_cluster and pod_path):
            why = ("not measured by the install's quick diagnose: `appliance diagnose` measures it" if ask_cluster
                   else "not measured: no cluster to ask")  # fmt: skip
            report.results.append(pod_network_result(n, facts[n.name], why))
    reached = [n for n in nodes if not facts[n.name].error]
    ranked = rank(cfg, reached, facts)
    low = _not_passed(ranked)
    if low:
        on_layer(f"again, side by side with a peer: {_pairs(low)}")
        second_look(cfg, reached, facts, low, t, mb, seconds)
        ranked = rank(cfg, reached, facts)
        report.remeasured = len(low)
        report.cleared = len(low - _not_passed(ranked))
    report.results += [r for _, r in ranked]
    if ask_cluster and pod_path and reached:
        on_layer(f"pod network: a probe pod on each node, each node's pod to {cfg.master.name}'s")
        try:
            report.results += measure_pod_path(cfg, reached, facts, t, seconds)
        except ApplianceError as exc:
            report.results += [
                pod_network_result(n, facts[n.name], f"not measured: {exc.message}") for n in reached
            ]
    if ask_cluster:
        on_layer("kubernetes: the cluster's view of each node")
        report.results += kubernetes_view(cfg, nodes)
    report.bottleneck = bottleneck(ranked)
    report.seconds = time.monotonic() - start
    return report
