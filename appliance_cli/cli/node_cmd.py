"""`appliance node drain|uncordon|rejoin NODE`: day-2 maintenance of one node."""

from __future__ import annotations

import argparse
import sys
import time

from appliance_cli.cli import ui
from appliance_cli.cli.install_cmd import make_runner
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import bundlegate, cluster, nodeops, sitelock
from appliance_cli.core.install import install
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import Node, SiteConfig, load_site
from appliance_cli.errors import ApplianceError, Cancelled, UsageError
from appliance_cli.runner.events import RunOptions

READY_TIMEOUT = 300


def register(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="day-2 maintenance of one node: drain, uncordon, rejoin")
    nsub = node.add_subparsers(dest="node_command", metavar="ACTION", required=True)
    d = nsub.add_parser(
        "drain",
        help="take a node out of service: with Run:ai its drain taint (runai=drain:NoExecute) + cordon, "
        "else cordon + evict (PodDisruptionBudgets respected, daemonsets stay)",
    )
    add_site_arg(d)
    d.add_argument("node", metavar="NODE")
    d.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    d.add_argument("--force", action="store_true", help="also evict pods no controller recreates (lost)")
    d.set_defaults(handler=cmd_drain)
    u = nsub.add_parser("uncordon", help="put a drained node back in service (undoes either drain)")
    add_site_arg(u)
    u.add_argument("node", metavar="NODE")
    u.set_defaults(handler=cmd_uncordon)
    r = nsub.add_parser(
        "rejoin",
        help="reset a worker (kubeadm reset, saying what it removes) and join it again with a fresh token: "
        "install --limit NODE, labels and taints from the site config, wait until Ready",
    )
    add_site_arg(r)
    r.add_argument("node", metavar="NODE")
    r.add_argument("--yes", action="store_true", help="do not ask before resetting a joined node")
    r.add_argument("--bundle", metavar="DIR", help="the bundle to verify (default: bundle.source)")
    r.add_argument("--key", metavar="PUB", help="trusted public key of the bundle")
    r.set_defaults(handler=cmd_rejoin)


def _kubectl(cfg: SiteConfig) -> nodeops.Kubectl:
    return lambda args: cluster.kubectl(cfg, args, timeout=900)


def _confirm(question: str, what: str = "draining") -> None:
    if not sys.stdin.isatty():
        raise UsageError(f"not {what} without confirmation", hint="pass --yes (no terminal to ask on)")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise Cancelled(f"{what} cancelled")


def cmd_drain(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    nodeops.check_node(cfg, args.node, draining=True)  # before any ssh
    kubectl = _kubectl(cfg)
    plan = nodeops.plan_drain(cfg, args.node, nodeops.pods_doc(kubectl), force=args.force)
    how = (
        "Run:ai's drain taint runai=drain:NoExecute + cordon (Run:ai moves its workloads)"
        if plan.method == "runai-taint"
        else "cordon + evict (PodDisruptionBudgets respected, daemonset pods stay)"
    )
    ui.info(f"{args.node}: {how}")
    for pod in plan.evicted:
        ui.info(f"  will go: {pod.namespace}/{pod.name} ({pod.owner or 'no controller: lost for good'})")
    if not plan.evicted:
        ui.info("  no pod to move (daemonset and static pods stay)")
    if plan.method == "evict" and plan.bare and not args.force:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in plan.bare)
        raise UsageError(
            f"{args.node}: pods without a controller would be lost: {names}",
            hint="move them first, or pass --force to delete them",
        )
    if not args.yes:
        _confirm(f"drain {args.node}?")
    for command in plan.commands:
        kubectl(command)
    ui.info(
        f"{args.node}: drained ({ui.count(len(plan.evicted), 'pod')} moved); `appliance node uncordon {args.node}` undoes it"
    )
    return 0


def cmd_uncordon(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    nodeops.check_node(cfg, args.node, draining=False)
    kubectl = _kubectl(cfg)
    commands = nodeops.plan_uncordon(cfg, args.node, nodeops.read_json(kubectl, f"get node {args.node}"))
    for command in commands:
        kubectl(command)
    ui.info(f"{args.node}: " + ("back in service" if commands else "already in service, nothing to undo"))
    return 0


def cmd_rejoin(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    nodeops.check_node(cfg, args.node, draining=True, action="resetting")
    node = cfg.node(args.node)
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key)  # before the node is touched
    with sitelock.site_lock(cfg, f"node rejoin {node.name}"):
        _rejoin(cfg, node, gate.extravars, args.yes)
    ui.info(f"{node.name}: rejoined with a fresh token, labelled from the site config, Ready")
    return 0


def _rejoin(cfg: SiteConfig, node: Node, extravars: dict[str, str], yes: bool) -> None:
    joined = run_on(cfg, node, f"sh -c 'test -f {nodeops.KUBELET_CONF} && echo joined || echo not-joined'")
    if joined.strip() == "joined":
        ui.info(f"{node.name}: kubeadm reset -f {nodeops.RESET_REMOVES}")
        if not yes:
            _confirm(f"reset and rejoin {node.name}?", "resetting")
        run_on(cfg, node, "kubeadm reset -f", timeout=300)
    else:
        ui.info(f"{node.name}: not joined ({nodeops.KUBELET_CONF} absent): nothing to reset")
    kubectl = _kubectl(cfg)
    kubectl(f"delete node {node.name} --ignore-not-found")  # its old Node object and labels go
    with Progress(f"rejoin {node.name}") as progress:
        result = install(make_runner(), cfg, RunOptions(limit=node.name), progress, extravars=extravars)
    print_recap(result)
    deadline = time.monotonic() + READY_TIMEOUT
    while not nodeops.ready(nodeops.read_json(kubectl, f"get node {node.name}")):
        if time.monotonic() > deadline:
            raise ApplianceError(
                f"{node.name}: joined but not Ready after {READY_TIMEOUT}s",
                hint=f"`appliance status` and the kubelet's journal on {node.name}",
            )
        time.sleep(5)
