"""`appliance node drain|uncordon NODE`: day-2 maintenance of one node (kubectl on the master)."""

from __future__ import annotations

import argparse
import sys

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import nodeops
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import SiteConfig, load_site
from appliance_cli.errors import Cancelled, UsageError


def register(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="day-2 maintenance of one node: drain, uncordon")
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


def _kubectl(cfg: SiteConfig) -> nodeops.Kubectl:
    return nodeops.remote_kubectl(lambda command: run_on(cfg, cfg.master, command, timeout=900))


def _confirm(question: str) -> None:
    if not sys.stdin.isatty():
        raise UsageError("not draining without confirmation", hint="pass --yes (no terminal to ask on)")
    if input(f"{question} [y/N] ").strip().lower() not in ("y", "yes"):
        raise Cancelled("drain cancelled")


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
