"""`appliance node drain|uncordon|rejoin|add|remove NODE`: day-2 maintenance of one node."""

from __future__ import annotations

import argparse
import time
from typing import Any

from appliance_cli.cli import preflight_cmd, ui
from appliance_cli.cli.install_cmd import make_runner, trust_hosts
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import bundlegate, cluster, knownhosts, nodeops, siteedit, sitelock
from appliance_cli.core.install import install
from appliance_cli.core.siteconfig import Node, SiteConfig, load_site, site_file
from appliance_cli.errors import ApplianceError, Unreachable, UsageError
from appliance_cli.runner.events import RunOptions

READY_TIMEOUT = 300


def register(sub: argparse._SubParsersAction) -> None:
    node = sub.add_parser("node", help="day-2 maintenance of one node: drain, uncordon, rejoin, add, remove")
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
    _add_bundle_args(r)
    r.set_defaults(handler=cmd_rejoin)
    a = nsub.add_parser(
        "add",
        help="join a worker newly written into the site config: record its host key, preflight, "
        "install --limit NODE, wait until Ready, show its labels",
    )
    add_site_arg(a)
    a.add_argument("node", metavar="NODE")
    a.add_argument("--yes", action="store_true", help="record the node's host key without asking")
    _add_bundle_args(a)
    a.set_defaults(handler=cmd_add)
    rm = nsub.add_parser(
        "remove",
        help="take a worker out of the cluster for good: drain, delete the Node, kubeadm reset on it "
        "(when reachable), mark its site config entry `removed: true`",
    )
    add_site_arg(rm)
    rm.add_argument("node", metavar="NODE")
    rm.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--force", action="store_true", help="also evict pods no controller recreates (lost)")
    _add_bundle_args(rm)
    rm.set_defaults(handler=cmd_remove)


def _add_bundle_args(p: argparse.ArgumentParser) -> None:
    """The bundle verified before a node is touched (rejoin, add, remove)."""
    p.add_argument("--bundle", metavar="DIR", help="the bundle to verify (default: bundle.source)")
    p.add_argument("--key", metavar="PUB", help="trusted public key of the bundle")


def _kubectl(cfg: SiteConfig) -> nodeops.Kubectl:
    return lambda args: cluster.kubectl(cfg, args, timeout=900)


