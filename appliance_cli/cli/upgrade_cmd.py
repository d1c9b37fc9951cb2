"""`appliance upgrade plan|apply --bundle NEW`: what an upgrade would do, refused in one line if it
cannot; then doing it, one pass per Kubernetes version, resumable from the master's state."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.cli.install_cmd import make_runner
from appliance_cli.cli.progress import Progress, print_recap
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import bundlegate, siteedit, sitelock, upgradeplan, upgradestate
from appliance_cli.core.install import run_playbook
from appliance_cli.core.siteconfig import SiteConfig, load_site, site_file
from appliance_cli.runner.events import RunOptions


def register(sub: argparse._SubParsersAction) -> None:
    up = sub.add_parser("upgrade", help="upgrade the appliance to a new bundle")
    usub = up.add_subparsers(dest="upgrade_command", metavar="ACTION", required=True)
    p = usub.add_parser(
        "plan",
        help="verify the new bundle, read what is installed, print component: current -> target and the "
        "steps in order; changes nothing",
    )
    add_site_arg(p)
    p.add_argument("--bundle", metavar="DIR", required=True, help="the new bundle")
    p.add_argument("--key", metavar="PUB", help="trusted public key (default: as for install)")
    p.set_defaults(handler=cmd_plan)
    a = usub.add_parser(
        "apply",
        help="do the plan: an etcd snapshot on the master, kubeadm upgrade apply there, then the "
        "workers one at a time (drain, kubeadm upgrade node, kubelet, Ready, uncordon), containerd in "
        "each node's own window (from the new bundle's apt repository), then the charts "
        "with their saved values (helm get values, helm upgrade -f); run again after a failure, it goes "
        "on from the node or chart that failed",
    )
    add_site_arg(a)
    a.add_argument("--bundle", metavar="DIR", required=True, help="the new bundle, as this machine sees it")
    a.add_argument("--key", metavar="PUB", help="trusted public key (default: as for install)")
    a.add_argument(
        "--master-bundle",
        metavar="DIR",
        help="the new bundle as the master sees it (default: the same path as --bundle)",
    )
    a.add_argument("--yes", action="store_true", help="do not ask for confirmation")
    a.set_defaults(handler=cmd_apply)


def cmd_plan(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    _, plan = _verified_plan(cfg, args)
    for line in upgradeplan.render(plan, cfg):
        ui.info(line)
    return 0


def cmd_apply(args: argparse.Namespace) -> int:
    path = site_file(resolve_site_arg(args))
    cfg = load_site(path)
    gate, plan = _verified_plan(cfg, args)
    for line in upgradeplan.render(plan, cfg):
        ui.info(line)
    if plan.empty:
        return 0
    if not args.yes:
        ui.confirm(f"upgrade {cfg.site.name}?", "upgrading")
    on_master = args.master_bundle or str(Path(args.bundle).expanduser().resolve())
    with sitelock.site_lock(cfg, "upgrade apply"):
        for version in plan.passes:
            extravars = gate.extravars | {
                "appliance_kubernetes_version": version,
                "appliance_bundle_source": on_master,
                # the charts move once, when every node is at the final version
                "chart_upgrade_enabled": "true" if version == plan.passes[-1] else "false",
            }
            with Progress(f"upgrade to {version}") as progress:
                result = run_playbook(make_runner(), cfg, "upgrade.yml", RunOptions(), progress, extravars)
            print_recap(result)
        goal = plan.passes[-1]
        siteedit.set_kubernetes_version_in_file(path, goal)
    done = upgradestate.applied(cfg)
    ui.info(f"{cfg.site.name}: upgraded to Kubernetes {goal}; {path}: kubernetes.version is {goal} now")
    if done.snapshot:
        ui.info(f"etcd snapshot taken before the upgrade: {cfg.master.name}:{done.snapshot}")
    ui.info(
        f"from now on the site's bundle is {args.bundle}: point bundle.source (and bundle.master_source) "
        "at it for later installs"
    )
    for release, change in sorted(done.charts.items()):
        where = f"{cfg.master.name}:{upgradestate.CHART_VALUES_DIR}"
        ui.info(f"chart {release}: {change}, with its saved values ({where})")
    return 0


def _verified_plan(
    cfg: SiteConfig, args: argparse.Namespace
) -> tuple[bundlegate.GateResult, upgradeplan.Plan]:
    """The new bundle verified, what is installed read, and the plan (UpgradeRefused if impossible)."""
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key, upgrade=True)
    ui.info(gate.summary)
    return gate, upgradestate.plan(cfg, Path(args.bundle).expanduser())
