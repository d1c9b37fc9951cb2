"""`appliance integrations render`: Kubeflow PodDefaults and MLflow job templates per project."""

from __future__ import annotations

import argparse
from pathlib import Path

from appliance_cli.cli import ui
from appliance_cli.cli.site_cmd import add_site_arg, resolve_site_arg
from appliance_cli.core import integrations
from appliance_cli.core.siteconfig import load_site


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("integrations", help="files for Kubeflow and MLflow, per project of the site")
    psub = p.add_subparsers(dest="integrations_command", metavar="ACTION", required=True)
    r = psub.add_parser(
        "render",
        help="write Kubeflow PodDefaults and MLflow job templates for each project (no cluster contact)",
    )
    add_site_arg(r)
    r.add_argument("--out", metavar="DIR", help="where to write them (default: SITE/integrations)")
    r.set_defaults(handler=cmd_render)


def cmd_render(args: argparse.Namespace) -> int:
    cfg = load_site(resolve_site_arg(args))
    out = Path(args.out) if args.out else cfg.site_dir / "integrations"
    written = integrations.render(cfg, out)
    for pf in written:
        ui.info(f"{pf.project}: namespace {pf.namespace}, scheduler {pf.scheduler}")
        for f in pf.files:
            ui.info(f"  {pf.directory / f}")
    ui.info(
        f"wrote {ui.count(len(written), 'project')} under {out}; MLflow: run `mlflow run … --backend kubernetes "
        "--backend-config kubernetes_config.json` in a project's mlflow/ directory"
    )
    return 0