def cmd_drain(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    nodeops.check_node(cfg, args.node, draining=True)  # before any ssh
    # the lock: an upgrade's uncordon would undo a drain made while it runs
    with sitelock.site_lock(cfg, f"node drain {args.node}"):
        kubectl = _kubectl(cfg)
        plan = nodeops.plan_drain(cfg, args.node, nodeops.pods_doc(kubectl), force=args.force)
        _show_drain(plan, args.force)
        if not args.yes:
            ui.confirm(f"drain {args.node}?", "draining")
        for command in plan.commands:
            kubectl(command)
    ui.info(
        f"{args.node}: drained ({ui.count(len(plan.evicted), 'pod')} moved); `appliance node uncordon {args.node}` undoes it"
    )
    return 0


def _show_drain(plan: nodeops.DrainPlan, force: bool) -> None:
    """What the drain does and which pods go; pods that would be lost refused without --force."""
    how = (
        "Run:ai's drain taint runai=drain:NoExecute + cordon (Run:ai moves its workloads)"
        if plan.method == "runai-taint"
        else "cordon + evict (PodDisruptionBudgets respected, daemonset pods stay)"
    )
    ui.info(f"{plan.node}: {how}")
    for warning in plan.warnings:
        ui.warn(warning)
    for pod in plan.evicted:
        ui.info(f"  will go: {pod.namespace}/{pod.name} ({pod.owner or 'no controller: lost for good'})")
    if not plan.evicted:
        ui.info("  no pod to move (daemonset and static pods stay)")
    if plan.method == "evict" and plan.bare and not force:
        names = ", ".join(f"{p.namespace}/{p.name}" for p in plan.bare)
        raise UsageError(
            f"{plan.node}: pods without a controller would be lost: {names}",
            hint="move them first, or pass --force to delete them",
        )


def cmd_uncordon(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    nodeops.check_node(cfg, args.node, draining=False)
    with sitelock.site_lock(cfg, f"node uncordon {args.node}"):
        kubectl = _kubectl(cfg)
        commands = nodeops.plan_uncordon(
            cfg, args.node, nodeops.read_json(kubectl, ["get", "node", args.node])
        )
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
    if nodeops.joined(cfg, node):
        ui.info(f"{node.name}: kubeadm reset -f {nodeops.RESET_REMOVES}")
        if not yes:
            ui.confirm(f"reset and rejoin {node.name}?", "resetting")
        nodeops.reset(cfg, node)
    else:
        ui.info(f"{node.name}: not joined ({nodeops.KUBELET_CONF} absent): nothing to reset")
    _kubectl(cfg)(["delete", "node", node.name, "--ignore-not-found"])  # its old Node object and labels go
    _join_and_wait(cfg, node, extravars, "rejoin")


def _join_and_wait(cfg: SiteConfig, node: Node, extravars: dict[str, str], what: str) -> dict[str, Any]:
    """install --limit NODE (the roles delegate the master's part to it), then wait until the node
    is Ready; returns its Node object."""
    with Progress(f"{what} {node.name}") as progress:
        result = install(make_runner(), cfg, RunOptions(limit=node.name), progress, extravars=extravars)
    print_recap(result)
    kubectl = _kubectl(cfg)
    deadline = time.monotonic() + READY_TIMEOUT
    while not nodeops.ready(doc := nodeops.read_json(kubectl, ["get", "node", node.name])):
        if time.monotonic() > deadline:
            raise ApplianceError(
                f"{node.name}: joined but not Ready after {READY_TIMEOUT}s",
                hint=f"`appliance status` and the kubelet's journal on {node.name}",
            )
        time.sleep(5)
    return doc


def _site_in_step(cfg: SiteConfig, extravars: dict[str, str]) -> None:
    """What follows the node list on the other nodes once a node came or went (nodeops.IN_STEP_TAGS).
    Every node of the site is in the play: the master's GPU wait reads each GPU node's facts."""
    with Progress("the site in step with its nodes (/etc/hosts, the scheduler's queues)") as progress:
        result = install(
            make_runner(), cfg, RunOptions(tags=nodeops.IN_STEP_TAGS), progress, extravars=extravars
        )
    print_recap(result)


def cmd_add(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    nodeops.check_new_node(cfg, args.node)  # before any ssh
    node = cfg.node(args.node)
    if nodeops.member(_kubectl(cfg), node.name) is not None:
        raise UsageError(
            f"{node.name} is already a member of the cluster",
            hint=f"`appliance node rejoin {node.name}` resets and joins it again",
        )
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key)  # before the node is touched
    with sitelock.site_lock(cfg, f"node add {node.name}"):
        if node in knownhosts.missing_nodes(cfg):
            trust_hosts(cfg, [node], args.yes)
        else:
            ui.info(f"{node.name}: its host key is already recorded")
        knownhosts.require_host_keys(cfg)  # the other nodes' were recorded by `hosts trust` before
        preflight_cmd.check_site(cfg, {node.name}, before_install=True)
        doc = _join_and_wait(cfg, node, gate.extravars, "add")
        _site_in_step(cfg, gate.extravars)
    ui.info(f"{node.name}: joined, labelled from the site config, Ready")
    for label in nodeops.shown_labels(doc):
        ui.info(f"  {label}")
    return 0


def cmd_remove(args: argparse.Namespace) -> int:
    path = site_file(resolve_site_arg(args))
    cfg = load_site(path)
    nodeops.check_node(cfg, args.node, draining=True, action="removing")  # before any ssh
    node = cfg.node(args.node)
    siteedit.site_without(path, node.name)  # the site must still be valid without it
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key)
    silent = nodeops.silence(cfg, node)
    if silent:
        ui.warn(f"{silent}: it is drained and deleted from the master's side only; it cannot be reset now")
    plan = None
    if nodeops.member(_kubectl(cfg), node.name) is not None:
        pods = nodeops.pods_doc(_kubectl(cfg))
        plan = nodeops.plan_drain(cfg, node.name, pods, force=args.force, silent=bool(silent))
        _show_drain(plan, args.force)
        ui.info(f"{node.name}: then `kubectl delete node {node.name}`")
    else:
        ui.info(f"{node.name}: not a member of the cluster: nothing to drain or delete")
    if not silent:
        ui.info(f"{node.name}: then kubeadm reset -f on it: {nodeops.RESET_REMOVES}")
    ui.info(f"{node.name}: then its entry in {path} is marked `removed: true`")
    if not args.yes:
        ui.confirm(f"remove {node.name} from the cluster?", "removing")
    with sitelock.site_lock(cfg, f"node remove {node.name}"):
        reset = _remove(cfg, node, plan, reset=not silent)
        siteedit.mark_removed_in_file(path, node.name)
        rest = load_site(path)
        _site_in_step(rest, gate.extravars)
    done = f"{node.name}: removed from the cluster and marked `removed: true` in {path}"
    ui.info(done if reset else f"{done}; the node itself was NOT reset (see above)")
    return 0


def _remove(cfg: SiteConfig, node: Node, plan: nodeops.DrainPlan | None, reset: bool) -> bool:
    """Drain and delete from the master, then kubeadm reset on the node; whether it was reset."""
    kubectl = _kubectl(cfg)
    if plan is not None:
        for command in plan.commands:
            kubectl(command)
        kubectl(["delete", "node", node.name, "--ignore-not-found"])
        ui.info(f"{node.name}: drained and deleted from the cluster")
    why = f"{node.name} ({node.address}) did not answer"
    if reset:
        try:
            nodeops.reset(cfg, node)
            ui.info(f"{node.name}: kubeadm reset done")
            return True
        except Unreachable as exc:  # it went away since it answered
            why = exc.message
    ui.warn(
        f"{why}: not reset; when it is back, run `kubeadm reset -f` on it (or reinstall it) before it "
        "is used again: it still holds its kubelet credentials and would register itself again"
    )
    return False
