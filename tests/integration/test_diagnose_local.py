"""The AOU's real node-side programs (diag.sh, netperf.py) run on this machine as every node of a
loopback site: each layer measured, the network test's server and clients meet, numbers parse."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from appliance_cli.core.checks import diagnose
from appliance_cli.core.checks.diagnose import Transport, run_diagnose
from appliance_cli.core.checks.model import Status
from appliance_cli.core.checks.probe import parse
from appliance_cli.core.siteconfig import load_site
from tests._support.paths import EXAMPLE

pytestmark = pytest.mark.integration


def test_every_layer_is_measured_on_every_node(tmp_path):
    data = yaml.safe_load(EXAMPLE.read_text())
    data["network"]["node_cidr"] = "127.0.0.0/24"
    # every measurement stays on this machine: the example's registry and NFS filer are a real site's
    data["registry"]["address"] = "127.0.0.1:9"
    data["nfs"]["server"] = "127.0.0.1"
    for i, node in enumerate(data["nodes"], start=1):
        node["address"] = f"127.0.0.{i}"
    (tmp_path / "appliance.yml").write_text(yaml.safe_dump(data))
    cfg = load_site(tmp_path)
    layers: list[str] = []
    rep = run_diagnose(cfg, Transport(lambda node, command: command), mb=8, seconds=0.2, ask_cluster=False,
                       on_layer=layers.append)  # fmt: skip
    measured = {(r.node, r.check): r for r in rep.results if r.number is not None}
    for n in cfg.nodes:
        for check in ("cpu_throughput", "memory_throughput", "disk_write"):
            assert measured[(n.name, check)].number > 0, (n.name, check)
    for n in cfg.nodes[1:]:  # the master is the network test's server end
        assert measured[(n.name, "throughput_to_master")].number > 10  # Mb/s over loopback
        assert 0 < measured[(n.name, "latency_to_master")].number < 50  # ms
    assert not [r for r in rep.results if r.check == "reachable"]
    # the four layers, then, where a value fell below its threshold (loopback on a busy machine),
    # one more pass that measures just those again
    assert len(layers) == 4 + (rep.remeasured > 0), layers
    assert all(s.startswith("again, side by side with a peer: ") for s in layers[4:])
    # this host has no registry CA, no kubelet and no libnfs tools: those say so per node; nothing else skips
    skipped = {
        (r.node, r.check, r.hint.split(" (")[0].split(":")[0]) for r in rep.results if r.status is Status.SKIP
    }
    assert skipped == {
        (n.name, check, why)
        for n in cfg.nodes
        for check, why in (
            ("pull_throughput", "the registry is not installed yet"),
            ("pod_network", "no kubelet on this node yet"),
            ("nfs_write", "libnfs-utils"),  # "libnfs-utils (nfs-cp, nfs-cat) is not installed yet: ..."
            ("nfs_read", "libnfs-utils"),
        )
    }


def test_netperf_pairs_mode_times_and_streams_each_peer_in_turn():
    """`pairs`: for each host, a ping-pong, a stream to it and one from it, each on its own
    connection to one server that takes exactly three connections per pair (podpath._test_pairs
    sizes it so)."""
    script = str(Path(diagnose.__file__).with_name("netperf.py"))
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, script, "serve", str(port), "6"], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None and server.stdout.readline().strip() == "listening=1"
        out = subprocess.run([sys.executable, script, "pairs", str(port), "0.3", "127.0.0.1", "127.0.0.2"],
                             capture_output=True, text=True, timeout=60, check=True).stdout  # fmt: skip
        assert server.wait(timeout=30) == 0  # it took its six connections and ended
    finally:
        server.kill()
    lists = parse("node", out + "probe_end=1\n").lists
    rtt = dict(v.split(" ", 1) for v in lists["pair_rtt_ms"])
    mbps = dict(v.split(" ", 1) for v in lists["pair_mbps"])
    rx = dict(v.split(" ", 1) for v in lists["pair_rx_mbps"])
    assert set(rtt) == set(mbps) == set(rx) == {"127.0.0.1", "127.0.0.2"}, out
    assert all(0 < float(v) < 50 for v in rtt.values()), out
    assert all(float(v) > 10 for v in [*mbps.values(), *rx.values()]), out
