"""Day-2 node operations on a running cluster: drain and uncordon, through kubectl on the master,
and the checks and reads that rejoin, add and remove share (the CLI drives the install).

Drain has two methods. With the Run:ai stack the guide's (seed section 7): the node is cordoned
and tainted `runai=drain:NoExecute`, which Run:ai's scheduler honours, moving its workloads
itself (SEED-COVERAGE K15). Otherwise `kubectl drain`: cordon, then evict every pod but
daemonset pods, PodDisruptionBudgets respected (kubectl retries an eviction a budget refuses
until the timeout), emptyDir data deleted; `--force` (pods no controller would recreate) only
when asked. Uncordon undoes either. Pure planning here (tested without a cluster); the kubectl
calls go through one function given by the caller. The node's own commands (is it joined, does it
answer, kubeadm reset) run over SSH at the end of this module.
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from appliance_cli.core.paths import PATHS
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import Node, SiteConfig
from appliance_cli.errors import ApplianceError, Unreachable, UsageError

RUNAI_DRAIN_TAINT = "runai=drain:NoExecute"
# kubectl drain's own limits: give up on an eviction a budget keeps refusing after this long.
DRAIN_TIMEOUT = "10m"

Kubectl = Callable[[list[str]], str]  # runs `kubectl ARGS...` (argv) on the master, returns stdout


@dataclass(frozen=True)
class PodOnNode:
    namespace: str
    name: str
    owner: str  # DaemonSet, ReplicaSet, Job, ... or "" for a bare pod
    mirror: bool  # a static pod's mirror: the kubelet owns it, nothing evicts it

    @property
    def evicted(self) -> bool:
        return self.owner != "DaemonSet" and not self.mirror


@dataclass(frozen=True)
class DrainPlan:
    node: str
    method: str  # "runai-taint" or "evict"
    commands: list[list[str]]  # kubectl arguments (argv after `kubectl`), in order
    pods: list[PodOnNode]
    warnings: list[str] = field(default_factory=list)

    @property
    def evicted(self) -> list[PodOnNode]:
        return [p for p in self.pods if p.evicted]

    @property
    def bare(self) -> list[PodOnNode]:
        """Pods no controller recreates: kubectl drain refuses them without --force."""
        return [p for p in self.evicted if not p.owner]


def pods_on(doc: dict[str, Any], node: str) -> list[PodOnNode]:
    out = []
    for item in doc.get("items") or []:
        meta, spec = item.get("metadata") or {}, item.get("spec") or {}
        if spec.get("nodeName") != node:
            continue
        owners = meta.get("ownerReferences") or []
        owner = next(
            (o.get("kind", "") for o in owners if o.get("controller")), owners[0]["kind"] if owners else ""
        )
        mirror = "kubernetes.io/config.mirror" in (meta.get("annotations") or {})
        out.append(PodOnNode(meta.get("namespace", ""), meta.get("name", ""), owner, mirror))
    return sorted(out, key=lambda p: (p.namespace, p.name))


def check_node(cfg: SiteConfig, name: str, draining: bool, action: str = "draining") -> None:
    known = [n.name for n in cfg.nodes]
    if name in {n.name for n in cfg.removed_nodes}:
        raise UsageError(
            f"node '{name}' is marked removed in the site config ({cfg.source})",
            hint=f"to bring it back: delete `removed: true` from its entry, then `appliance node add {name}`",
        )
    if name not in known:
        raise UsageError(
            f"node '{name}' is not in the site config ({cfg.source})",
            hint=f"known nodes: {', '.join(known)}",
        )
    masters = [n.name for n in cfg.masters]
    if draining and name in masters and len(masters) == 1:
        raise UsageError(
            f"{name} is the last control-plane node: {action} it stops the cluster's own management",
            hint="drain workers; the master is maintained with the cluster down",
        )


def check_new_node(cfg: SiteConfig, name: str) -> None:
    """`node add`: an entry of the site config (not removed) that is not the master."""
    check_node(cfg, name, draining=False)
    if name in {n.name for n in cfg.masters}:
        raise UsageError(
            f"{name} is the master: it is installed by `appliance install`, not added",
            hint="node add joins workers written into the site config",
        )


def plan_drain(
    cfg: SiteConfig, node: str, pods_doc: dict[str, Any], force: bool = False, silent: bool = False
) -> DrainPlan:
    """silent: the node does not answer. Its kubelet cannot confirm a pod's deletion, so its
    evicted pods stay Terminating and kubectl drain would wait for them until DRAIN_TIMEOUT and
    fail; it is told not to wait for a pod once its grace period is over."""
    check_node(cfg, node, draining=True)
    pods = pods_on(pods_doc, node)
    if cfg.scheduler.stack == "runai":
        commands = [["cordon", node], ["taint", "nodes", node, RUNAI_DRAIN_TAINT, "--overwrite"]]
        return DrainPlan(node, "runai-taint", commands, pods, _only_system_node(cfg, node))
    drain = ["drain", node, "--ignore-daemonsets", "--delete-emptydir-data", f"--timeout={DRAIN_TIMEOUT}"]
    drain += ["--force"] if force else []
    drain += ["--skip-wait-for-delete-timeout=1"] if silent else []
    return DrainPlan(node, "evict", [drain], pods)


def _only_system_node(cfg: SiteConfig, node: str) -> list[str]:
    """The appliance guide (Run:ai System Nodes): with no second system node, "designate an
    arbitrary node on the cluster as a Run:ai system node" before the maintenance."""
    system = [n.name for n in cfg.nodes if "runai-system" in n.roles]
    if system != [node]:
        return []
    return [
        f"{node} is the only runai-system node: Run:ai's system services have nowhere to go while it "
        "is drained; designate another node first, as the guide says (add 'runai-system' to its "
        "roles in appliance.yml, then `appliance install --limit <that node>`, which sets the label "
        "`runai-adm set node-role --runai-system-worker` sets)"
    ]


