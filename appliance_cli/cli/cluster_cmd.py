"""`appliance kubeconfig` and `appliance status`."""

from __future__ import annotations

import argparse
from pathlib import Path

from rich.table import Table

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import cluster
from appliance_cli.core.siteconfig import load_site
from appliance_cli.errors import Degraded, UsageError
from appliance_cli.fsutil import atomic_write


def register(sub: argparse._SubParsersAction) -> None:
    k = sub.add_parser(
        "kubeconfig", help="print the cluster's admin kubeconfig, or write it to a file (0600)"
    )
    add_site_arg(k)
    k.add_argument("--out", metavar="FILE", help="write to FILE instead of printing")
    k.set_defaults(handler=cmd_kubeconfig)
    s = sub.add_parser("status", help="nodes, roles, versions and readiness as the cluster sees them")
    add_site_arg(s)
    s.set_defaults(handler=cmd_status)


def cmd_kubeconfig(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    text = cluster.admin_kubeconfig(cfg)
    if not args.out:
        ui.out.out(text, end="", highlight=False)
        return 0
    out = Path(args.out)
    write_private(out, text)  # it holds the admin's client key
    ui.info(f"wrote {out} (mode 0600); use: KUBECONFIG={out} kubectl get nodes")
    return 0


def write_private(out: Path, text: str) -> None:
    """Write `text` to `out` with mode 0600 from the start (a fresh temporary file renamed into place)."""
    try:
        atomic_write(out, text, mode=0o600)
    except OSError as exc:
        raise UsageError(
            f"--out {out}: cannot write: {exc.strerror or exc}",
            hint="name a file in a directory you can write",
        ) from None


def cmd_status(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    rows = cluster.nodes(cfg)
    table = Table(title=f"{cfg.site.name}: {ui.count(len(rows), 'node')}", title_justify="left")
    for col in ("node", "status", "roles", "node group", "kubelet", "runtime", "taints"):
        table.add_column(col)
    for r in rows:
        status = r.ready + ("" if r.schedulable else ",SchedulingDisabled")
        table.add_row(*map(ui.cell, (r.name, status, r.roles, r.node_group, r.version, r.runtime, r.taints)))
    ui.out.print(table)
    expected = {n.name for n in cfg.nodes}
    seen = {r.name for r in rows}
    for missing in sorted(expected - seen):
        ui.warn(f"{missing}: in appliance.yml but not in the cluster (not joined?)")
    not_ready = [r.name for r in rows if r.ready != "Ready"]
    for r in rows:
        ui.info(f"NODE {r.name} {r.ready} roles={r.roles} version={r.version}")
    if expected - seen or not_ready:
        parts = [f"not in the cluster: {', '.join(sorted(expected - seen))}"] if expected - seen else []
        parts += [f"not Ready: {', '.join(not_ready)}"] if not_ready else []
        raise Degraded(
            f"{cfg.site.name}: {'; '.join(parts)}",
            hint="`appliance install --limit NODE` (re)joins a node; its kubelet journal says why it is not Ready",
        )
    return 0
