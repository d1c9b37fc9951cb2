"""`appliance upgrade plan --bundle NEW`: what an upgrade would do, refused in one line if it cannot."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import bundlegate, cluster, upgradeplan
from appliance_cli.core.remote import run_on
from appliance_cli.core.siteconfig import load_site
from appliance_cli.errors import ApplianceError


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


def cmd_plan(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    gate = bundlegate.check(cfg, bundle=args.bundle, key=args.key)
    ui.info(gate.summary)
    root = Path(args.bundle).expanduser()
    manifest = json.loads((root / "manifest.json").read_text())
    target = upgradeplan.target_of(manifest, upgradeplan.chart_metadata(root, manifest))

    def kubectl_json(a: str) -> Any:
        return _json(cluster.kubectl(cfg, f"{a} -o json", timeout=120), f"kubectl {a}")

    def helm_json(a: str) -> Any:
        out = run_on(
            cfg, cfg.master, f"helm --kubeconfig /etc/kubernetes/admin.conf {a} -o json", timeout=120
        )
        return _json(out, f"helm {a}")

    installed = upgradeplan.installed_from(kubectl_json, helm_json)
    plan = upgradeplan.plan_upgrade(cfg, installed, target)
    for line in upgradeplan.render(plan, cfg):
        ui.info(line)
    return 0


def _json(text: str, what: str) -> Any:
    try:
        return json.loads(text or "null")
    except json.JSONDecodeError:
        raise ApplianceError(f"{what}: no JSON in its answer") from None
