"""Read the cluster's state from the master: admin kubeconfig, nodes with roles and versions."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from appliance_cli.core.paths import PATHS
from appliance_cli.core.remote import RemoteFailed, run_on
from appliance_cli.core.siteconfig import SiteConfig
from appliance_cli.errors import ApplianceError, Unreachable

ADMIN_CONF = PATHS.admin_conf  # roles/appliance_paths
KUBECTL = ("kubectl", "--kubeconfig", ADMIN_CONF)  # argv


@dataclass(frozen=True)
class NodeRow:
    name: str
    ready: str
    roles: str
    version: str
    runtime: str
    node_group: str
    schedulable: bool
    taints: str


def admin_kubeconfig(cfg: SiteConfig) -> str:
    text = run_on(cfg, cfg.master, ["cat", ADMIN_CONF])
    if "clusters:" not in text:
        raise ApplianceError(
            f"{cfg.master.name}: {ADMIN_CONF} is not a kubeconfig",
            hint="has `appliance install` completed the control plane?",
        )
    return text


def parse_nodes(doc: dict[str, Any]) -> list[NodeRow]:
    rows = []
    for item in doc.get("items", []):
        meta, spec, status = item.get("metadata", {}), item.get("spec", {}), item.get("status", {})
        labels = meta.get("labels", {}) or {}
        ready = next(
            (c.get("status") for c in status.get("conditions", []) if c.get("type") == "Ready"), "Unknown"
        )
        roles = sorted(k.split("/", 1)[1] for k in labels if k.startswith("node-role.kubernetes.io/"))
        info = status.get("nodeInfo", {})
        taints = ", ".join(
            f"{t.get('key')}={t.get('value', '')}:{t.get('effect')}" for t in spec.get("taints", []) or []
        )
        rows.append(
            NodeRow(
                name=meta.get("name", "?"),
                ready={"True": "Ready", "False": "NotReady"}.get(ready, "Unknown"),
                roles=",".join(roles) or "<none>",
                version=info.get("kubeletVersion", "?"),
                runtime=info.get("containerRuntimeVersion", "?"),
                node_group=labels.get("run.ai/type", ""),
                schedulable=not spec.get("unschedulable", False),
                taints=taints,
            )
        )
    return rows


# What kubectl says when it cannot reach the API server at all (as opposed to a refused request).
_API_DOWN = ("The connection to the server", "Unable to connect to the server", "connection refused")


def kubectl(cfg: SiteConfig, args: list[str], timeout: int = 60, stdin: str | None = None) -> str:
    """`kubectl ARGS...` on the master with the admin kubeconfig (ARGS: argv, never shell text); an
    API server that does not answer is Unreachable, a refused request a RemoteFailed with kubectl's words."""
    try:
        return run_on(cfg, cfg.master, [*KUBECTL, *args], timeout=timeout, stdin=stdin)
    except RemoteFailed as exc:
        if any(s in exc.stderr for s in _API_DOWN):
            raise Unreachable(
                f"{cfg.master.name}: the Kubernetes API server does not answer: "
                f"{exc.stderr.strip().splitlines()[-1]}",
                hint="is the control plane installed and kubelet running on the master? (`appliance install`)",
            ) from None
        raise


def nodes(cfg: SiteConfig) -> list[NodeRow]:
    out = kubectl(cfg, ["get", "nodes", "-o", "json"])
    try:
        return parse_nodes(json.loads(out))
    except json.JSONDecodeError:
        raise ApplianceError(f"{cfg.master.name}: kubectl returned no JSON") from None
