"""Runs the probe (probe.sh) on every node at once: one SSH session per node, the script on its
standard input, every fact back in one round trip. Measured against one Ansible task per check
in bench/bench_preflight.py."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor, as_completed
from importlib.resources import files
from pathlib import Path

from appliance_cli.core.checks.model import NodeFacts
from appliance_cli.core.remote import SSH_CONNECTION_FAILED, ssh_argv
from appliance_cli.core.siteconfig import Node, SiteConfig

PROBE_TIMEOUT_S = 30
LIST_KEYS = (
    "port",
    "gpu_pci",
    "gpu_smi",
    "gpu_csv",
    "cni_conf",
    "nfd",
    "pair_rtt_ms",
    "pair_mbps",
    "pair_rx_mbps",
)  # keys a probe prints once per item

# (node, argv after the script name, script) -> (rc, stdout, stderr)
Transport = Callable[[Node, list[str], str], tuple[int, str, str]]


def probe_script() -> str:
    return Path(str(files("appliance_cli.core.checks") / "probe.sh")).read_text()


def parse(node: str, text: str) -> NodeFacts:
    facts = NodeFacts(node=node)
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if not sep:
            continue
        if key in LIST_KEYS:
            facts.lists.setdefault(key, []).append(value)
        else:
            facts.values[key] = value
    if "probe_end" not in facts.values:
        facts.error = "the probe did not finish (its output ends early)"
    return facts


def ssh_transport(cfg: SiteConfig) -> Transport:
    def run(node: Node, args: list[str], script: str) -> tuple[int, str, str]:
        argv = ssh_argv(cfg, node, ["sh", "-s", "--", *args])
        try:
            r = subprocess.run(argv, input=script, capture_output=True, text=True, timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return SSH_CONNECTION_FAILED, "", f"no answer within {PROBE_TIMEOUT_S}s"
        return r.returncode, r.stdout, r.stderr

    return run


def run_error(node: Node, rc: int, out: str, err: str) -> str:
    """Why a program run on NODE over SSH failed, in one line ("" when it did not): SSH's own
    failure named as such, else the exit code and the last line it wrote to stderr."""
    last = (err.strip().splitlines() or ["(no output)"])[-1]
    if rc == SSH_CONNECTION_FAILED and not out:
        return f"{node.address}: SSH cannot connect: {last}"
    return f"failed (rc={rc}): {last}" if rc else ""


def probe_node(node: Node, args: list[str], transport: Transport, script: str) -> NodeFacts:
    start = time.time()
    rc, out, err = transport(node, args, script)
    end = time.time()
    if rc == SSH_CONNECTION_FAILED and not out:
        cause = (err.strip().splitlines() or ["(no output)"])[-1]
        return NodeFacts(node=node.name, error=f"{node.address}: SSH cannot connect: {cause}")
    facts = parse(node.name, out)
    facts.rtt_s, facts.received_at = end - start, end
    if rc != 0 and not facts.error:
        facts.error = f"the probe failed (rc={rc}): {(err.strip().splitlines() or ['?'])[-1]}"
    return facts


def collect(
    nodes: Iterable[Node],
    args: Callable[[Node], list[str]],
    transport: Transport,
    on_node: Callable[[NodeFacts], None] = lambda f: None,
) -> dict[str, NodeFacts]:
    """Probe every node in parallel; `on_node` sees each node's facts as they arrive."""
    script = probe_script()
    nodes = list(nodes)
    out: dict[str, NodeFacts] = {}
    with ThreadPoolExecutor(max_workers=max(1, min(len(nodes), 64))) as pool:
        futures = [pool.submit(probe_node, n, args(n), transport, script) for n in nodes]
        for fut in as_completed(futures):
            facts = fut.result()
            out[facts.node] = facts
            on_node(facts)
    return out