def plan_uncordon(cfg: SiteConfig, node: str, node_doc: dict[str, Any]) -> list[list[str]]:
    """Only what is there to undo: a re-run on a schedulable node runs nothing."""
    check_node(cfg, node, draining=False)
    spec = node_doc.get("spec") or {}
    commands: list[list[str]] = []
    if any(t.get("key") == "runai" and t.get("effect") == "NoExecute" for t in spec.get("taints") or []):
        commands.append(["taint", "nodes", node, "runai:NoExecute-"])
    if spec.get("unschedulable"):
        commands.append(["uncordon", node])
    return commands


def read_json(kubectl: Kubectl, args: list[str]) -> dict[str, Any]:
    out = kubectl([*args, "-o", "json"])
    try:
        data: dict[str, Any] = json.loads(out)
    except json.JSONDecodeError:
        raise ApplianceError(f"kubectl {shlex.join(args)}: no JSON in its answer") from None
    return data


def member(kubectl: Kubectl, name: str) -> dict[str, Any] | None:
    """The cluster's Node object of that name; None when the cluster has no such node (read from
    the list: a NotFound is kubectl's error, not an answer)."""
    items = read_json(kubectl, ["get", "nodes"]).get("items") or []
    return next((n for n in items if (n.get("metadata") or {}).get("name") == name), None)


def pods_doc(kubectl: Kubectl) -> dict[str, Any]:
    """Every pod; pods_on() keeps the node's (one call, no field selector to depend on)."""
    return read_json(kubectl, ["get", "pods", "-A"])


# What `kubeadm reset -f` removes on a worker (1.23): said before it runs.
RESET_REMOVES = (
    f"stops the kubelet and deletes the node's cluster identity: {PATHS.kubelet_conf}, "
    "/etc/kubernetes/pki, /var/lib/kubelet (running containers of the node stop); containerd, its "
    "images, the CNI configuration and the packages stay"
)
KUBELET_CONF = PATHS.kubelet_conf  # roles/appliance_paths


# What follows the site's node list on the other nodes: every /etc/hosts (os_prereqs' hosts task)
# and, on the master, the scheduler stack (an over-quota queue may borrow every GPU of the site).
# Run after a node comes or goes, so that a later full install changes nothing.
IN_STEP_TAGS = "os_prereqs_hosts,scheduler_stack"

# Labels every kubelet sets itself: not worth showing after a join.
_KUBELET_LABEL_PREFIXES = ("beta.kubernetes.io/", "kubernetes.io/", "feature.node.kubernetes.io/")


def shown_labels(node_doc: dict[str, Any]) -> list[str]:
    """`key=value` of the labels the appliance (node roles, the GPU layer) gave the node."""
    labels = (node_doc.get("metadata") or {}).get("labels") or {}
    return [f"{k}={v}" for k, v in sorted(labels.items()) if not k.startswith(_KUBELET_LABEL_PREFIXES)]


def ready(node_doc: dict[str, Any]) -> bool:
    conditions = (node_doc.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


RESET_TIMEOUT = 300


def joined(cfg: SiteConfig, node: Node) -> bool:
    """Whether the node holds kubelet credentials (KUBELET_CONF), asked on the node itself."""
    script = 'test -f "$1" && echo joined || echo not-joined'
    answer = run_on(cfg, node, ["sh", "-c", script, "sh", KUBELET_CONF]).strip()
    if answer not in ("joined", "not-joined"):
        raise ApplianceError(f"{node.name}: unexpected answer to `test -f {KUBELET_CONF}`: {answer[:80]!r}")
    return answer == "joined"


def reset(cfg: SiteConfig, node: Node) -> None:
    """`kubeadm reset -f` on the node (what it removes: RESET_REMOVES); Unreachable if it is gone."""
    run_on(cfg, node, ["kubeadm", "reset", "-f"], timeout=RESET_TIMEOUT)


def silence(cfg: SiteConfig, node: Node) -> str:
    """Why the node does not answer over SSH, or "" when it does."""
    try:
        run_on(cfg, node, ["true"], timeout=30)
    except Unreachable as exc:
        return exc.message
    return ""
