"""diagnose's pod network path (podpath.py): the probe pods it submits, how it reads their state,
the node-side helpers run for real (the sandbox image reader on config files; the netns runner in
tests/integration/test_diagnose_podpath_netns.py), and the rows it reports, driven through
run_diagnose with a transport that answers as the nodes' programs print and a recorded API
(kubectl's JSON), so the path from probe to report is the product's."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance_cli.core import cluster
from appliance_cli.core.checks import podpath
from appliance_cli.core.checks.diagnose import NET_PORT, Transport, run_diagnose
from appliance_cli.core.checks.model import Status
from appliance_cli.core.remote import remote_command
from appliance_cli.core.siteconfig import Node, SiteConfig, load_site
from appliance_cli.errors import ApplianceError
from tests._support.paths import EXAMPLE

IMAGE = "10.77.0.10:5000/pause:3.6"


@pytest.fixture(scope="module")
def cfg(tmp_path_factory: pytest.TempPathFactory) -> SiteConfig:
    d = tmp_path_factory.mktemp("site")
    shutil.copy(EXAMPLE, d / "appliance.yml")
    return load_site(d)


def test_each_node_gets_one_pinned_probe_pod_on_the_pod_network(cfg: SiteConfig) -> None:
    doc = podpath.manifest(list(cfg.nodes), IMAGE)
    assert [p["spec"]["nodeName"] for p in doc["items"]] == [n.name for n in cfg.nodes]
    for pod in doc["items"]:
        spec = pod["spec"]
        assert pod["metadata"]["labels"] == {podpath.LABEL: "pod-network"}
        assert pod["metadata"]["name"] == f"appliance-probe-{spec['nodeName']}"
        assert "hostNetwork" not in spec and spec["restartPolicy"] == "Never"
        assert spec["tolerations"] == [{"operator": "Exists"}]  # a master's or GPU node's taint too
        assert spec["containers"] == [{"name": "probe", "image": IMAGE}]  # the image's own entrypoint


def _pod(node: str, phase: str, ip: str = "", waiting: dict | None = None) -> dict:
    status: dict = {"phase": phase}
    if ip:
        status["podIP"] = ip
    if waiting:
        status["containerStatuses"] = [{"name": "probe", "state": {"waiting": waiting}}]
    return {"spec": {"nodeName": node}, "status": status}


def test_a_probe_counts_as_running_with_its_address_and_a_waiting_one_says_why() -> None:
    probes = {n: podpath.Probe(n) for n in ("a", "b", "c")}
    doc = {"items": [_pod("a", "Running", "10.244.1.2"), _pod("b", "Running"),
                     _pod("c", "Pending", waiting={"reason": "ErrImagePull", "message": 'pull "x": not found'})]}  # fmt: skip
    podpath.observe(doc, probes, 100.0, 102.5)
    assert (probes["a"].ip, probes["a"].seconds) == ("10.244.1.2", 2.5)
    assert probes["b"].seconds is None  # Running without an address: not yet on the pod network
    assert probes["c"].waiting == 'ErrImagePull: pull "x": not found'
    podpath.observe({"items": [_pod("a", "Running", "10.244.1.9")]}, probes, 100.0, 110.0)
    assert (probes["a"].ip, probes["a"].seconds) == ("10.244.1.2", 2.5)  # the first sighting counts
    podpath.observe({"items": [_pod("b", "Running", "10.244.1.3; reboot")]}, probes, 100.0, 110.0)
    assert (
        probes["b"].seconds is None
        and probes["b"].waiting == "its pod IP '10.244.1.3; reboot' is not an IPv4 address"
    )


SANDBOX_CONF = """version = 2
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "10.77.0.10:5000/pause:3.6"
"""


@pytest.mark.parametrize(
    ("containerd", "flags", "image"),
    [
        (SANDBOX_CONF, None, IMAGE),
        (None, 'KUBELET_KUBEADM_ARGS="--network-plugin=cni --pod-infra-container-image=10.77.0.10:5000/pause:3.6"\n', IMAGE),
        ("version = 2\n", None, ""),
    ],
)  # fmt: skip
def test_the_sandbox_image_is_read_as_the_node_runtime_has_it(
    tmp_path: Path, containerd: str | None, flags: str | None, image: str
) -> None:
    """SANDBOX_IMAGE_PY run by a real python3 on the files as the install writes them."""
    conf, env = tmp_path / "config.toml", tmp_path / "kubeadm-flags.env"
    if containerd is not None:
        conf.write_text(containerd)
    if flags is not None:
        env.write_text(flags)
    out = subprocess.run([sys.executable, "-c", podpath.SANDBOX_IMAGE_PY, str(conf), str(env)],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert out.strip() == image


class Nodes(Transport):
    """The master prints SANDBOX; each node's pod test prints what `answers` holds for it."""

    def __init__(self, sandbox: str, answers: dict[str, tuple[int, str, str]]) -> None:
        super().__init__(argv=lambda node, command: command)
        self.sandbox, self.answers, self.commands = sandbox, answers, []
        self.pair_ms: dict[tuple[str, str], float] = {}  # (from pod IP, to pod IP) -> ms; else 0.2
        self.pair_mbps: dict[tuple[str, str], float] = {}  # ... -> Mb/s; else 8000
        self.pair_rx: dict[tuple[str, str], float] = {}  # the other way, on every look; else 8000
        self.second: dict[tuple[str, str], tuple[float, ...]] = {}  # a second look's ms, Mb/s (and rx)
        self.looked: list[tuple[str, str]] = []  # every (from pod IP, to pod IP) tested, in order
        self.pod_again: dict[str, tuple[int, str, str]] = {}  # node -> what its pod path prints next time
        self.tested: list[tuple[str, str]] = []  # ("node" | "pod", node), every path test in order

    def run(self, node: Node, command: list[str], stdin: str, timeout: int = 300) -> tuple[int, str, str]:
        self.commands.append((node.name, command))
        if command[:2] == ["python3", "-c"]:
            return 0, self.sandbox + "\n", ""
        if command[:1] == ["env"]:  # diag.sh: a node with a kubelet
            return 0, "virt_type=none\nkubelet_kind=binary\ndiag_end=1\n", ""
        if command[:2] == ["sh", "-c"] and "test" in command:  # the pod path
            again = ("pod", node.name) in self.tested and node.name in self.pod_again
            self.tested.append(("pod", node.name))
            return self.pod_again[node.name] if again else self.answers[node.name]
        if command[:2] == ["sh", "-c"] and "pairs" in command:  # pairs, from this node's pod
            out = []
            for ip in command[command.index("pairs") + 3 :]:
                key = (command[4], ip)
                ms, mbps = self.pair_ms.get(key, 0.2), self.pair_mbps.get(key, 8000.0)
                rx = self.pair_rx.get(key, 8000.0)
                if key in self.looked and key in self.second:
                    ms, mbps, *way_back = self.second[key]
                    rx = way_back[0] if way_back else rx
                self.looked.append(key)
                out.append(f"pair_rtt_ms={ip} {ms}\npair_mbps={ip} {mbps}\npair_rx_mbps={ip} {rx}\n")
            return 0, "".join(out), ""
        if command[:1] == ["python3"] and "test" in command:  # the node path
            self.tested.append(("node", node.name))
            return 0, "net_rtt_ms=0.100\nnet_mbps=9000.0\n", ""
        if ":" in command[2]:
            return 0, "registry_pull_skip=not installed\n", ""
        return 0, "nfs_skip=not installed\n", ""

    def spawn(self, node: Node, command: list[str], stdin: str) -> subprocess.Popen[str]:
        self.commands.append((node.name, command))
        return subprocess.Popen(["sh", "-c", "echo listening=1; cat >/dev/null"], stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


class Api:
    """kubectl on the master, recorded: the probes run (with addresses) after `runs_after` gets,
    except those in `stuck`, which wait with ErrImagePull."""

    def __init__(self, nodes: list[str], runs_after: int = 1, stuck: tuple[str, ...] = ()) -> None:
        self.nodes, self.runs_after, self.stuck, self.calls, self.gets = nodes, runs_after, stuck, [], 0

    def __call__(self, cfg: SiteConfig, args: list[str], timeout: int = 60, stdin: str | None = None) -> str:
        self.calls.append((args, stdin))
        if args[:2] == ["get", "pods"]:
            self.gets += 1
            items = []
            for i, n in enumerate(self.nodes):
                if n in self.stuck:
                    items.append(
                        _pod(n, "Pending", waiting={"reason": "ErrImagePull", "message": "not found"})
                    )
                elif self.gets > self.runs_after:
                    items.append(_pod(n, "Running", f"10.244.{i}.2"))
                else:
                    items.append(_pod(n, "Pending", waiting={"reason": "ContainerCreating"}))
            return json.dumps({"items": items})
        return ""


def _diagnose(cfg: SiteConfig, t: Transport, api: Api, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(cluster, "kubectl", api)
    monkeypatch.setattr("appliance_cli.core.checks.diagnose.kubernetes_view", lambda cfg, nodes: [])
    monkeypatch.setattr(podpath, "PROBE_TIMEOUT_S", 1.5)  # a stuck probe is given up on soon
    return run_diagnose(cfg, t, mb=8, seconds=0.1)


def test_each_node_pod_path_is_measured_in_the_probe_pods_beside_its_node_path(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]
    slow = names[2]
    answers = {n: (0, "net_rtt_ms=0.200\nnet_mbps=8000.0\n", "") for n in names}
    answers[slow] = (0, "net_rtt_ms=0.900\nnet_mbps=3000.0\n", "")  # a third of its node path
    t, api = Nodes(IMAGE, answers), Api(names)
    report = _diagnose(cfg, t, api, monkeypatch)
    rows = {(r.check, r.node): r for r in report.results}
    applied = json.loads(next(stdin for args, stdin in api.calls if args[:1] == ["apply"]))
    assert [p["spec"]["containers"][0]["image"] for p in applied["items"]] == [IMAGE] * len(names)
    for n in names:
        assert rows[("probe_pod_start", n)].status is Status.PASS and rows[("probe_pod_start", n)].unit == "s"
    master = cfg.master.name
    assert rows[("pod_network", master)].status is Status.SKIP
    ok = next(n for n in names if n not in (master, slow))
    assert (rows[("pod_network", ok)].status, rows[("pod_network", ok)].number) == (Status.PASS, 8000.0)
    assert (
        rows[("pod_latency", ok)].number == 0.2 and "node path 0.100 ms" in rows[("pod_latency", ok)].expected
    )
    bad = rows[("pod_network", slow)]
    assert bad.status is Status.WARN and "costs 67% of the node path" in bad.hint, bad
    assert "of the node path's 9000 Mb/s" in bad.expected
    # the server in the master's probe pod, each test in its node's: the address an argument, not shell text
    master_ip = f"10.244.{names.index(master)}.2"
    server = next(c for node, c in t.commands if node == master and c[:2] == ["sh", "-c"] and "serve" in c)
    assert server[:5] == ["sh", "-c", podpath.IN_POD_NETNS, "sh", master_ip]
    test = next(c for node, c in t.commands if node == ok and c[:2] == ["sh", "-c"])
    assert test[3:] == [
        "sh",
        f"10.244.{names.index(ok)}.2",
        "python3",
        "-",
        "test",
        master_ip,
        str(NET_PORT),
        "0.1",
    ]
    assert (
        api.calls[-1][0][:2] == ["delete", "pods"] and "--wait=false" in api.calls[-1][0]
    )  # removed at the end


def test_a_probe_that_never_runs_fails_naming_why_and_its_node_is_not_measured(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]
    stuck = names[1]
    t = Nodes(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    report = _diagnose(cfg, t, Api(names, stuck=(stuck,)), monkeypatch)
    rows = {(r.check, r.node): r for r in report.results}
    start = rows[("probe_pod_start", stuck)]
    assert start.status is Status.FAIL and start.value == "ErrImagePull: not found"
    assert f"describe pod appliance-probe-{stuck}" in start.hint
    assert (
        rows[("pod_network", stuck)].status is Status.SKIP
        and "did not run" in rows[("pod_network", stuck)].hint
    )
    assert not any(node == stuck and c[:2] == ["sh", "-c"] for node, c in t.commands)


def test_a_sandbox_image_that_is_not_a_reference_is_refused_naming_the_files(cfg: SiteConfig) -> None:
    with pytest.raises(ApplianceError) as e:
        podpath.sandbox_image(cfg, Nodes("pause:3.6; reboot", {}))
    assert (
        "no sandbox image in /etc/containerd/config.toml or /var/lib/kubelet/kubeadm-flags.env"
        in e.value.message
    )


def test_the_netns_runner_reaches_the_node_as_words_whatever_the_address_holds() -> None:
    argv = podpath.in_pod("10.0.0.1; reboot", ["python3", "-", "test"])
    assert remote_command(argv, "root").startswith("sh -c ") and "'10.0.0.1; reboot'" in remote_command(
        argv, "root"
    )


def test_every_pair_of_probe_pods_is_measured_and_a_slow_pair_is_named_after_a_second_look(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]
    ip = {n: f"10.244.{i}.2" for i, n in enumerate(names)}
    t = Nodes(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    slow_key = (ip[names[1]], ip[names[2]])
    t.pair_ms[slow_key] = 3.0
    t.second[slow_key] = (2.5, 8000.0)  # still slow the second time
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    want = {f"{a}<>{b}" for i, a in enumerate(names) for b in names[i + 1 :]}
    assert len(want) == len(names) * (len(names) - 1) // 2
    for check in ("pod_pair_latency", "pod_pair_throughput"):
        assert {r.node for r in report.results if r.check == check} == want, check
    pairs = {r.node: r for r in report.results if r.check == "pod_pair_latency"}
    slow = pairs[f"{names[1]}<>{names[2]}"]
    assert (slow.status, slow.number) == (Status.WARN, 2.5), slow  # the second look is kept
    assert "its second look; first 3.000 ms" in slow.value and names[1] in slow.hint and names[2] in slow.hint
    ref = f"{names[0]}<>{names[1]}"  # the fastest pair that did not look slow (ties: the first)
    assert slow.expected == f"within 2x the 0.200 ms of {ref}, measured right after it", slow.expected
    assert all(r.status is Status.PASS for r in pairs.values() if r is not slow)
    thru = {r.node: r for r in report.results if r.check == "pod_pair_throughput"}
    assert all(r.status is Status.PASS and r.number == 8000.0 and r.unit == "Mb/s" for r in thru.values())
    # every pair once, from the earlier pod to the later; then the slow pair again, the reference right after
    first = [(ip[a], ip[b]) for i, a in enumerate(names) for b in names[i + 1 :]]
    assert t.looked == [*first, slow_key, (ip[names[0]], ip[names[1]])]
    # the first look: a server in every pod but the first, three connections per pod before it
    serves = [
        (node, c[c.index("serve") + 1 :]) for node, c in t.commands if c[:2] == ["sh", "-c"] and "serve" in c
    ]
    pair_serves = [(node, args) for node, args in serves if args[0] == str(NET_PORT + 1)]
    assert pair_serves == [(n, [str(NET_PORT + 1), str(3 * i)]) for i, n in enumerate(names) if i] + [
        (names[2], [str(NET_PORT + 1), "3"]),
        (names[1], [str(NET_PORT + 1), "3"]),
    ]


def test_a_pair_that_is_slow_once_is_measured_again_and_not_named(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]
    ip = {n: f"10.244.{i}.2" for i, n in enumerate(names)}
    t = Nodes(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    key = (ip[names[0]], ip[names[-1]])
    t.pair_mbps[key] = 900.0
    t.second[key] = (0.2, 7800.0)
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    row = next(
        r for r in report.results if r.check == "pod_pair_throughput" and r.node == f"{names[0]}<>{names[-1]}"
    )
    assert (row.status, row.number) == (Status.PASS, 7800.0) and "first 0.200 ms, 900 Mb/s" in row.value
    assert not [r for r in report.results if r.check.startswith("pod_pair") and r.status is not Status.PASS]


def test_a_pair_slow_on_both_looks_beside_a_reference_as_slow_is_not_named(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host busy through both looks: the pair's second look is thin against the first look's best
    stream, but not against the reference pair measured right after it, which the load slowed too."""
    names = [n.name for n in cfg.nodes]
    ip = {n: f"10.244.{i}.2" for i, n in enumerate(names)}
    t = Nodes(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    key, ref = (ip[names[0]], ip[names[-1]]), (ip[names[0]], ip[names[1]])
    t.pair_mbps[key] = 900.0
    t.second[key] = (0.2, 2000.0)  # a quarter of the first look's best
    t.second[ref] = (0.2, 3000.0, 2900.0)  # the load slows the reference, both ways
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    row = next(
        r for r in report.results if r.check == "pod_pair_throughput" and r.node == f"{names[0]}<>{names[-1]}"
    )
    assert (row.status, row.number) == (Status.PASS, 2000.0), row
    assert row.expected == f"at least 50% of the 3000 Mb/s of {names[0]}<>{names[1]}, measured right after it"
    assert t.looked[-2:] == [key, ref]
    assert not [r for r in report.results if r.check.startswith("pod_pair") and r.status is not Status.PASS]


def test_a_pod_path_thin_once_is_measured_again_right_after_its_node_path_and_not_named(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]
    noisy, slow = names[1], names[2]
    answers = {n: (0, "net_rtt_ms=0.200\nnet_mbps=8000.0\n", "") for n in names}
    answers[noisy] = answers[slow] = (0, "net_rtt_ms=0.900\nnet_mbps=3000.0\n", "")  # a third of 9000
    t = Nodes(IMAGE, answers)
    t.pod_again[noisy] = (0, "net_rtt_ms=0.210\nnet_mbps=7000.0\n", "")  # the moment passed
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    rows = {(r.check, r.node): r for r in report.results}
    ok = rows[("pod_network", noisy)]
    assert (ok.status, ok.number) == (Status.PASS, 7000.0), ok
    assert ok.value == "7000 Mb/s to the master's probe pod (its second look; first 3000 Mb/s)"
    assert ok.expected.endswith("(node path rtt 0.100 ms, measured right before it)"), ok.expected
    bad = rows[("pod_network", slow)]  # thin on both looks: named
    assert bad.status is Status.WARN and "first 3000 Mb/s" in bad.value and "costs 67%" in bad.hint, bad
    # each thin node: its node path, then its pod path, after every pod path's first look
    pods = [n for n in names if n != cfg.master.name]
    tail = t.tested[t.tested.index(("pod", pods[-1])) + 1 : t.tested.index(("pod", pods[-1])) + 5]
    assert tail == [("node", noisy), ("pod", noisy), ("node", slow), ("pod", slow)], t.tested


def test_the_node_in_every_slow_pair_is_named_as_the_bottleneck(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]
    ip = {n: f"10.244.{i}.2" for i, n in enumerate(names)}
    t = Nodes(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    bad = names[-1]  # the later pod of each of its pairs: what it sends is their stream back
    for a, b in [(a, b) for i, a in enumerate(names) for b in names[i + 1 :] if bad in (a, b)]:
        t.pair_rx[(ip[a], ip[b])] = 1000.0  # both looks: the thin link is real
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    thin = [r for r in report.results if r.check == "pod_pair_throughput" and r.status is Status.WARN]
    assert {r.node for r in thin} == {pair for pair in (f"{a}<>{b}" for i, a in enumerate(names) for b in names[i + 1 :])
                                      if bad in pair.split("<>")}  # fmt: skip
    assert all(f"every slow pair includes {bad}" in r.hint for r in thin), thin[0].hint
    assert all(r.number == 1000.0 and f"{bad} to " in r.value and "8000, " in r.value for r in thin), thin[
        0
    ].value


def test_a_pair_that_cannot_talk_fails_naming_both_nodes(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]

    class Refused(Nodes):
        def run(self, node: Node, command: list[str], stdin: str, timeout: int = 300) -> tuple[int, str, str]:
            if command[:2] == ["sh", "-c"] and "pairs" in command and node.name == names[0]:
                return 1, "", "ConnectionRefusedError: [Errno 111] Connection refused\n"
            return super().run(node, command, stdin, timeout)

    t = Refused(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    for check in ("pod_pair_latency", "pod_pair_throughput"):
        failed = [r for r in report.results if r.check == check and r.status is Status.FAIL]
        assert {r.node for r in failed} == {f"{names[0]}<>{b}" for b in names[1:]}, check
    assert all("Connection refused" in r.value and f"TCP {NET_PORT + 1}" in r.hint for r in failed)


def test_a_server_that_cannot_start_in_a_probe_pod_fails_its_rows_and_keeps_the_rest(
    cfg: SiteConfig, monkeypatch: pytest.MonkeyPatch
) -> None:
    names = [n.name for n in cfg.nodes]

    class NoNetns(Nodes):
        def spawn(self, node: Node, command: list[str], stdin: str) -> subprocess.Popen[str]:
            if command[:2] != ["sh", "-c"]:
                return super().spawn(node, command, stdin)
            why = f"no network namespace on this node holds the probe pod's address {command[4]}"
            return subprocess.Popen(["sh", "-c", 'echo "$1" >&2; exit 3', "sh", why], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip

    t = NoNetns(IMAGE, {n: (0, "net_rtt_ms=0.2\nnet_mbps=8000.0\n", "") for n in names})
    report = _diagnose(cfg, t, Api(names), monkeypatch)
    rows = {(r.check, r.node): r for r in report.results}
    assert all(rows[("probe_pod_start", n)].status is Status.PASS for n in names)  # kept
    for n in names[1:]:
        r = rows[("pod_network", n)]
        assert r.status is Status.FAIL and "the test server in the probe pod did not start" in r.value, r
        assert "holds the probe pod's address" in r.value
    assert rows[("pod_pair_latency", "site")].status is Status.FAIL
    assert rows[("pod_pair_throughput", "site")].status is Status.FAIL
